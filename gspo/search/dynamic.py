"""Whether an optimized model can keep the input's dynamic dimensions: it must compute the same at other sizes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.onnx_io import serialize
from gspo.runtime import (
    make_session,
    random_inputs,
    run,
)
from gspo.search.candidate import compare
from gspo.search.prepared import Prepared
from gspo.streams import Schedule

#: ``dynamic_dims`` when the inputs are written as the model declares them (see
#: ``ModelExtras.static_refused``).
DECLARED = "as the model declares them: onnxruntime refuses it with its inputs pinned"


def _inputs_at(graph: Graph, dims: Mapping[tuple[str, int], int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs for ``graph`` with the dynamic dimensions ``dims`` ((input, axis) -> size)."""
    resized = tuple(dataclasses.replace(v, shape=tuple(dims.get((v.name, i), d) for i, d in enumerate(v.shape)))
                    for v in graph.inputs)
    return random_inputs(dataclasses.replace(graph, inputs=resized), seed)


def keeps_dynamic(prepared: Prepared, graph: Graph, schedule: Schedule | None, cfg) -> tuple[bool, str]:
    """Whether the result can be saved with the input's dynamic dimensions: it must compute the
    same as the original at other sizes too (batch 2; other dimensions halved)."""
    if graph.extras.static_refused:
        return True, DECLARED
    defaulted = prepared.original.extras.defaulted
    if not defaulted:
        return False, ""
    if graph.key == prepared.original.key:
        return True, "kept"
    if not graph.extras.dynamic_io:
        return False, "fixed: the model's shape arithmetic depends on its dynamic dimensions"
    sizes = [{(d.input, d.axis): (2 if d.value == 1 else max(1, d.value // 2)) for d in defaulted}]
    try:
        ref = make_session(serialize(prepared.original, keep_dynamic=True))
        got = make_session(serialize(graph, schedule.to_json() if schedule else None, keep_dynamic=True))
        for dims in sizes:
            feeds = _inputs_at(prepared.plain, dims, cfg.verify.seed)
            try:
                want = run(ref, feeds)
            except GspoError:
                continue  # the original does not run at this size either: nothing to compare
            res = compare(want, run(got, feeds), cfg.tolerance)
            if not res.equivalent:
                return False, f"fixed: at other sizes the result differs ({res.worst.name})"
    except GspoError as e:
        return False, f"fixed: at other sizes the result does not run ({e})"
    return True, "kept"
