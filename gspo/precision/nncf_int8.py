"""int8 by NNCF on OpenVINO: NNCF decides how to quantize, the fit decides whether it holds.

``nncf.quantize`` (NNCF's ONNX backend) is given the fp32 model and the calibration samples, and
returns the model in QDQ form with the original nodes' names and values kept. What it does that
gspo's own QDQ path (:mod:`gspo.runtime.quantize`) does not: it places the quantizers the way
OpenVINO's CPU plugin runs transformers (the ``TRANSFORMER`` model type keeps LayerNorm, Softmax
and GELU in float and quantizes the attention's MatMuls), applies SmoothQuant (activations'
outliers moved into the weights) and corrects the biases for the quantization's shift. On the
small corpus BERT it took 4-8 s on the shared 2-core EPYC; OpenVINO compiled the result, 2.86 ms
against 7.00 ms at f32, nmse 6.5e-5 and 1.6e-4 on its two outputs. On BERT-base at sequence 128
(437 MB, 8 samples) it took 78 s there (5.3 GB at the peak, the fp32 graph included), and
OpenVINO compiled the result.

The kind is built as the static kinds are: the model quantized once, at the first build; each
build puts the pieces left at fp32 back in float (:func:`~gspo.precision.qdq.keep_float`), and
the model is placed whole on OpenVINO, probed in a process of its own once before anything is
built (:func:`~gspo.precision.qdq.probed_build`).

Notes:
    Determinism: NNCF takes the first ``subset_size`` samples (all of them here) in order and
    draws no random numbers in the ONNX backend's min-max, SmoothQuant and fast bias correction:
    the same model and samples give the same bytes.

    Memory: NNCF holds the model it is given and the one it returns (each a copy of the
    weights), the model with every statistic's tensor an extra output (one inference of it at a
    time) and, per statistic, its reduction over the samples (per-channel minima, maxima and
    means, not the activations).

    Its progress bars and log lines are kept from the user's screen while it runs
    (:func:`_silent`): what gspo says stays gspo's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.precision.kind import Kind
from gspo.runtime.openvino import openvino_probe
from gspo.streams import node_id

__all__ = ["MISSING", "NAME", "NNCF_S", "has_attention", "nncf_available", "nncf_kind", "nncf_quantize",
           "nncf_seconds"]

#: The kind's name, and the note where nncf is not installed.
NAME = "int8 (NNCF) on openvino"
MISSING = "int8 (NNCF): nncf is not installed: pip install 'gspo[openvino]'"
#: Seconds of an NNCF quantization whatever the model's size: importing nncf (3.1 s on the shared
#: EPYC) and building its graph of the model.
NNCF_S = 4.0
#: The op types NNCF quantizes the inputs of in a transformer (``ModelType.TRANSFORMER``).
_TRANSFORMER_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
#: Ops between an attention's MatMul and its Softmax (a scale, a mask, a cast).
_SCORE_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Cast", "Reshape", "Transpose"})


def nncf_available() -> bool:
    """Whether nncf can be imported here (found on the path; not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("nncf") is not None
    except (ImportError, ValueError):
        return False


def has_attention(graph: Graph) -> bool:
    """Whether ``graph`` has an attention: a Softmax fed by a MatMul, directly or through the
    ops that scale and mask the scores (at most 4 of them)."""
    for softmax in graph.nodes_by_op.get("Softmax", ()):
        todo, seen = [(softmax.inputs[0], 0)], set()
        while todo:
            name, depth = todo.pop()
            found = graph.producers.get(name)
            if found is None or name in seen:
                continue
            seen.add(name)
            p = found[0]
            if p.op_type == "MatMul":
                return True
            if p.op_type in _SCORE_OPS and depth < 4:
                todo += [(i, depth + 1) for i in p.inputs if i and not graph.is_weight(i)]
    return False


def _touchable(graph: Graph, transformer: bool) -> set[str]:
    """The node ids whose inputs NNCF is expected to quantize (known before it runs): in a
    transformer the MatMul, Gemm and Conv nodes; else those onnxruntime's static QDQ quantizes
    (:func:`~gspo.runtime.quantize.quantizable`, close to NNCF's CPU set)."""
    if transformer:
        return {node_id(n) for n in graph.nodes if n.op_type in _TRANSFORMER_OPS}
    from gspo.runtime.quantize import quantizable

    try:
        return set(quantizable(graph))
    except GspoError:
        return set()


@contextlib.contextmanager
def _silent() -> Iterator[None]:
    """NNCF's progress bars (rich, on the standard streams) and log lines (its own handler,
    bound to the standard output at import) held back while it runs, then its level restored."""
    import io
    import logging
    import warnings

    logger = logging.getLogger("nncf")
    levels = [(logger, logger.level)] + [(h, h.level) for h in logger.handlers]
    for item, _ in levels:
        item.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for item, level in levels:
            item.setLevel(level)


def nncf_quantize(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]], transformer: bool) -> Graph:
    """``graph`` quantized by ``nncf.quantize`` on ``samples`` (all of them), as a QDQ graph with
    ``graph``'s node and value names: ``ModelType.TRANSFORMER`` where ``transformer``, NNCF's
    defaults otherwise (fast bias correction, the mixed preset's symmetric weights).

    Raises:
        GspoError: nncf is missing or cannot be imported, or it cannot quantize the model.
    """
    from gspo.ir import to_model
    from gspo.ir.quantized import from_quantized

    if not samples:
        raise GspoError("int8 (NNCF): no calibration samples to quantize with")
    try:
        with _silent():
            import nncf
    except Exception as e:  # a broken install says why in one line
        raise GspoError(f"int8 (NNCF): nncf cannot be imported: {first_line(e)}") from None
    model_type = nncf.ModelType.TRANSFORMER if transformer else None
    try:
        with _silent():
            model = nncf.quantize(to_model(graph), nncf.Dataset(list(samples)), model_type=model_type,
                                  subset_size=len(samples))
    except Exception as e:
        raise GspoError(f"NNCF cannot quantize the model: {first_line(e)}") from None
    return from_quantized(model, graph)


