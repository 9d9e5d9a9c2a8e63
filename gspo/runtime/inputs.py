"""Inputs to run a model with: valid random ones, the user's own (``--inputs``), and the values
that cross from one piece of a partitioned model to the next."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gspo.errors import GspoError, clipped
from gspo.ir import Graph
from gspo.ir.ranges import input_ranges
from gspo.ir.weights import np_dtype
from gspo.runtime.npz import declared, read_npz
from gspo.runtime.session import SessionConfig, make_session, run

if TYPE_CHECKING:
    from gspo.timing.deadline import Deadline

__all__ = ["random_inputs", "random_input_sets", "LARGE_INPUT_SET", "available_memory", "require_memory",
           "input_bytes", "output_bytes", "making_seconds", "input_set_count", "check_seed", "human_bytes", "read_npz",
           "check_inputs", "load_inputs", "capture_values", "InputsOutOfTime"]


#: Elements drawn at a time: random data is drawn as float64 / int64 and cast a chunk at a
#: time, so an input costs its own size and 2 MB more (drawn whole and then cast, a float32
#: input cost three times its size).
_CHUNK = 1 << 18


def available_memory() -> int | None:
    """Bytes of memory the machine can still give (``MemAvailable`` of ``/proc/meminfo``), or
    ``None`` where that is not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human_bytes(n: float) -> str:
    """``n`` bytes in B, KB, MB, GB or TB (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def require_memory(nbytes: int, what: str, hint: str = "") -> None:
    """Refuse, before allocating, ``nbytes`` more than the machine has available.

    Raises:
        GspoError: one line naming ``what``, both sizes and the ``hint`` (what to do).
    """
    free = available_memory()
    if free is not None and nbytes > free:
        raise GspoError(f"{what} take {human_bytes(nbytes)}, more than the {human_bytes(free)} of memory "
                        f"available{'; ' + hint if hint else ''}")


def input_bytes(graph: Graph) -> int:
    """Bytes one set of inputs of ``graph`` takes (its inputs' shapes must be static)."""
    return sum(math.prod(v.shape) * np_dtype(v.dtype).itemsize for v in graph.inputs if v.is_static)


def output_bytes(graph: Graph) -> int:
    """Bytes one run's outputs of ``graph`` take, those of static shape and known type (a
    lower bound: the others are not counted)."""
    total = 0
    for v in graph.outputs:
        if v.is_tensor and v.is_static:
            try:
                total += math.prod(v.shape) * np_dtype(v.dtype).itemsize
            except (KeyError, TypeError, ValueError):  # an element type numpy has no size for
                continue
    return total


_rate: list[float] = []  # bytes per second of random data drawn here, once measured


def making_seconds(graph: Graph) -> float:
    """Seconds that drawing one set of :func:`random_inputs` of ``graph`` is expected to take:
    its bytes at the rate a 4 MB draw of float32 normals takes here (the best of two; a large
    draw is slower per byte, so this errs short). Nothing of the inputs' size is allocated."""
    if not _rate:
        rng = np.random.default_rng(0)
        best = math.inf
        for _ in range(2):
            began = time.perf_counter()
            _filled((4 * _CHUNK,), np.dtype(np.float32), rng.standard_normal)
            best = min(best, time.perf_counter() - began)
        _rate.append(4 * _CHUNK * 4 / max(best, 1e-6))
    return input_bytes(graph) / _rate[0]


class InputsOutOfTime(GspoError):
    """The deadline passed while random inputs were drawn (what was drawn is dropped)."""


def _filled(shape: Sequence[int], dtype: np.dtype, draw: Callable[[int], np.ndarray],
            until: Deadline | None = None) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` filled with ``draw(n)`` a chunk at a time (the same
    values as one draw of the whole size: the generator's stream does not depend on chunking),
    stopping at ``until`` (checked before each chunk: a Relu over [30000, 30000] drew its 3.6 GB
    for 36 s at --time-budget 30).

    Raises:
        InputsOutOfTime: ``until`` passed before the array was full.
    """
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        if until is not None and until.expired():
            raise InputsOutOfTime(f"the time budget ended while the random inputs were drawn "
                                  f"({human_bytes(start * dtype.itemsize)} of an input of {human_bytes(out.nbytes)})")
        flat[start:start + _CHUNK] = draw(min(_CHUNK, flat.size - start))
    return out


_STRING = 8  # TensorProto.STRING


def check_seed(seed) -> None:
    """Raise :class:`GspoError` (one line) unless ``seed`` is an integer of at least 0 (what
    numpy's generators take)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise GspoError(f"the seed must be a non-negative integer (got {seed!r})")


def random_inputs(graph: Graph, seed: int = 0, ranges: Mapping[str, tuple[int, int]] | None = None,
                  until: Deadline | None = None) -> dict[str, np.ndarray]:
    """Random feeds for every graph input: N(0,1) floats, random bools, integers drawn from the
    range their consumers accept (:func:`gspo.ir.ranges.input_ranges`, or ``ranges``), and
    strings among ``s0`` ... ``s15`` (a model's real vocabulary comes only with ``--inputs``).

    Each input is made at its own size (no float64 copy of it); inputs larger than the memory
    available are refused before anything is allocated. Drawing stops at ``until`` (``None``:
    never); the values do not depend on it.

    Raises:
        GspoError: an input has no static shape, a type random data cannot be made for, or the
            inputs do not fit in memory.
        InputsOutOfTime: ``until`` passed before the inputs were drawn.
    """
    check_seed(seed)
    rng = np.random.default_rng(seed)
    ranges = input_ranges(graph) if ranges is None else ranges
    for v in graph.inputs:
        if not v.is_static:
            raise GspoError(f"graph input {v.name!r} has no static shape; pin it with --input-shape {v.name}=D1,D2,...")
        if np_dtype(v.dtype).kind not in "fiub" and v.dtype != _STRING:
            raise GspoError(f"cannot make random data for input {v.name!r} of type {np_dtype(v.dtype)}")
    largest = max(graph.inputs, key=lambda v: math.prod(v.shape), default=None)
    if largest is not None:
        hint = "pin smaller dynamic dimensions with --input-shape" if graph.extras.defaulted else ""
        require_memory(input_bytes(graph), f"the random inputs (the largest: {largest.name!r} "
                       f"{np_dtype(largest.dtype)}{list(largest.shape)})", hint)
    feeds = {}
    for v in graph.inputs:
        dt = np_dtype(v.dtype)
        if dt.kind == "f":
            feeds[v.name] = _filled(v.shape, dt, rng.standard_normal, until)
        elif dt.kind in "iu":
            low, high = ranges.get(v.name, (0, 16))
            feeds[v.name] = _filled(v.shape, dt, lambda n, low=low, high=high: rng.integers(low, high, size=n), until)
        elif v.dtype == _STRING:  # no vocabulary is known: short tokens (real ones via --inputs)
            feeds[v.name] = np.array([f"s{k}" for k in rng.integers(0, 16, size=v.shape).reshape(-1)],
                                     dtype=object).reshape(v.shape)
        else:
            feeds[v.name] = _filled(v.shape, dt, lambda n: rng.random(n) < 0.5, until)
    return feeds


#: Random input sets larger than this are drawn once instead of ``runs`` times: each set is
#: held, with the reference's outputs on it, while every candidate is verified (two sets of a
#: 400 MB input and their outputs took 1.6 GB before a candidate ran).
LARGE_INPUT_SET = 64 * 10**6


def input_set_count(graph: Graph, runs: int) -> int:
    """How many sets :func:`random_input_sets` draws for ``runs``: one when a set takes more
    than :data:`LARGE_INPUT_SET` bytes."""
    return runs if input_bytes(graph) <= LARGE_INPUT_SET else min(runs, 1)


def random_input_sets(graph: Graph, seed: int, runs: int, until: Deadline | None = None) -> list[dict[str, np.ndarray]]:
    """``runs`` sets of :func:`random_inputs` (seeds ``seed, seed+1, ...``); one set when a set
    takes more than :data:`LARGE_INPUT_SET` bytes; drawn until ``until`` (see :func:`random_inputs`)."""
    return [random_inputs(graph, seed + i, until=until) for i in range(input_set_count(graph, runs))]


def _check_spec(name: str, dtype: np.dtype, shape: Sequence[int], v, label: str) -> None:
    """Raise when an input's data is not of the dtype and shape the model wants, with the advice
    that helps: data of the wanted type for a dtype that differs, ``--input-shape`` for a shape
    (the shape advice answered a dtype mismatch before)."""
    text = v.dtype == _STRING and np.dtype(dtype).kind in "USO"  # text arrives as unicode, bytes or objects
    want = np_dtype(v.dtype)
    advice = []
    if dtype != want and not text:
        advice.append("give text data" if v.dtype == _STRING else f"give {want} data")
    if tuple(shape) != tuple(v.shape):
        advice.append("pin other shapes with --input-shape")
    if advice:
        raise GspoError(f"{label}: input {clipped(name, quote=True)} is {dtype}{list(shape)}, the model wants "
                        f"{'text' if v.dtype == _STRING else want}{list(v.shape)} ({'; '.join(advice)})")


def _names(names: list[str]) -> str:
    """Input names as a one-line error lists them: the first five, each cut at 80 characters."""
    shown = ", ".join(clipped(n, quote=True) for n in names[:5])
    return f"[{shown}{f', ... ({len(names)} in all)' if len(names) > 5 else ''}]"


def check_inputs(feeds: Mapping[str, np.ndarray], graph: Graph, label: str = "--inputs") -> dict[str, np.ndarray]:
    """``feeds`` checked against the graph's inputs (names, shapes, dtypes); the arrays of an
    ``.npz`` (:func:`read_npz`) are checked from their headers, and against the memory
    available, before they are read.

    Raises:
        GspoError: one line naming what does not match.
    """
    expected = {v.name: v for v in graph.inputs}
    missing = sorted(set(expected) - set(feeds))
    extra = sorted(set(feeds) - set(expected))
    if missing or extra:
        raise GspoError(f"{label}: inputs do not match the model (missing: {_names(missing)}, unknown: {_names(extra)})")
    headers = declared(feeds)
    if headers is not None:
        for name, (shape, dtype) in headers.items():
            _check_spec(name, dtype, shape, expected[name], label)
        require_memory(input_bytes(graph), f"{label}: the inputs")
    feeds = {name: feeds[name] for name in feeds}
    for name, arr in feeds.items():
        if expected[name].dtype == _STRING and arr.dtype.kind in "US":  # an .npz holds text as unicode or bytes
            arr = feeds[name] = arr.astype(str).astype(object)
        _check_spec(name, arr.dtype, arr.shape, expected[name], label)
    return feeds


def load_inputs(path: str, graph: Graph) -> dict[str, np.ndarray]:
    """Feeds from an ``.npz`` file, checked against the graph's inputs (names, shapes, dtypes)
    before they are read."""
    return check_inputs(read_npz(path), graph, path)


def capture_values(graph: Graph, feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
                   names: Iterable[str], config: SessionConfig = SessionConfig()):
    """The values ``names`` take when ``graph`` runs on ``feeds`` (graph inputs are passed
    through): what each piece of a partitioned model really receives from the pieces before it.

    ``feeds`` is one input set (a dict is returned) or a list of them (a list is returned, from
    one session: building it is most of the cost on a large model).
    """
    sets = [feeds] if isinstance(feeds, Mapping) else list(feeds)
    names = list(dict.fromkeys(names))
    outs = [{n: f[n] for n in names if n in f} for f in sets]
    wanted = [n for n in names if not all(n in f for f in sets)]
    if wanted and sets:
        listed = set(graph.output_names())
        extra = tuple(graph.values[n] for n in wanted if n not in listed)
        session = make_session(dataclasses.replace(graph, outputs=graph.outputs + extra), config)
        for f, out in zip(sets, outs):
            values = run(session, f)
            out.update((n, values[n]) for n in wanted if n not in f)
    return outs[0] if isinstance(feeds, Mapping) else outs
