"""The measured gate: ``gspo regress SET --record DIR`` and ``gspo regress SET --against DIR``.

:func:`run_gate` checks the model set and every output before any work, makes each model's
:class:`~gspo.regress.job.Job` (the source's bytes, its inputs, the baseline artifact, a stored
candidate that may be reused), runs the jobs on an engine (:mod:`gspo.regress.engines`), stores
the candidates when recording, and returns a :class:`GateRun` for the outputs.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gspo.errors import GspoError
from gspo.regress import store
from gspo.regress.engines import ENGINES
from gspo.regress.job import RECORDED, Job, Result, exit_code
from gspo.regress.modelset import ModelSet, ModelSpec, describe_path, load_modelset

__all__ = ["Engine", "GateRun", "GateSettings", "run_gate"]


@dataclass(frozen=True)
class Engine:
    """Where the jobs run: ``local`` (here), or ``ray`` (one job per model on the Ray cluster at
    ``address``)."""

    name: str = "local"
    address: str | None = None


@dataclass(frozen=True)
class GateSettings:
    """Gate settings that replace the model set's (``None``: the set's); a model's own still win."""

    threshold: float | None = None
    rounds: int | None = None


@dataclass
class GateRun:
    """A gate run: the set, the mode, every model's result, the versions and machine of the driver."""

    modelset: ModelSet
    mode: str
    results: list[Result]
    versions: dict
    machine: dict
    engine: str
    seconds: float
    notes: list[str] = field(default_factory=list)
    against: str | None = None
    record: str | None = None

    @property
    def exit_code(self) -> int:
        """0: no model fails; 1: one does; 2: one could not be optimized or timed."""
        return exit_code(self.results)


def _source_bytes(spec: ModelSpec) -> bytes:
    if spec.zoo is not None:
        from gspo.ir import serialize
        from gspo.zoo import build

        return serialize(build(spec.zoo, spec.size, spec.zoo_seed))
    try:
        return spec.path.read_bytes()
    except OSError as e:
        raise GspoError(f"model {spec.name!r}: {spec.path}: cannot read ({e.strerror or e})") from None


def _external_files(spec: ModelSpec, data: bytes) -> dict[str, Path]:
    """The files the model keeps weights in, by their location beside it (``weights/w.bin``);
    a location outside the model's folder, or a file that is not there, is left out (loading
    the model then refuses it, naming the user's file)."""
    if spec.path is None or b"location" not in data:  # no external data (a quick look, no parse)
        return {}
    from gspo.ir.external import external_locations, read_header

    model = read_header(data)
    if model is None:  # not ONNX: loading it says so
        return {}
    root = os.path.realpath(spec.path.parent)
    found = {}
    for loc in external_locations(model):
        target = os.path.realpath(os.path.join(root, loc)) if not os.path.isabs(loc) else ""
        if target and os.path.commonpath([root, target]) == root and os.path.isfile(target):
            found[loc] = Path(target)
    return found


