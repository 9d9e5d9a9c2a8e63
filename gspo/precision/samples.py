"""Calibration and validation data of reduced precision: the user's own (``--calibration``,
``--validation``: an ``.npz`` of one sample, or a folder of them) or, when not given, random
inputs, with a warning that they say little about the error on real data.

The validation data must not be the calibration data: a quantizer tuned on the samples it is
judged on looks better than it is. Samples that coincide (the same arrays, by
:func:`sample_digest`) are refused when the user gave both, and never drawn when one is random.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.inputs import check_inputs, check_seed, input_bytes, random_inputs, require_memory
from gspo.runtime.npz import read_npz
from gspo.runtime.verify import check_finite_inputs

__all__ = ["PrecisionData", "load_samples", "precision_data", "random_data_warning", "sample_digest"]

_KINDS = ("calibration", "validation")


def random_data_warning(what: str, flags: str) -> str:
    """The warning that ``what`` ("the inputs", "the validation data") is random, naming the
    ``flags`` that give real data."""
    return (f"{what} are random: random inputs say little about accuracy "
            "on real data, and the error measured on them may be far from the error on your data; "
            f"give {flags}")


def _npz_files(path: str, label: str) -> list[str]:
    """The ``.npz`` files a path names: itself, or a folder's, sorted by file name."""
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith(".npz") and os.path.isfile(os.path.join(path, f)))
        if not files:
            raise GspoError(f"{label} {path}: no .npz file in the folder (one sample per .npz file)")
        return [os.path.join(path, f) for f in files]
    if not os.path.exists(path):
        raise GspoError(f"{label} {path}: no such file or folder")
    return [path]


def load_samples(path: str, graph: Graph, label: str) -> list[dict[str, np.ndarray]]:
    """The samples at ``path``: an ``.npz`` file (one sample: one array per graph input, as
    ``--inputs`` takes) or a folder of them (one sample each, in file-name order; other files
    ignored), each checked against the graph's inputs and holding a finite value.

    Raises:
        GspoError: one line (``label`` and the file first): a missing path, a folder without
            ``.npz`` files, a sample that does not fit the model, or samples whose arrays
            together take more memory than is available.
    """
    files = _npz_files(path, label)
    archives = [read_npz(f) for f in files]  # headers only: the sizes are known before any data is read
    total = sum(m.nbytes for archive in archives for m in archive.members.values())
    require_memory(total, f"{label} {path}: the {len(files)} samples", "give fewer or smaller samples")
    samples = []
    for f, archive in zip(files, archives):
        sample = check_inputs(archive, graph, label=f"{label} {f}")
        check_finite_inputs(sample, f"{label} {f}")
        samples.append(sample)
    return samples


def _framed(h, data: bytes) -> None:
    """Feed ``data`` to the hash with its length first (no two sequences hash alike)."""
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def sample_digest(sample: Mapping[str, np.ndarray]) -> str:
    """The SHA-256 (hex) of a sample: its names, dtypes, shapes and bytes, in name order (text
    arrays by their strings)."""
    h = hashlib.sha256()
    for name in sorted(sample):
        arr = np.asarray(sample[name])
        for part in (name, arr.dtype.str, repr(tuple(arr.shape))):
            _framed(h, part.encode())
        if arr.dtype.hasobject:
            for item in arr.reshape(-1):
                _framed(h, str(item).encode())
        else:
            _framed(h, np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class PrecisionData:
    """The samples reduced precision is calibrated on and those it is judged on.

    Attributes:
        calibration: the samples the quantizer tunes on (inputs by name).
        validation: the samples the error is measured on, none of them a calibration sample.
        source: where each came from (``{"calibration": "user: DIR (8 samples)", ...}``).
        warnings: what the user should know (random data).
    """

    calibration: tuple[dict[str, np.ndarray], ...]
    validation: tuple[dict[str, np.ndarray], ...]
    source: dict[str, str]
    warnings: tuple[str, ...]


def _plural(n: int) -> str:
    return f"{n} sample{'' if n == 1 else 's'}"


def _random_samples(graph: Graph, seed: int, count: int, avoid: set[str], what: str) -> tuple[list, int]:
    """``count`` random samples from seeds ``seed, seed+1, ...``, none with a digest in
    ``avoid`` (a draw that coincides is skipped; at most ``4 * count`` seeds are tried); and
    the next seed.

    Raises:
        GspoError: every draw coincided, or the samples do not fit in memory.
    """
    require_memory(count * input_bytes(graph), f"the random {what} inputs ({_plural(count)})")
    samples: list[dict[str, np.ndarray]] = []
    next_seed = seed
    while len(samples) < count and next_seed < seed + 4 * count:
        sample = random_inputs(graph, seed=next_seed)
        next_seed += 1
        if sample_digest(sample) not in avoid:
            samples.append(sample)
    if not samples:
        other = _KINDS[1 - _KINDS.index(what)]
        raise GspoError(f"every random {what} sample coincides with the {other} data (the model's inputs take "
                        f"few values); give --{what}")
    return samples, next_seed


def _check_disjoint(calibration, validation) -> None:
    """Refuse validation samples that are calibration samples."""
    seen = {sample_digest(s) for s in calibration}
    same = sum(sample_digest(s) in seen for s in validation)
    if same:
        raise GspoError(f"validation data must not be the calibration data: {same} of the {len(validation)} "
                        "validation samples are also calibration samples; validate on samples gspo does not "
                        "calibrate on")


def precision_data(graph: Graph, calibration: str | None, validation: str | None, seed: int = 0,
                   count: int = 8) -> PrecisionData:
    """The calibration and validation samples: loaded from the paths given (:func:`load_samples`),
    and for a path not given ``count`` random inputs (:func:`~gspo.runtime.inputs.random_inputs`;
    calibration from seeds ``seed, seed+1, ...``, validation from the seeds after them, and no
    random sample equal to one of the other set), with a warning.

    Raises:
        GspoError: data that cannot be loaded, or validation samples equal to calibration ones.
    """
    check_seed(seed)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GspoError(f"the number of random samples must be a positive integer (got {count!r})")
    paths = dict(zip(_KINDS, (calibration, validation)))
    data = {k: load_samples(p, graph, f"--{k}") for k, p in paths.items() if p is not None}
    source = {k: f"user: {paths[k]} ({_plural(len(v))})" for k, v in data.items()}
    warnings = []
    next_seed = seed
    for kind in _KINDS:
        if kind in data:
            continue
        other = _KINDS[1 - _KINDS.index(kind)]
        avoid = {sample_digest(s) for s in data.get(other, ())}
        first = next_seed
        data[kind], next_seed = _random_samples(graph, first, count, avoid, kind)
        source[kind] = f"random (seeds {first}-{next_seed - 1}, {_plural(len(data[kind]))})"
        if len(data[kind]) < count:
            warnings.append(f"only {_plural(len(data[kind]))} of random {kind} data differ from the {other} data")
    _check_disjoint(data["calibration"], data["validation"])
    randoms = [k for k in _KINDS if paths[k] is None]
    if randoms:
        flags = " and ".join(f"--{k}" for k in randoms)
        warnings.insert(0, random_data_warning(f"the {' and '.join(randoms)} data", flags))
    return PrecisionData(tuple(data["calibration"]), tuple(data["validation"]), source, tuple(warnings))
