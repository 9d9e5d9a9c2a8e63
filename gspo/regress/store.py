"""The artifact store: what ``gspo regress --record DIR`` writes and ``--against DIR`` reads.

::

    DIR/gspo-artifacts.json        the index: format version, the set, versions, machine, models
    DIR/<model>/model.onnx         the optimized model (its schedule and placement in its metadata)
    DIR/<model>/report.json        optimize's report
    DIR/<model>/artifact.json      source sha256, versions, machine, options, precision, the cache key

Every file is written atomically (:mod:`gspo.outputs`), never onto an input, and an existing one
only with ``force``. The *cache key* of a model is the sha256 of the canonical JSON of: the
source model's sha256, its input shapes, the sha256 of its inputs file (if any), the optimize
options and excluded rules, the versions of gspo, onnxruntime and OpenVINO, and for an entry with
reduced precision its precisions, budget and the sha256 of its data. When the stored
key equals the current one, ``--against`` reuses the stored model as the candidate instead of
optimizing again (nothing that optimize reads has changed).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from gspo.errors import GspoError, read_json
from gspo.outputs import atomic_write, check_outputs

__all__ = ["Artifact", "FORMAT", "INDEX", "cache_key", "check_store", "machine", "read_artifact", "read_index", "sha256", "versions",
           "write_artifact", "write_index", "artifact_paths"]

FORMAT = 1
INDEX = "gspo-artifacts.json"
_FILES = ("model.onnx", "report.json", "artifact.json")


def sha256(data: bytes) -> str:
    """The hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def versions() -> dict:
    """The versions a result depends on: gspo, onnxruntime, and OpenVINO when installed."""
    from importlib.metadata import PackageNotFoundError, version

    from gspo.runtime import runtime_version
    from gspo.runtime.backends import backend_status

    try:
        gspo_version = version("gspo")
    except PackageNotFoundError:
        gspo_version = "unknown"
    ok, what = backend_status("openvino")
    return {"gspo": gspo_version, "onnxruntime": runtime_version(),
            "openvino": what.split()[1] if ok else None}


def machine() -> dict:
    """A fingerprint of this machine: CPU model and cores, OS, Python."""
    from gspo.costmodel import device_description

    return {"device": device_description("cpu"), "system": platform.platform(), "python": platform.python_version(),
            "node": platform.node()}


def cache_key(source_sha: str, input_shapes: dict, inputs_sha: str | None, options: dict,
              exclude_rules: tuple[str, ...], found_versions: dict, precision: dict | None = None) -> str:
    """The key under which a stored optimized model can stand for a new optimization
    (``precision``: a reduced-precision entry's precisions, budget and data sha256)."""
    key = {"source": source_sha, "input_shapes": input_shapes, "inputs": inputs_sha,
           "options": options, "exclude_rules": sorted(exclude_rules), "versions": found_versions}
    if precision is not None:
        key["precision"] = precision
    blob = json.dumps(key, sort_keys=True)
    return sha256(blob.encode())


@dataclass(frozen=True)
class Artifact:
    """A stored model: its folder, the optimized model's bytes, its report and its metadata."""

    folder: Path
    model: bytes
    report: dict
    meta: dict


def artifact_paths(root: str | os.PathLike, name: str) -> dict[str, Path]:
    """The files of model ``name``'s artifact under ``root``, by role."""
    folder = Path(root) / name
    return {f: folder / f for f in _FILES}


def _json(path: Path, what: str) -> dict:
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise GspoError(f"{path}: the {what} is not a JSON object")
    return data


def _kind(p: Path) -> str:
    """"dir", "file" (anything else that is there) or "" (absent); a path the file system cannot
    even look up (a name past 255 bytes, a path past 4095) is a one-line error naming it."""
    try:
        return "dir" if p.is_dir() else "file" if p.exists() else ""
    except OSError as e:
        text = str(p) if len(str(p)) <= 200 else f"{str(p)[:100]}...{str(p)[-80:]}"
        raise GspoError(f"{text}: cannot be used ({e.strerror or e})") from None


def read_index(root: str | os.PathLike) -> dict:
    """The store's index (a GspoError when ``root`` is not a gspo artifact store)."""
    p = Path(root)
    if _kind(p) != "dir":
        raise GspoError(f"{p}: no such artifact folder (make one with gspo regress SET --record {p})")
    index = _json(p / INDEX, "artifact index") if (p / INDEX).exists() else None
    if index is None or index.get("format") != FORMAT:
        raise GspoError(f"{p}: not a gspo artifact folder (no {INDEX} of format {FORMAT})")
    return index


def read_artifact(root: str | os.PathLike, name: str) -> Artifact | None:
    """Model ``name``'s artifact, or ``None`` when the store has none (a GspoError when corrupt)."""
    paths = artifact_paths(root, name)
    if not paths["artifact.json"].exists():
        return None
    meta = _json(paths["artifact.json"], "artifact metadata")
    if meta.get("format") != FORMAT or not isinstance(meta.get("key"), str):
        raise GspoError(f"{paths['artifact.json']}: not gspo artifact metadata of format {FORMAT}")
    try:
        model = paths["model.onnx"].read_bytes()
    except OSError as e:
        raise GspoError(f"{paths['model.onnx']}: cannot read the stored model ({e.strerror or e})") from None
    if sha256(model) != meta.get("model_sha256"):
        raise GspoError(f"{paths['model.onnx']}: does not match its artifact.json (changed after it was recorded)")
    return Artifact(paths["model.onnx"].parent, model, _json(paths["report.json"], "stored report"), meta)


def check_store(root: str | os.PathLike, names: list[str], inputs: list, force: bool) -> None:
    """Refuse, before any work, a store that would overwrite an input or (without ``force``) an artifact."""
    p = Path(root)
    if _kind(p) == "file":
        raise GspoError(f"{p}: --record needs a folder (this is a file)")
    outputs = {f"--record {INDEX}": p / INDEX}
    for name in names:
        outputs.update({f"--record {name}/{f}": path for f, path in artifact_paths(p, name).items()})
    check_outputs(outputs, inputs, force)


def _dumps(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=_plain) + "\n"


def _plain(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def write_artifact(root: str | os.PathLike, name: str, model: bytes, report: dict, meta: dict,
                   overwrite: bool = False) -> Path:
    """Store one model's artifact (the model last, so a half-written artifact fails its check);
    an existing file is replaced only with ``overwrite``."""
    paths = artifact_paths(root, name)
    atomic_write(paths["report.json"], _dumps(report), overwrite=overwrite)
    atomic_write(paths["artifact.json"], _dumps({**meta, "format": FORMAT, "model_sha256": sha256(model)}),
                 overwrite=overwrite)
    atomic_write(paths["model.onnx"], model, overwrite=overwrite)
    return paths["model.onnx"].parent


def write_index(root: str | os.PathLike, modelset: str, names: list[str], found_versions: dict,
                overwrite: bool = False) -> Path:
    """Write the store's index (an existing one is replaced only with ``overwrite``)."""
    return atomic_write(Path(root) / INDEX, _dumps({"format": FORMAT, "modelset": modelset, "models": names,
                                                    "versions": found_versions, "machine": machine()}),
                        overwrite=overwrite)
