"""Model sets: the JSON file that lists what the gate guards, read and checked in full before
any work (one line naming the first problem).

::

    {"version": 1,
     "options": {"budget": 8, "seed": 0, "use_streams": false},
     "gate": {"threshold": 0.05, "rounds": 30},
     "models": [{"name": "nasrnn", "zoo": "nasrnn", "size": "tiny"},
                {"name": "mine", "path": "models/mine.onnx", "input_shapes": {"x": [1, 3, 224, 224]},
                 "inputs": "models/mine_inputs.npz", "options": {"threshold": 32},
                 "exclude_rules": ["SplitConv"], "gate": {"threshold": 0.08},
                 "precision": "bf16,int8", "max_error": "nmse=1e-3",
                 "calibration": "data/mine_calib/", "validation": "data/mine_val/"}]}

``options`` are :func:`gspo.optimize`'s keyword arguments (for the set, then per model);
``gate`` holds the gate's own settings: ``threshold`` (the slowdown allowed, 0.05 = 5%) and
``rounds`` (interleaved rounds before the one extension). ``precision`` (a list, or
``"bf16,int8"``) opts a model into reduced precision within ``max_error`` (an accuracy budget,
:class:`~gspo.precision.accuracy.ErrorBudget`), tuned on ``calibration`` and judged on
``validation`` (an ``.npz`` or a folder of them; random inputs when not given); the set may give
``precision`` and ``max_error`` for every model (a model's ``"precision": null`` opts out).
Paths are relative to the set's file.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gspo.errors import GspoError, read_json
from gspo.regress.stats import THRESHOLD
from gspo.search.config import MAX_SECONDS, MAX_SEED
from gspo.search.options import MaxError

__all__ = ["ModelSet", "ModelSpec", "data_files", "describe_path", "load_modelset", "ROUNDS", "VERSION"]

VERSION = 1
#: Interleaved rounds per comparison before the one extension (which doubles them).
ROUNDS = 30
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _int(low: int | None = None, high: int | None = None, null: bool = False):
    def check(v):
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            return "an integer" + (" or null" if null else "")
        if (low is not None and v < low) or (high is not None and v > high):
            return f"an integer in [{low}, {'inf' if high is None else high}]"
        return None
    return check


def _number(low: float, low_open: bool = False, null: bool = False, high: float | None = None):
    def check(v):
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return "a finite number" + (" or null" if null else "")
        if v < low or (low_open and v == low):
            return f"a number {'>' if low_open else '>='} {low:g}"
        if high is not None and v > high:
            return f"a number <= {high:g}"
        return None
    return check


def _bool(v):
    return None if isinstance(v, bool) else "true or false"


def _choice(*values):
    return lambda v: None if v in values else "one of " + ", ".join(map(repr, values))


def _names(v):
    ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    return None if ok else "a list of names"


#: The optimize options a model set may give, each with its check (``None``: valid, else what it
#: must be): the command line's bounds (a seed numpy takes, a time budget of at most a week).
OPTIONS = {
    "budget": _int(0), "seed": _int(0, MAX_SEED), "jobs": _int(0), "use_streams": _bool, "use_rules": _bool,
    "threshold": _int(2), "alpha": _number(1), "max_streams": _int(1, null=True),
    "time_budget": _number(0, low_open=True, null=True, high=MAX_SECONDS), "select": _choice("measured", "estimated"),
    "backends": _names, "timing_runs": _int(5), "keep": _int(1),
}
GATE = {"threshold": _number(0, low_open=True), "rounds": _int(6)}
#: The keys of reduced precision (the two data paths only per model: they follow its inputs).
_PRECISION_KEYS = ("precision", "max_error", "calibration", "validation")
_MODEL_KEYS = {"name", "zoo", "size", "seed", "path", "input_shapes", "inputs", "options", "exclude_rules", "gate",
               *_PRECISION_KEYS}
_SET_KEYS = {"version", "options", "exclude_rules", "gate", "models", "description", "precision", "max_error"}


@dataclass(frozen=True)
class ModelSpec:
    """One model of a set, checked: where it comes from and how it is optimized and judged."""

    name: str
    zoo: str | None = None
    size: str = "tiny"
    zoo_seed: int = 0
    path: Path | None = None
    input_shapes: dict = field(default_factory=dict)
    inputs: Path | None = None
    options: dict = field(default_factory=dict)
    exclude_rules: tuple[str, ...] = ()
    threshold: float = THRESHOLD
    rounds: int = ROUNDS
    #: Reduced precisions searched besides fp32 (empty: exact fp32 only, no accuracy judged).
    precision: tuple[str, ...] = ()
    #: The accuracy budget, parsed as the set was read (its spec canonical: the same budget
    #: written two ways is one, in the cache key too).
    max_error: MaxError | None = None
    calibration: Path | None = None
    validation: Path | None = None

    def data(self) -> dict[str, Path]:
        """The calibration and validation data given (an ``.npz`` or a folder), by kind."""
        return {k: p for k, p in (("calibration", self.calibration), ("validation", self.validation)) if p is not None}

    def files(self) -> list[Path]:
        """The files this model reads (the gate never writes onto them): with its data's samples."""
        return [p for p in (self.path, self.inputs) if p is not None] + [
            f for p in self.data().values() for f in data_files(p)]


