"""Calibration and validation data of reduced precision: the user's own (``--calibration``,
``--validation``: an ``.npz`` of one sample, or a folder of them) or, when not given, random
inputs, with a warning that they say little about the error on real data.

The validation data must not be the calibration data: a quantizer tuned on the samples it is
judged on looks better than it is. Samples that coincide (the same arrays, by
:func:`sample_digest`) are refused when the user gave both, and never drawn when one is random.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.inputs import (
    check_inputs,
    check_seed,
    human_bytes,
    input_bytes,
    random_inputs,
    require_memory,
)
from gspo.runtime.npz import read_npz
from gspo.runtime.verify import check_finite_inputs

__all__ = ["MAX_SAMPLES", "MAX_SAMPLE_BYTES", "NO_VALUES", "PrecisionData", "SampleLimits", "load_samples", "precision_data",
           "random_data_warning", "sample_digest"]

_KINDS = ("calibration", "validation")


def random_data_warning(what: str, flags: str) -> str:
    """The warning that ``what`` ("the inputs", "the validation data") is random, naming the
    ``flags`` that give real data."""
    return (f"{what} are random: random inputs say little about accuracy "
            "on real data, and the error measured on them may be far from the error on your data; "
            f"give {flags}")


#: The most samples of each set (calibration, validation) the precision stage uses: the first by
#: file name. Every judgment of a fit runs the model on all of them, so their number multiplies
#: its time; 256 rows allow a top1 limit of 0.99 to tolerate two changed classes.
MAX_SAMPLES = 256
#: The most bytes of input arrays of each set the precision stage holds at once: 120 samples of
#: 64 MB took 8 GB of memory and every judgment ran all of them.
MAX_SAMPLE_BYTES = 512 << 20


@dataclass(frozen=True)
class SampleLimits:
    """How much of a folder of samples is read: at most ``count`` samples, ``nbytes`` of arrays,
    and until ``deadline`` (a :class:`~gspo.timing.deadline.Deadline`; ``None``: none). The first
    sample is always read (the one step that cannot be cut); ``None``: no limit."""

    count: int | None = MAX_SAMPLES
    nbytes: int | None = MAX_SAMPLE_BYTES
    deadline: object | None = None


def _not_regular(full: str, mode: int) -> str:
    """What a path that is no regular file is, in words (``a FIFO``, ``a link to a device``)."""
    what = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"a link to {what}" if os.path.islink(full) and what.startswith("a ") else what


def _npz_files(path: str, label: str) -> list[str]:
    """The ``.npz`` files a path names: itself, or a folder's, sorted by file name (only names and
    modes are read: a FIFO is never opened).

    Raises:
        GspoError: a missing path, a folder without samples, an ``.npz`` entry of the folder that
            is no regular file (a FIFO, a device, a link to one) or cannot be read.
    """
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise GspoError(f"{label} {path}: no such file or folder")
        return [path]
    files = []
    for name in sorted(f for f in os.listdir(path) if f.endswith(".npz")):
        full = os.path.join(path, name)
        try:
            mode = os.stat(full).st_mode
        except OSError as e:
            raise GspoError(f"{label} {path}: {name} cannot be read ({e.strerror or e}); a folder of samples "
                            "holds .npz files only: remove it or give another folder") from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise GspoError(f"{label} {path}: {name} is {_not_regular(full, mode)}, not a sample (.npz file); a "
                            "folder of samples holds .npz files only: move it out or give another folder")
        files.append(full)
    if not files:
        raise GspoError(f"{label} {path}: no .npz file in the folder (one sample per .npz file)")
    return files


def load_samples(path: str, graph: Graph, label: str, limits: SampleLimits | None = None,
                 notes: list[str] | None = None) -> list[dict[str, np.ndarray]]:
    """The samples at ``path``: an ``.npz`` file (one sample: one array per graph input, as
    ``--inputs`` takes) or a folder of them (one sample each, in file-name order; other files
    ignored), each checked against the graph's inputs and holding a finite value. With
    ``limits`` only the first samples by file name within them are read (:func:`_limited`),
    and ``notes`` gets a line saying how many of how many were used, and why.

    Raises:
        GspoError: one line (``label`` and the file first): a missing path, a folder without
            ``.npz`` files or with one that is a FIFO or device, a sample that does not fit the
            model, or samples whose arrays together take more memory than is available.
    """
    return _load(path, _npz_files(path, label), graph, label, limits, notes)[0]


def _load(path: str, files: list[str], graph: Graph, label: str, limits: SampleLimits | None,
          notes: list[str] | None) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """:func:`load_samples` of the ``files`` at ``path``, and the files of the samples."""
    if limits is not None:
        samples, why = _limited(files, graph, label, limits)
        if why and notes is not None:
            notes.append(f"{label} {path}: used the first {_plural(len(samples))} of {len(files)} (by file name): "
                         f"{why}")
        return samples, files[:len(samples)]
    archives = [read_npz(f) for f in files]  # headers only: the sizes are known before any data is read
    total = sum(m.nbytes for archive in archives for m in archive.members.values())
    require_memory(total, f"{label} {path}: the {len(files)} samples", "give fewer or smaller samples")
    return [_checked(archive, graph, f"{label} {f}") for f, archive in zip(files, archives)], files


def _checked(archive, graph: Graph, label: str) -> dict[str, np.ndarray]:
    sample = check_inputs(archive, graph, label=label)
    check_finite_inputs(sample, label)
    return sample


def _limited(files: list[str], graph: Graph, label: str, limits: SampleLimits) -> tuple[list, str]:
    """The first of ``files`` read one at a time while ``limits`` hold (the first always; no read
    begins that the deadline cannot hold at the pace so far), and why reading stopped early
    (``""``: every file was read). A file's headers are read before its data, so a sample over
    the byte limit is never read."""
    samples: list[dict[str, np.ndarray]] = []
    held, deadline = 0, limits.deadline
    began = deadline.now() if deadline is not None else 0.0
    for f in files:
        if samples and limits.count is not None and len(samples) >= limits.count:
            return samples, f"at most {limits.count} samples are used"
        if samples and deadline is not None and not deadline.fits((deadline.now() - began) / len(samples)):
            return samples, "the time budget held no more reading"
        archive = read_npz(f)
        size = sum(m.nbytes for m in archive.members.values())
        if samples and limits.nbytes is not None and held + size > limits.nbytes:
            return samples, (f"their arrays take {human_bytes(held)}, and at most {human_bytes(limits.nbytes)} "
                             "are held at once")
        require_memory(held + size, f"{label} {f}: the samples read so far", "give fewer or smaller samples")
        samples.append(_checked(archive, graph, f"{label} {f}"))
        held += size
    return samples, ""


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
        validation: the samples the error is measured on, none of them a calibration sample
            (unless the model's inputs hold no values: then there is one sample only).
        source: where each came from (``{"calibration": "user: DIR (8 samples)", ...}``).
        warnings: what the user should know (random data, samples not used).
        names: each sample's name, by set (its file, or ``random seed N``; empty: unnamed).
    """

    calibration: tuple[dict[str, np.ndarray], ...]
    validation: tuple[dict[str, np.ndarray], ...]
    source: dict[str, str]
    warnings: tuple[str, ...]
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _plural(n: int) -> str:
    return f"{n} sample{'' if n == 1 else 's'}"


