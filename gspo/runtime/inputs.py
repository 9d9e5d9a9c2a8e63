"""Inputs to run a model with: valid random ones, the user's own (``--inputs``), and the values
that cross from one piece of a partitioned model to the next."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gspo.errors import GspoError
from gspo.errors import first_line as _first_line
from gspo.ir import Graph
from gspo.ir.ranges import input_ranges
from gspo.ir.weights import np_dtype
from gspo.runtime.session import SessionConfig, make_session, run

_STRING = 8  # TensorProto.STRING

__all__ = ["random_inputs", "read_npz", "check_inputs", "load_inputs", "capture_values"]


def random_inputs(graph: Graph, seed: int = 0, ranges: Mapping[str, tuple[int, int]] | None = None) -> dict[str, np.ndarray]:
    """Random feeds for every graph input: N(0,1) floats, random bools, integers drawn from the
    range their consumers accept (:func:`gspo.ir.ranges.input_ranges`, or ``ranges``), and
    strings among ``s0`` ... ``s15`` (a model's real vocabulary comes only with ``--inputs``).

    Raises:
        GspoError: an input has no static shape, or a type random data cannot be made for.
    """
    rng = np.random.default_rng(seed)
    ranges = input_ranges(graph) if ranges is None else ranges
    feeds = {}
    for v in graph.inputs:
        if not v.is_static:
            raise GspoError(f"graph input {v.name!r} has no static shape; pin it with --input-shape {v.name}=D1,D2,...")
        dt = np_dtype(v.dtype)
        if dt.kind == "f":
            feeds[v.name] = rng.standard_normal(v.shape).astype(dt)
        elif dt.kind in "iu":
            low, high = ranges.get(v.name, (0, 16))
            feeds[v.name] = rng.integers(low, high, size=v.shape).astype(dt)
        elif dt.kind == "b":
            feeds[v.name] = rng.random(v.shape) < 0.5
        elif v.dtype == _STRING:  # no vocabulary is known: short tokens (real ones via --inputs)
            feeds[v.name] = np.array([f"s{k}" for k in rng.integers(0, 16, size=v.shape).reshape(-1)],
                                     dtype=object).reshape(v.shape)
        else:
            raise GspoError(f"cannot make random data for input {v.name!r} of type {dt}")
    return feeds


def read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, by name."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:
        raise GspoError(f"{path}: cannot read inputs (expected an .npz file): {_first_line(e)}") from None


def check_inputs(feeds: Mapping[str, np.ndarray], graph: Graph, label: str = "--inputs") -> dict[str, np.ndarray]:
    """``feeds`` checked against the graph's inputs (names, shapes, dtypes).

    Raises:
        GspoError: one line naming what does not match.
    """
    expected = {v.name: v for v in graph.inputs}
    missing = sorted(set(expected) - set(feeds))
    extra = sorted(set(feeds) - set(expected))
    if missing or extra:
        raise GspoError(f"{label}: inputs do not match the model (missing: {missing}, unknown: {extra})")
    feeds = dict(feeds)
    for name, arr in feeds.items():
        v = expected[name]
        if v.dtype == _STRING and arr.dtype.kind in "US":  # an .npz holds text as unicode or bytes
            arr = feeds[name] = arr.astype(str).astype(object)
        if tuple(arr.shape) != tuple(v.shape) or arr.dtype != np_dtype(v.dtype):
            raise GspoError(
                f"{label}: input {name!r} is {arr.dtype}{list(arr.shape)}, "
                f"the model wants {np_dtype(v.dtype)}{list(v.shape)} (pin other shapes with --input-shape)"
            )
    return feeds


def load_inputs(path: str, graph: Graph) -> dict[str, np.ndarray]:
    """Feeds from an ``.npz`` file, checked against the graph's inputs (names, shapes, dtypes)."""
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