def data_files(path: Path) -> list[Path]:
    """The samples' files of a data path: itself, or a folder's ``.npz`` files by name."""
    if not path.is_dir():
        return [path]
    return sorted(f for f in path.iterdir() if f.name.endswith(".npz") and f.is_file())


@dataclass(frozen=True)
class ModelSet:
    """A checked model set: its file, its models, and notes on what was adjusted."""

    path: Path
    models: tuple[ModelSpec, ...]
    notes: tuple[str, ...] = ()

    def files(self) -> list[Path]:
        """Every file the set reads: the set itself, its models and their inputs."""
        return [self.path] + [f for m in self.models for f in m.files()]

    def reads(self) -> list[Path]:
        """What no output may be: :meth:`files`, and the data folders given, whose every path
        (existing or not) :func:`gspo.outputs.check_outputs` keeps outputs out of."""
        return self.files() + [p for m in self.models for p in m.data().values() if p.is_dir()]


#: A model set file larger than this is not one (a set of a thousand models is under 1 MB).
MAX_SET_BYTES = 64 * 2**20


def describe_path(path: Path) -> str | None:
    """Why ``path`` is not a file to read (a folder, a device, absent), or ``None`` when it is one."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot read ({e.strerror or e})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a device, FIFO or socket)"
    return None


def _read(path: Path) -> dict:
    problem = describe_path(path)
    if problem == "is a folder, not a file":
        raise GspoError(f"{path}: is a folder, not a model set file")
    if problem:
        raise GspoError(f"{path}: {problem}" + (", not a model set file" if "regular" in problem else ""))
    if path.stat().st_size > MAX_SET_BYTES:
        raise GspoError(f"{path}: too large for a model set ({path.stat().st_size} bytes; at most "
                        f"{MAX_SET_BYTES // 2**20} MB)")
    data = read_json(path, "model set")
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise GspoError(f"{path}: not a gspo model set (expected a JSON object with \"version\": {VERSION})")
    return data


def _checked(where: str, table: dict, given, notes: list[str]) -> dict:
    """``given`` (a JSON object) checked against ``table``; ``jobs`` capped at the cores."""
    if not isinstance(given, dict):
        raise GspoError(f"{where}: must be a JSON object")
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise GspoError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(table))})")
    for key, value in given.items():
        problem = table[key](value)
        if problem:
            raise GspoError(f"{where}: {key} must be {problem} (got {json.dumps(value)})")
    out = dict(given)
    cores = os.cpu_count() or 1
    if out.get("jobs", 0) > cores:
        notes.append(f"{where}: jobs {out['jobs']} capped at the {cores} CPU cores")
        out["jobs"] = cores
    return out


def _shapes(where: str, given) -> dict:
    if not isinstance(given, dict):
        raise GspoError(f"{where}: input_shapes must be an object of input name -> [dims] "
                        f"(e.g. {{\"x\": [1, 3, 224, 224]}}), got {type(given).__name__}")
    for name, dims in given.items():
        if not isinstance(dims, list) or not dims or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            raise GspoError(f"{where}: input_shapes[{name!r}] must be a list of positive integers")
    return {k: list(v) for k, v in given.items()}


def _rules(where: str, given) -> tuple[str, ...]:
    from gspo.rules import DEFAULT_RULES

    if _names(given):
        raise GspoError(f"{where}: exclude_rules must be a list of rule names")
    unknown = set(given) - {r.name for r in DEFAULT_RULES}
    if unknown:
        raise GspoError(f"{where}: unknown rule(s) in exclude_rules: {', '.join(sorted(unknown))}")
    return tuple(given)


def _precisions(where: str, given) -> tuple[str, ...]:
    """``precision`` (``"bf16,int8"`` or a list; ``null``: none) as a tuple, checked."""
    from gspo.precision import PRECISIONS

    if given is None:
        return ()
    items = given.split(",") if isinstance(given, str) else given
    if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
        raise GspoError(f"{where}: precision must be a list or a comma-separated string of {', '.join(PRECISIONS)} "
                        f"(got {json.dumps(given)})")
    found = tuple(dict.fromkeys(p.strip().lower() for p in items if p.strip()))
    unknown = [p for p in found if p not in PRECISIONS]
    if unknown:
        raise GspoError(f"{where}: unknown precision {', '.join(map(repr, unknown))} (known: {', '.join(PRECISIONS)})")
    if not any(p != "fp32" for p in found):
        raise GspoError(f"{where}: precision names no reduced precision: give bf16, int8 or both (fp32 is always "
                        "a candidate)")
    return found


def _budget(where: str, given) -> MaxError:
    """``max_error`` parsed once, as the set is read (:meth:`ErrorBudget.parse`), under its
    canonical spec."""
    from gspo.precision.accuracy import ErrorBudget

    if not isinstance(given, str):
        raise GspoError(f"{where}: max_error must be a budget such as \"nmse=1e-3\" (got {json.dumps(given)})")
    try:
        budget = ErrorBudget.parse(given)
    except GspoError as e:
        text = str(e)
        text = text[len("--max-error"):] if text.startswith("--max-error") else f": {text}"
        raise GspoError(f"{where}: max_error{text}") from None
    return MaxError(str(budget), budget)


def _data_path(where: str, base: Path, kind: str, given) -> Path:
    """A ``calibration`` or ``validation`` path (relative to the set), there and holding samples."""
    if not isinstance(given, str) or not given:
        raise GspoError(f"{where}: {kind} must be the path of an .npz file or of a folder of them")
    path = base / given
    if not path.exists():
        raise GspoError(f"{where}: {kind} {path}: no such file or folder")
    if path.is_dir() and not data_files(path):
        raise GspoError(f"{where}: {kind} {path}: no .npz file in the folder (one sample per .npz file)")
    return path


def _precision_fields(where: str, base: Path, top: dict, m: dict) -> dict:
    """A model's reduced-precision fields (its own over the set's), checked together."""
    precision = _precisions(where, m["precision"]) if "precision" in m else top["precision"]
    max_error = _budget(where, m["max_error"]) if "max_error" in m else top["max_error"]
    data = {k: _data_path(where, base, k, m[k]) for k in _PRECISION_KEYS[2:] if k in m}
    if not precision:
        own = [k for k in _PRECISION_KEYS[1:] if k in m]
        if own:
            raise GspoError(f"{where}: {own[0]} applies to reduced precision: give \"precision\" (bf16, int8 or both)")
        return {}
    if max_error is None:
        raise GspoError(f"{where}: precision needs an accuracy budget: give \"max_error\" (e.g. \"nmse=1e-3\", "
                        "\"cosine=0.999\" or \"top1=0.99\")")
    if len(data) == 2 and os.path.realpath(data["calibration"]) == os.path.realpath(data["validation"]):
        raise GspoError(f"{where}: validation must not be the calibration data (both are {data['validation']})")
    return {"precision": precision, "max_error": max_error, **data}


def _source(where: str, base: Path, m: dict) -> dict:
    from gspo.zoo import MODELS, SIZES

    if ("zoo" in m) == ("path" in m):
        raise GspoError(f"{where}: needs exactly one of \"zoo\" and \"path\"")
    if "zoo" in m:
        if m["zoo"] not in MODELS:
            raise GspoError(f"{where}: unknown zoo model {m['zoo']!r} (known: {', '.join(MODELS)})")
        if m.get("size", "tiny") not in SIZES:
            raise GspoError(f"{where}: size must be one of {', '.join(SIZES)}")
        problem = _int(0, MAX_SEED)(m.get("seed", 0))
        if problem:
            raise GspoError(f"{where}: seed must be {problem} (got {json.dumps(m.get('seed'))})")
        return {"zoo": m["zoo"], "size": m.get("size", "tiny"), "zoo_seed": m.get("seed", 0)}
    if not isinstance(m["path"], str):
        raise GspoError(f"{where}: path must be a string")
    return {"path": base / m["path"]}


def _model(base: Path, data: dict, m, i: int, notes: list[str]) -> ModelSpec:
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not _NAME.match(m["name"]):
        raise GspoError(f"model #{i}: needs a \"name\" of letters, digits, '.', '_' or '-' (it names its artifact folder)")
    where = f"model {m['name']!r}"
    unknown = sorted(set(m) - _MODEL_KEYS)
    if unknown:
        raise GspoError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_MODEL_KEYS))})")
    options = {**data["options"], **_checked(f"{where} options", OPTIONS, m.get("options", {}), notes)}
    gate = {**data["gate"], **_checked(f"{where} gate", GATE, m.get("gate", {}), notes)}
    inputs = m.get("inputs")
    if inputs is not None and not isinstance(inputs, str):
        raise GspoError(f"{where}: inputs must be the path of an .npz file")
    return ModelSpec(
        name=m["name"], **_source(where, base, m), input_shapes=_shapes(where, m.get("input_shapes", {})),
        inputs=base / inputs if inputs else None, options=options,
        exclude_rules=tuple(dict.fromkeys(data["exclude_rules"] + _rules(where, m.get("exclude_rules", [])))),
        threshold=gate.get("threshold", THRESHOLD), rounds=gate.get("rounds", ROUNDS),
        **_precision_fields(where, base, data, m))


def load_modelset(path: str | os.PathLike, threshold: float | None = None, rounds: int | None = None) -> ModelSet:
    """The model set at ``path``, checked in full.

    ``threshold`` and ``rounds`` (the command line's) replace the set's own ``gate`` settings
    for every model that does not set its own.

    Raises:
        GspoError: one line naming the first problem (unknown key, wrong type, missing model...).
    """
    p = Path(path)
    data = _read(p)
    unknown = sorted(set(data) - _SET_KEYS)
    if unknown:
        raise GspoError(f"{p}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_SET_KEYS))})")
    notes: list[str] = []
    gate = _checked("the set's gate", GATE, data.get("gate", {}), notes)
    if threshold is not None:
        gate["threshold"] = threshold
    if rounds is not None:
        gate["rounds"] = rounds
    top = {"options": _checked("the set's options", OPTIONS, data.get("options", {}), notes), "gate": gate,
           "exclude_rules": _rules("the set", data.get("exclude_rules", [])),
           "precision": _precisions("the set", data.get("precision")),
           "max_error": _budget("the set", data["max_error"]) if "max_error" in data else None}
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise GspoError(f"{p}: the model set lists no models")
    specs = [_model(p.parent, top, m, i, notes) for i, m in enumerate(models)]
    seen = set()
    for s in specs:
        if s.name in seen:
            raise GspoError(f"{p}: model name {s.name!r} appears twice")
        seen.add(s.name)
    return ModelSet(p, tuple(specs), tuple(dict.fromkeys(notes)))
