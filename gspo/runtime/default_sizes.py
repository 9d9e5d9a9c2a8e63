"""Why a model fails at the sizes gspo chose for its dynamic dimensions, and the flags that fix it.

A dynamic dimension the user did not pin gets a default (1 for a batch, 128 otherwise); a model
whose dimensions are tied together (an LSTM's initial state sized by the input's batch, a Reshape
to a fixed size) may not run at those sizes. The explanation names each dimension gspo pinned,
onnxruntime's own reason on one line, and a ``--input-shape`` with which the model runs when
setting a defaulted dimension (or every one) to 1 makes it run.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.runtime.inputs import random_inputs
from gspo.runtime.session import make_session

__all__ = ["explain_defaults_failure", "onnxruntime_reason"]

#: Sizes tried at most to find one the model runs at (each is one run at those sizes).
MAX_PROBES = 8


def onnxruntime_reason(e: BaseException, limit: int = 300) -> str:
    """onnxruntime's message in one line: the op and node that failed and what it said, without
    the error code and the C++ source location."""
    text = " ".join(str(e).split())
    node = re.search(r"while running (\w+) node\. Name:'([^']*)'", text)
    _, found, message = text.partition("Status Message: ")
    if not found:
        message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    message = re.sub(r"^\S+:\d+ .*?\) ", "", message)  # "/src/file.h:91 Class::fn(args) "
    message = re.sub(r"^.*? was false\. ", "", message)  # "a == b was false. "
    where = f"{node.group(1)} node{f' {node.group(2)!r}' if node.group(2) else ''}: " if node else ""
    return (where + message)[:limit]


def _feeds_at(graph: Graph, dims: Mapping[tuple[str, int], int], seed: int):
    resized = tuple(dataclasses.replace(v, shape=tuple(dims.get((v.name, i), d) for i, d in enumerate(v.shape)))
                    for v in graph.inputs)
    return random_inputs(dataclasses.replace(graph, inputs=resized), seed)


def _failure(session, graph: Graph, dims: Mapping[tuple[str, int], int], seed: int) -> str | None:
    """onnxruntime's reason the model fails with the dynamic dimensions ``dims``, or None if it runs."""
    feeds = _feeds_at(graph, dims, seed)
    try:
        session.run(None, feeds)
    except Exception as e:  # onnxruntime raises its own exception types
        return onnxruntime_reason(e)
    return None


def _candidates(defaulted) -> list[dict[tuple[str, int], int]]:
    """Sizes to try: each dimension (all those of one symbol together) set to 1, then all at once."""
    groups: dict[str, list] = {}
    for d in defaulted:
        if d.value != 1:
            groups.setdefault(d.symbol if d.symbol != "?" else f"{d.input}/{d.axis}", []).append(d)
    tries = [{(d.input, d.axis): 1 for d in group} for group in groups.values()]
    if len(tries) > 1:
        tries.append({k: v for t in tries for k, v in t.items()})
    return tries[:MAX_PROBES]


def _flags(graph: Graph, dims: Mapping[tuple[str, int], int], names) -> str:
    shapes = {v.name: tuple(dims.get((v.name, i), d) for i, d in enumerate(v.shape)) for v in graph.inputs}
    return " ".join(f"--input-shape {n}={','.join(map(str, shapes[n]))}" for n in names)


def explain_defaults_failure(graph: Graph, seed: int = 0) -> str | None:
    """One line for a model that onnxruntime cannot run at the sizes gspo chose for its dynamic
    dimensions: each dimension gspo pinned, onnxruntime's reason, and the flags that fix it.

    Args:
        graph: the model as loaded (``graph.extras.defaulted`` lists the dimensions defaulted).
        seed: seed of the random inputs it is run on.

    Returns:
        The message; None when no dimension was defaulted, or the model runs at those sizes
        (its failure is elsewhere), or it cannot be run with its dynamic dimensions at all.
    """
    defaulted = graph.extras.defaulted
    if not defaulted or not graph.extras.dynamic_io:
        return None
    candidates = _candidates(defaulted)
    try:
        session = make_session(serialize(graph, keep_dynamic=True))
        reason = _failure(session, graph, {}, seed)
        if reason is None:
            return None
        fix = next((dims for dims in candidates if _failure(session, graph, dims, seed) is None), None)
    except GspoError:
        return None
    pinned = "; ".join(f"{d.input} dim {d.axis}{'' if d.symbol == '?' else f' ({d.symbol})'} -> {d.value}"
                       for d in defaulted)
    where = f"at the sizes gspo chose for its dynamic dimensions ({pinned})"
    if fix is not None:
        changed = list(dict.fromkeys(name for name, _ in fix))
        return (f"onnxruntime cannot run the model {where}: {reason}; it runs with {_flags(graph, fix, changed)} "
                "(or pass the sizes you use with --input-shape, or real inputs with --inputs FEEDS.npz)")
    names = list(dict.fromkeys(d.input for d in defaulted))
    tried = ", nor with them set to 1" if candidates else ""
    return (f"onnxruntime cannot run the model {where}{tried}: {reason}; pass the sizes the model takes with "
            f"--input-shape (now {_flags(graph, {}, names)}), or real inputs with --inputs FEEDS.npz")