def _digest(files: dict[str, Path | bytes]) -> str:
    """One sha256 of the external files' locations and contents ("" when there are none)."""
    if not files:
        return ""
    h = hashlib.sha256()
    for loc in sorted(files):
        h.update(loc.encode() + b"\0")
        f = files[loc]
        if isinstance(f, bytes):
            h.update(f)
            continue
        with open(f, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def _job_factory(spec: ModelSpec, against: Path | None, reuse: bool, measure: bool, keep: bool,
                 ship: bool = False) -> Callable[[], Job]:
    """What makes ``spec``'s job: its model's bytes with the files of its external weights, copied
    from the user's folder when the job runs here, carried as bytes when ``ship`` (a cluster)."""
    def make() -> Job:
        from gspo.regress.accuracy import data_digest, ship_data
        from gspo.runtime.inputs import read_npz

        baseline = store.read_artifact(against, spec.name) if against is not None else None
        cached = (baseline.model, baseline.report, baseline.meta["key"]) if baseline is not None and reuse else None
        source = _source_bytes(spec)
        external: dict[str, Path | bytes] = dict(_external_files(spec, source))
        if ship:
            external = {loc: f.read_bytes() for loc, f in external.items()}
        origin = str(spec.path) if spec.path is not None else f"zoo model {spec.zoo!r}"
        return Job(spec, source, read_npz(str(spec.inputs)) if spec.inputs else None,
                   baseline.model if baseline is not None else None, cached, measure, keep,
                   external={k: v if isinstance(v, bytes) else str(v) for k, v in external.items()},
                   weights_sha256=_digest(external), origin=origin,
                   data=ship_data(spec) if ship else {k: str(p) for k, p in spec.data().items()},
                   data_sha256=data_digest(spec))
    return make


def _check_files(mset: ModelSet) -> None:
    for spec in mset.models:
        for f in spec.files():
            problem = describe_path(f)
            if problem:
                raise GspoError(f"model {spec.name!r}: {f}: {problem}")


def _store(record: Path, mset: ModelSet, results: list[Result], versions: dict, force: bool) -> None:
    for r in results:
        if r.candidate is None or r.verdict in ("ERROR", "NOT EQUIVALENT", "INACCURATE"):
            continue
        spec = next(s for s in mset.models if s.name == r.name)
        meta = {"name": r.name, "source_sha256": r.source_sha256, "key": r.key, "options": spec.options,
                "exclude_rules": list(spec.exclude_rules), "input_shapes": spec.input_shapes,
                "versions": r.versions, "machine": r.machine}
        if spec.precision:  # what it was optimized within (optimize's report has the choice and its error)
            meta["precision"] = {"precision": list(spec.precision), "max_error": spec.max_error.spec,
                                 **{k: str(p) for k, p in spec.data().items()}}
        store.write_artifact(record, r.name, r.candidate, r.report or {}, meta, overwrite=force)
    store.write_index(record, str(mset.path), [r.name for r in results if r.candidate is not None], versions,
                      overwrite=force)


def run_gate(modelset: str | os.PathLike, against: str | os.PathLike | None = None,
             record: str | os.PathLike | None = None, force: bool = False, reuse: bool = True,
             engine: Engine = Engine(), settings: GateSettings = GateSettings(), progress=None) -> GateRun:
    """Optimize, time and judge every model of ``modelset`` (see the module docstring).

    Args:
        against: the artifact folder of the baseline (time and judge); ``None``: record only.
        record: the folder to store each model's optimized result in.
        force: replace existing artifacts in ``record``.
        reuse: reuse a stored candidate whose cache key is unchanged (see :mod:`gspo.regress.store`).
        engine: where the jobs run (``local``, or ``ray`` with its address).
        settings: the threshold and rounds that replace the set's (a model's own still win).
        progress: called with ``(event, index, name, result)``.

    Raises:
        GspoError: a bad model set, a missing file, an output that would overwrite an input.
    """
    if against is None and record is None:
        raise GspoError("give --against DIR (time against a baseline), --record DIR, or --estimate")
    if engine.name not in ENGINES:
        raise GspoError(f"unknown engine {engine.name!r} (use {' or '.join(ENGINES)})")
    mset = load_modelset(modelset, settings.threshold, settings.rounds)
    _check_files(mset)
    if against is not None:
        store.read_index(against)
    if record is not None:
        inputs = mset.reads() + ([p for s in mset.models for p in store.artifact_paths(against, s.name).values()]
                                 + [Path(against) / store.INDEX] if against is not None else [])
        store.check_store(record, [s.name for s in mset.models], inputs, force)
    versions = store.versions()
    began = time.perf_counter()
    factories = [_job_factory(s, Path(against) if against else None, reuse, against is not None, record is not None,
                              ship=engine.name != "local") for s in mset.models]
    results = ENGINES[engine.name](factories, [s.name for s in mset.models], progress, address=engine.address)
    if record is not None:
        _store(Path(record), mset, results, versions, force)
    mode = "against" if against is not None else RECORDED
    return GateRun(mset, mode, results, versions, store.machine(), engine.name, time.perf_counter() - began,
                   list(mset.notes), str(against) if against else None, str(record) if record else None)
