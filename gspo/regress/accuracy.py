"""The accuracy gate of the model set's entries with reduced precision (``"precision"`` and
``"max_error"``): their calibration and validation data, carried with a job (the user's paths
here, the files' bytes to a cluster), and the judgement of the candidate, and of the baseline
for its drift, against the source model (:func:`gspo.precision.accuracy.judge`) on the entry's
validation samples, or without them on the random ones ``optimize`` validated on (the same
seeds), with a warning.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from gspo.regress.modelset import ModelSpec, data_files

__all__ = ["accuracy_line", "accuracy_reason", "data_digest", "data_warning", "judge_entry", "place_data",
           "ship_data"]

_KINDS = ("calibration", "validation")


def data_warning(spec: ModelSpec) -> str | None:
    """The warning that a reduced-precision entry's calibration or validation data are random
    (``None``: the entry gives both, or has no precision)."""
    from gspo.precision.samples import random_data_warning

    missing = [k for k in _KINDS if spec.precision and getattr(spec, k) is None]
    if not missing:
        return None
    fields = " and ".join(f'"{k}"' for k in missing)
    return random_data_warning(f"the {' and '.join(missing)} data", f"{fields} (an .npz file or a folder of them) "
                               "in the model's entry of the set")


def data_digest(spec: ModelSpec) -> str:
    """One sha256 of the entry's data: kinds, file names and contents ("" without data)."""
    if not spec.data():
        return ""
    h = hashlib.sha256()
    for kind, path in sorted(spec.data().items()):
        h.update(kind.encode() + b"\0")
        for f in data_files(path):
            h.update(f.name.encode() + b"\0")
            with open(f, "rb") as stream:
                for chunk in iter(lambda: stream.read(1 << 22), b""):
                    h.update(chunk)
    return h.hexdigest()


def ship_data(spec: ModelSpec) -> dict[str, dict[str, bytes]]:
    """The entry's data as bytes, by kind and file name (a job sent to a cluster)."""
    return {kind: {f.name: f.read_bytes() for f in data_files(path)} for kind, path in spec.data().items()}


def place_data(data: dict[str, str | dict[str, bytes]], tmp: Path) -> dict[str, str]:
    """Each kind's path: the user's (a job run here), or a folder under ``tmp`` the shipped files
    are written into (a folder of one ``.npz`` holds what the file holds)."""
    placed = {}
    for kind, given in data.items():
        if isinstance(given, str):
            placed[kind] = given
            continue
        folder = tmp / "data" / kind
        folder.mkdir(parents=True)
        for name, blob in given.items():
            (folder / name).write_bytes(blob)
        placed[kind] = str(folder)
    return placed


def _validation(spec: ModelSpec, graph, data: dict[str, str]) -> tuple[list, str]:
    """The validation samples and where they came from: the entry's, or the random ones
    ``optimize`` validated on (:func:`~gspo.precision.samples.precision_data`, the same seed)."""
    from gspo.precision.samples import load_samples, precision_data

    if "validation" in data:
        samples = load_samples(data["validation"], graph, "validation")
        return samples, f"{spec.validation} ({len(samples)} sample{'' if len(samples) == 1 else 's'})"
    found = precision_data(graph, data.get("calibration"), None, seed=spec.options.get("seed", 0))
    return list(found.validation), found.source["validation"]


def judge_entry(spec: ModelSpec, source_path: Path, graph, candidate: bytes, baseline: bytes | None,
                data: dict[str, str], chosen: str | None) -> dict:
    """The candidate and the baseline judged against the source by the entry's budget on its
    validation samples: the budget, where the samples came from, the random-data warning, the
    precision optimize chose, and each :meth:`~gspo.precision.accuracy.Accuracy.to_json`
    (``baseline``: ``None`` without one)."""
    from gspo.precision.accuracy import judge

    budget = spec.max_error.budget  # parsed as the set was read
    samples, source = _validation(spec, graph, data)
    folder = source_path.parent.parent / "judged"
    folder.mkdir(exist_ok=True)
    judged: dict[str, dict | None] = {}
    for label, model in (("candidate", candidate), ("baseline", baseline)):
        if model is None or (label == "baseline" and model == candidate):
            judged[label] = None if model is None else judged["candidate"]
            continue
        path = folder / f"{label}.onnx"
        path.write_bytes(model)
        judged[label] = judge(str(source_path), str(path), budget, samples, spec.input_shapes or None).to_json()
    return {"max_error": str(budget), "data": source, "warning": data_warning(spec), "chosen": chosen, **judged}


def accuracy_reason(accuracy: dict) -> str:
    """Why a candidate fails the accuracy gate: the budget, the data, each limit broken."""
    return (f"error outside max_error {accuracy['max_error']} on the validation data ({accuracy['data']}): "
            + "; ".join(accuracy["candidate"]["broken"]))


def _metrics(judged: dict) -> str:
    from gspo.precision.accuracy import shown

    return ", ".join(f"{name} " + " ".join(f"{m} {shown(m, v)}" for m, v in metrics.items())
                     for name, metrics in judged["outputs"].items())


def accuracy_line(name: str, accuracy: dict) -> str:
    """The printed report's line of a model's accuracy: within the budget or not, on what data,
    the chosen precision, each output's metrics, and the baseline's (its drift)."""
    candidate = accuracy["candidate"]
    chosen = f", candidate {accuracy['chosen']}" if accuracy.get("chosen") else ""
    line = (f"{name}: accuracy {'within' if candidate['holds'] else 'OUTSIDE'} {accuracy['max_error']} on "
            f"{accuracy['data']}{chosen}: {_metrics(candidate)}")
    if accuracy.get("baseline") is not None:
        line += f"; baseline: {_metrics(accuracy['baseline'])}"
    return line