def nncf_kind(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]],
              probe: Callable[[bytes], str | None] = openvino_probe,
              quantize: Callable[[Graph, Sequence[Mapping[str, np.ndarray]], bool], Graph] = nncf_quantize) -> Kind:
    """The kind "int8 (NNCF) on openvino" of ``graph``: quantized once by ``quantize``
    (:func:`nncf_quantize`) on the calibration ``samples`` at its first build, probed once on
    OpenVINO (``probe``), each build keeping the pieces left fp32 in float and placed whole on
    OpenVINO. It touches the pieces NNCF is expected to quantize (:func:`_touchable`)."""
    from gspo.precision.qdq import probed_build, quantized_once

    transformer = has_attention(graph)
    nodes = _touchable(graph, transformer)
    full = quantized_once(lambda: quantize(graph, samples, transformer))
    build = probed_build(graph, full, probe, "openvino")
    return Kind(NAME, "int8", "openvino", lambda ops: any(op in nodes for op in ops), build, first="nncf")


def nncf_seconds(weight_bytes: int, samples: int, ref) -> float:
    """Seconds an NNCF quantization of a model of ``weight_bytes`` on ``samples`` samples is
    estimated to take (``ref``: the source's :class:`~gspo.precision.reference.Reference`):
    :data:`NNCF_S`, two passes over the samples (SmoothQuant's statistics, then the quantizers'
    and the bias correction's) with a session each, and four times a quantization's
    :data:`~gspo.precision.reference.QUANTIZE_S_PER_BYTE` (it copies and transforms the model
    several times). On the shared 2-core EPYC: 7.7 s for the small corpus BERT (21 MB, 8
    samples), 78 s for BERT-base at sequence 128 (437 MB, 8 samples) at load 4, 47 s at load 2."""
    from gspo.precision.reference import QUANTIZE_S_PER_BYTE

    return NNCF_S + 2 * (ref.session_s + 2 * samples * ref.sample_s) + 4 * QUANTIZE_S_PER_BYTE * weight_bytes
