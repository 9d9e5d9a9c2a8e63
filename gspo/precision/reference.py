"""The source model's outputs on the precision data, every candidate's reference, run within the
time budget; and what the stage's other steps are estimated to cost from them.

The source runs once per sample, in one session for both sets. The session is built only when
the time left holds it (:func:`session_estimate`: seconds per byte of weights); the samples then
run one at a time until the reference's deadline, each set in its own half (the first sample of
each always: the step that cannot be cut), and the samples that did not fit are left out with a
note. What building and running took is what the later steps are estimated with
(:class:`Reference`): a judgment of a kind builds it (quantizing costs
:data:`QUANTIZE_S_PER_BYTE` of its weights), builds a session and runs the data.

A sample whose inputs hold NaN or infinity and on which the source's output is NaN or infinite
says nothing of the error (a reduced model need not keep a NaN where fp32 does): it is left out
with a warning naming the file, the input and the output, so that the data is not mistaken for
pieces that cannot be reduced.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.precision.samples import PrecisionData
from gspo.runtime.executor import make_executor
from gspo.timing.deadline import Deadline

__all__ = ["OPENVINO_SESSION_S", "PROBE_S", "QUANTIZE_S_PER_BYTE", "SESSION_S_PER_BYTE", "Reference", "reference_outputs", "session_estimate",
           "weight_bytes"]

_KINDS = ("calibration", "validation")
#: Seconds per byte of weights of building an onnxruntime session of a model, and of quantizing
#: it (onnxruntime's QDQ or dynamic quantizer): a 400 MB MatMul took 10.5 s and 29-31 s on the
#: shared 2-core EPYC (load 10); a tenth of that on an idle one, so both over-estimate there.
#: BERT-base (437 MB of weights) on the 2-core EPYC at load 2: static QDQ 6.8 s, dynamic 4.8 s,
#: so the quantization's rate is 2.5e-8 (the 7.5e-8 of the 400 MB MatMul at load 10 made every
#: int8 kind of BERT-base look 35 s a judgment, and none was fitted in a 300 s budget).
SESSION_S_PER_BYTE = 2.6e-8
QUANTIZE_S_PER_BYTE = 2.5e-8
#: Seconds of what OpenVINO adds whatever the model's size: the probe of a static int8 kind (a
#: process of its own compiling the model: 1.7-2.0 s for a 16x16 MatMul on the shared EPYC), and
#: a compile (0.17-0.74 s, where onnxruntime took 0.02-0.04 s).
PROBE_S = 2.0
OPENVINO_SESSION_S = 0.5


def weight_bytes(graph: Graph) -> int:
    """Bytes of the graph's weights."""
    from gspo.ir.weights import np_dtype

    total = 0
    for w in graph.weights.values():
        try:
            total += w.size * np_dtype(w.dtype).itemsize
        except (KeyError, TypeError, ValueError):  # a type numpy has not (strings): counted as one byte each
            total += w.size
    return total


def session_estimate(graph: Graph) -> float:
    """Seconds building a session of ``graph`` is estimated to take, from its weights."""
    return SESSION_S_PER_BYTE * weight_bytes(graph)


@dataclass(frozen=True)
class Reference:
    """The source's outputs on the data used (``outputs["calibration"][i]``: on
    ``data.calibration[i]``), the data (less the samples left out), and what building the
    session and running one sample took (seconds)."""

    data: PrecisionData
    outputs: dict[str, list[dict[str, np.ndarray]]]
    session_s: float
    sample_s: float

    def judgment_s(self, build_s: float, sessions: int = 1) -> float:
        """Seconds one judgment of a candidate is estimated to take: building it (``build_s``),
        ``sessions`` sessions (a probe compile counts as one) and a run of the larger set."""
        runs = max(len(self.data.calibration), len(self.data.validation))
        return build_s + sessions * self.session_s + runs * self.sample_s


def _non_finite(values: Mapping[str, np.ndarray]) -> tuple[str, str] | None:
    """The first floating-point array of ``values`` holding NaN or infinity, and which (``"NaN in
    3 of 256 values"``); ``None``: none."""
    for name, v in values.items():
        a = np.asarray(v)
        if a.dtype.kind != "f" or not a.size:
            continue
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        if nan or inf:
            what = " and ".join(w for w, n in (("NaN", nan), ("infinity", inf)) if n)
            return name, f"{what} in {nan + inf} of {a.size} values"
    return None


def _data_note(kind: str, name: str, sample, outputs) -> str | None:
    """The warning for a sample whose non-finite inputs make a non-finite output (``None``: usable)."""
    bad_in, bad_out = _non_finite(sample), _non_finite(outputs)
    if bad_in is None or bad_out is None:
        return None
    return (f"{kind} sample {name} has {bad_in[1]} of input {bad_in[0]!r}, and the model's output {bad_out[0]!r} "
            f"is not finite on it: the sample is not used (the error of reduced precision cannot be measured "
            f"where the data makes NaN or infinity); fix or remove it")


def _run_set(ex, names, kind: str, data: PrecisionData, deadline: Deadline | None, clock, notes: list[str]):
    """The source's outputs on one set until ``deadline`` (the first sample always), the samples
    kept and their names, and the seconds the runs took."""
    samples, labels = getattr(data, kind), data.names.get(kind, ())
    kept, outputs, kept_names, spent = [], [], [], 0.0
    for i, sample in enumerate(samples):
        if i and deadline is not None and not deadline.fits(spent / i):
            notes.append(f"used the first {i} of {len(samples)} {kind} samples: the time budget holds no more "
                         f"runs of the source model (about {1e3 * spent / i:.1f} ms each)")
            break
        began = clock()
        out = {n: np.array(v, copy=True) for n, v in ex.run(sample).items() if n in names}
        spent += clock() - began
        name = labels[i] if i < len(labels) else f"{i + 1}"
        warning = _data_note(kind, name, sample, out)
        if warning:
            notes.append(warning)
            continue
        kept.append(sample)
        outputs.append(out)
        kept_names.append(name)
    if not kept:
        raise GspoError(f"every {kind} sample has NaN or infinity in its inputs that makes the model's outputs NaN "
                        f"or infinite: reduced precision cannot be judged on them; give samples with finite values")
    return kept, outputs, kept_names, spent


def reference_outputs(graph: Graph, data: PrecisionData, deadline: Deadline | None, notes: list[str],
                      share: float = 1.0) -> Reference:
    """The outputs of ``graph`` (the source) on ``data``, run within ``share`` of the time
    ``deadline`` leaves once the session is built (see the module docstring); ``notes`` gets a
    line for each sample left out.

    Raises:
        GspoError: every sample of a set left out, or the model does not run.
    """
    clock = deadline.clock if deadline is not None else time.perf_counter
    began = clock()
    sets, outputs, names, spent, runs = {}, {}, {}, 0.0, 0
    with make_executor(graph, None, "cpu") as ex:
        session_s = clock() - began
        wanted = set(graph.output_names())
        runs_end = deadline.share(share) if deadline is not None else None
        for j, kind in enumerate(_KINDS):
            mine = runs_end.share(1 / (len(_KINDS) - j)) if runs_end is not None else None
            sets[kind], outputs[kind], names[kind], s = _run_set(ex, wanted, kind, data, mine, clock, notes)
            spent, runs = spent + s, runs + len(sets[kind])
    used = dataclasses.replace(data, calibration=tuple(sets["calibration"]), validation=tuple(sets["validation"]),
                               names={k: tuple(v) for k, v in names.items()})
    return Reference(used, outputs, session_s, spent / max(1, runs))