def _random_count(graph: Graph, count: int, limits: SampleLimits | None) -> int:
    """``count``, or fewer random samples (one at the least) where their inputs would take more
    than ``limits.nbytes``."""
    if limits is None or limits.nbytes is None:
        return count
    return max(1, min(count, limits.nbytes // max(1, input_bytes(graph))))


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


def _no_values(graph: Graph) -> bool:
    """Whether the model's inputs hold no values (none, or each of zero size): every sample is the same."""
    return all(v.shape is not None and any(d == 0 for d in v.shape) for v in graph.inputs)


#: The warning when the inputs hold no values (:func:`_no_values`).
NO_VALUES = ("the model's inputs hold no values (zero-size): every sample is the same one, so the error is "
             "judged on the sample it is calibrated on (no other exists)")


def _user_data(graph: Graph, paths: dict, limits: SampleLimits | None, notes: list[str]) -> dict[str, tuple]:
    """The samples of the paths given and their files: both folders listed, then each set read
    within its share of what ``limits``' deadline leaves."""
    data = {}
    files = {k: _npz_files(paths[k], f"--{k}") for k in _KINDS if paths[k] is not None}  # names and modes first
    for i, kind in enumerate(files):
        mine = limits
        if limits is not None and limits.deadline is not None:
            mine = dataclasses.replace(limits, deadline=limits.deadline.share(1 / (len(files) - i)))
        data[kind] = _load(paths[kind], files[kind], graph, f"--{kind}", mine, notes)
    return data


def precision_data(graph: Graph, calibration: str | None, validation: str | None, seed: int = 0,
                   count: int = 8, limits: SampleLimits | None = None) -> PrecisionData:
    """The calibration and validation samples: loaded from the paths given (:func:`load_samples`,
    within ``limits``, with a warning when not every sample is used), and for a path not given
    ``count`` random inputs (fewer where they take more than ``limits.nbytes``;
    :func:`~gspo.runtime.inputs.random_inputs`;
    calibration from seeds ``seed, seed+1, ...``, validation from the seeds after them, and no
    random sample equal to one of the other set), with a warning. A model whose inputs hold no
    values has one sample, both calibration and validation (:data:`NO_VALUES`).

    Raises:
        GspoError: data that cannot be loaded, or validation samples equal to calibration ones.
    """
    check_seed(seed)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GspoError(f"the number of random samples must be a positive integer (got {count!r})")
    paths = dict(zip(_KINDS, (calibration, validation)))
    warnings: list[str] = []
    loaded = _user_data(graph, paths, limits, warnings)
    data = {k: v[0] for k, v in loaded.items()}
    source = {k: f"user: {paths[k]} ({_plural(len(v))})" for k, v in data.items()}
    names = {k: tuple(v[1]) for k, v in loaded.items()}
    if _no_values(graph):
        one = data.get("calibration", data.get("validation", [random_inputs(graph, seed=seed)]))[:1]
        data = {k: one for k in _KINDS}
        source = {k: source.get(k, f"random (seed {seed}, 1 sample)") for k in _KINDS}
        names = {k: names.get(k, (f"random seed {seed}",))[:1] for k in _KINDS}
        return PrecisionData(tuple(one), tuple(one), source, (NO_VALUES, *warnings), names)
    next_seed = seed
    for kind in _KINDS:
        if kind in data:
            continue
        other = _KINDS[1 - _KINDS.index(kind)]
        avoid = {sample_digest(s) for s in data.get(other, ())}
        first = next_seed
        data[kind], next_seed = _random_samples(graph, first, _random_count(graph, count, limits), avoid, kind)
        source[kind] = f"random (seeds {first}-{next_seed - 1}, {_plural(len(data[kind]))})"
        names[kind] = tuple(f"random sample {i + 1}" for i in range(len(data[kind])))
        if len(data[kind]) < count:
            warnings.append(f"only {_plural(len(data[kind]))} of random {kind} data differ from the {other} data")
    _check_disjoint(data["calibration"], data["validation"])
    randoms = [k for k in _KINDS if paths[k] is None]
    if randoms:
        flags = " and ".join(f"--{k}" for k in randoms)
        warnings.insert(0, random_data_warning(f"the {' and '.join(randoms)} data", flags))
    return PrecisionData(tuple(data["calibration"]), tuple(data["validation"]), source, tuple(warnings), names)
