"""The OpenVINO backend: OpenVINO's CPU plugin behind onnxruntime's ``run(names, feeds)``
(:class:`OpenVinoRunner`), compiled for latency at f32 or bf16 inference precision
(:func:`load_openvino`); whether it is installed (:func:`openvino_status`) and runs bf16 here
(:func:`bf16_refusal`); a compile tried in a process of its own (:func:`openvino_probe`).

``openvino`` is imported only when asked for (``pip install 'gspo[openvino]'``); the backend
registry (:mod:`gspo.runtime.backends`) decides when.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from gspo.ir import Graph, serialize
from gspo.ir.protos import control_flow_depth
from gspo.runtime.buffers import BUFFERS, LARGE_OUTPUT
from gspo.runtime.session import BackendError

__all__ = ["INSTALL", "MAX_OPENVINO_NESTING", "NO_BF16", "OpenVinoRunner", "bf16_missing", "bf16_refusal", "cpu_capabilities",
           "load_openvino", "openvino_probe", "openvino_status", "openvino_version", "refuse_nesting", "sweep_temp"]

#: How to install the backend.
INSTALL = "pip install 'gspo[openvino]' (the openvino package)"
_core_lock = threading.Lock()
_core = None


def _openvino():
    import openvino

    return openvino


def openvino_version() -> str:
    """The installed OpenVINO's version, ``X.Y.Z``."""
    return _openvino().__version__.split("-")[0]


def openvino_status() -> tuple[bool, str]:
    """Whether OpenVINO is installed, and if not, how to install it."""
    try:
        _openvino()
    except ImportError:
        return False, f"OpenVINO is not installed: {INSTALL}"
    return True, f"OpenVINO {openvino_version()} CPU"


#: What :func:`bf16_missing` says of a CPU without bf16 instructions.
NO_BF16 = "this CPU has no bf16 instructions"


def cpu_capabilities() -> list[str]:
    """What OpenVINO's CPU plugin says this CPU can do (``BF16``, ``INT8``, ...): the CPU
    features gspo's bf16 decisions read (tests replace this function to inject a CPU)."""
    return list(_openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def bf16_missing() -> str | None:
    """Why OpenVINO (installed) has no bf16 arithmetic on this CPU (``None``: it has)."""
    try:
        caps = cpu_capabilities()
    except Exception as e:  # noqa: BLE001 - OpenVINO raises its own exception types
        return f"OpenVINO cannot tell this CPU's capabilities: {_reason(e)}"
    return None if "BF16" in caps else NO_BF16


def bf16_refusal() -> str | None:
    """Why a search may not place ops on OpenVINO at bf16 here (``None``: it may): without bf16
    instructions OpenVINO would quietly run f32, and a bf16 placement would only cost a compile.
    (A saved bf16 placement still runs here, at f32: :func:`gspo.runtime.backends.run_precision`.)"""
    missing = bf16_missing()
    if missing == NO_BF16:
        return f"{missing} (OpenVINO would run f32)"
    return missing


class OpenVinoRunner:
    """An OpenVINO compiled model behind onnxruntime's ``run(names, feeds)``.

    The inputs are read in place. An output of fixed shape of
    :data:`~gspo.runtime.buffers.LARGE_OUTPUT` bytes or more is written straight into an array of
    :data:`~gspo.runtime.buffers.BUFFERS` (OpenVINO's own buffer for it is let go); other outputs
    come back as copies of OpenVINO's.
    """

    def __init__(self, compiled):
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        #: each output name's port and its position among the model's outputs
        self._outputs = {name: (i, port) for i, port in enumerate(compiled.outputs) for name in port.get_names()}
        #: the inputs the compiled model reads: one OpenVINO dropped (nothing it computes reads it, as
        #: an input the precision fit's one-run ranking adds beside a weight-only MatMul) is not fed
        self._inputs = {name for port in compiled.inputs for name in port.get_names()}
        self._large = {}
        for i, port in enumerate(compiled.outputs):
            shape = port.get_partial_shape()
            if not shape.is_static:
                continue
            dtype = np.dtype(port.get_element_type().to_dtype())
            dims = tuple(int(d) for d in shape.to_shape())
            if dtype.kind in "biufc" and int(np.prod(dims, dtype=np.int64)) * dtype.itemsize >= LARGE_OUTPUT:
                self._large[i] = (dims, dtype)
        if self._large:
            self._bind()  # OpenVINO frees the buffers it allocated for them when it compiled

    def _bind(self) -> dict[int, np.ndarray]:
        """Point each large output at an array of the pool; the arrays by output index."""
        held = {i: BUFFERS.take(*spec) for i, spec in self._large.items()}
        for i, array in held.items():
            self._request.set_output_tensor(i, _openvino().Tensor(array, shared_memory=True))
        return held

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        held = self._bind() if self._large else {}
        try:
            result = self._request.infer({k: _contiguous(v) for k, v in feeds.items() if k in self._inputs}, share_inputs=True,
                                         share_outputs=True)
        except Exception as e:
            raise BackendError(f"OpenVINO failed to run the model: {_reason(e)}") from None
        ports = [self._outputs[n] for n in names]
        return [held[i] if i in held else result[port].copy() for i, port in ports]


def _contiguous(value) -> np.ndarray:
    """``value`` as a C-contiguous array of its own shape (``np.ascontiguousarray`` makes a
    scalar's shape ``(1,)``, which OpenVINO refuses for an input of shape ``[]``)."""
    a = np.asarray(value)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _reason(e: Exception) -> str:
    """The telling line of an OpenVINO exception (its first lines name source files)."""
    lines = [line.strip(" -") for line in str(e).splitlines() if line.strip()]
    telling = [line for line in lines if "No conversion rule" in line or "not supported" in line.lower()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check ", "To facilitate"))]
    return (telling or useful or [type(e).__name__])[0][:300]


def _openvino_core():
    global _core
    with _core_lock:
        if _core is None:
            _core = _openvino().Core()
        return _core


#: The deepest nesting of control flow (If, Loop, Scan in one another's branches) a model given
#: to OpenVINO may have: its compile grows exponentially with the nesting and cannot be
#: interrupted (here, Ifs nested in one another's then-branches: 14 levels 0.2 s, 16 0.7 s, 18
#: 2.5 s, 20 9.4 s, 25 over 300 s; in issue 42's model 14 levels 6 s, 18 levels 21.8 s, 25 over
#: 200 s; benchmarks/edges.md). At 10 levels the slower of the two is about 1-2 s.
MAX_OPENVINO_NESTING = 10


def refuse_nesting(model: bytes | Graph) -> None:
    """Raise :class:`BackendError` when ``model`` nests control flow beyond :data:`MAX_OPENVINO_NESTING`."""
    depth = control_flow_depth(model)
    if depth is None:  # too deep for protobuf to parse: deeper than anything OpenVINO is given
        depth = MAX_OPENVINO_NESTING + 1
    if depth > MAX_OPENVINO_NESTING:
        raise BackendError(f"OpenVINO is not given the model: its control flow (If/Loop/Scan) is nested {depth} deep, "
                           f"beyond {MAX_OPENVINO_NESTING}, where OpenVINO's compile grows exponentially and cannot "
                           "be interrupted")


def load_openvino(model: bytes | Graph, threads: int, precision: str = "f32",
                  keep_f32: Collection[str] = ()) -> OpenVinoRunner:
    """A runner of ``model`` compiled by OpenVINO's CPU plugin for latency at ``precision``
    (``threads``: 0 lets OpenVINO choose). At bf16, the ops that compute the values named in
    ``keep_f32`` compute at f32 in the same compiled model (:func:`_kept_f32`).

    Raises:
        BackendError: the model nests control flow too deep (:func:`refuse_nesting`), or OpenVINO
            cannot compile it (the reason in one line).
    """
    refuse_nesting(model)
    if isinstance(model, Graph):
        model = serialize(model)
    # OpenVINO allocates every output as it compiles; the pool's idle arrays go first
    BUFFERS.clear()
    core = _openvino_core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    try:
        read = core.read_model(io.BytesIO(model))
        if keep_f32 and precision != "f32":
            read = _kept_f32(core, read, keep_f32)
        compiled = core.compile_model(read, "CPU", config)
    except Exception as e:
        raise BackendError(f"OpenVINO cannot compile the model: {_reason(e)}") from None
    return OpenVinoRunner(compiled)


#: The runtime attribute that keeps an op at its own precision whatever the inference precision
#: (OpenVINO's ``ov::disable_fp16_compression``, "precise" in its IR; the CPU plugin honours it at
#: bf16 too). OpenVINO's Python API cannot set it on an op, its IR reader can.
_PRECISE = {"name": "precise", "version": "0"}


def _kept_f32(core, model, values: Collection[str]):
    """``model`` (read from ONNX) with the ops that compute ``values`` marked to stay at f32: the op
    that outputs each value, and the unnamed ops it was decomposed into on the way back from it
    (a Conv's bias Add, a Gemm's MatMul, ...) up to named values, weights and inputs. Written as
    IR, marked there, and read back."""
    import xml.etree.ElementTree as ET

    ov = _openvino()
    producer = {name: op for op in model.get_ordered_ops() if op.get_type_name() != "Result"
                for out in op.outputs() for name in out.get_names()}  # a Result carries its value's name too
    marked: set[str] = set()
    stack = [producer[v] for v in values if v in producer]
    while stack:
        op = stack.pop()
        if op.get_friendly_name() in marked or op.get_type_name() in ("Constant", "Parameter"):
            continue
        marked.add(op.get_friendly_name())
        stack += [src for src in (i.get_source_output().get_node() for i in op.inputs())
                  if not any(out.get_names() for out in src.outputs())]
    with _scratch() as tmp:
        ov.save_model(model, f"{tmp}/m.xml", compress_to_fp16=False)
        tree = ET.parse(f"{tmp}/m.xml")
        weights = np.fromfile(f"{tmp}/m.bin", dtype=np.uint8)
    for layer in tree.getroot().iter("layer"):
        if layer.get("name") in marked:
            info = layer.find("rt_info")
            if info is None:
                info = ET.Element("rt_info")
                layer.insert(1 if layer.find("data") is not None else 0, info)
            ET.SubElement(info, "attribute", _PRECISE)
    return core.read_model(ET.tostring(tree.getroot(), encoding="unicode"), ov.Tensor(weights))


def _scratch():
    """A temporary folder named after this process (:mod:`gspo.outputs`' scheme,
    ``.gspo-ov.gspo-HOST-PID-TOKEN.tmp``), so that the one a killed process left is removed by a
    later run (:func:`sweep_temp`, which runs first)."""
    import tempfile
    from pathlib import Path

    from gspo.outputs import _temp_prefix

    sweep_temp()
    folder = Path(tempfile.gettempdir())
    return tempfile.TemporaryDirectory(prefix=_temp_prefix(folder / "gspo-ov"), suffix=".tmp", dir=folder)


#: What :func:`openvino_probe` runs: read the model from standard input and compile it at the given
#: precision. No file holds the model: one a killed process left would stay (issue 51).
_PROBE = ("import io, sys, openvino as ov; c = ov.Core(); "
          "c.compile_model(c.read_model(io.BytesIO(sys.stdin.buffer.read())), 'CPU', "
          "{'INFERENCE_PRECISION_HINT': sys.argv[1]})")
#: The files earlier gspo versions' probes wrote into the temporary folder (``mkstemp``), and how
#: old one must be to be removed: a probe used its file for at most its timeout.
_OLD_PROBE_FILES, _OLD_PROBE_AGE = "gspo-probe-*.onnx", 3600.0


def sweep_temp() -> None:
    """Remove from the temporary folder what killed gspo processes left there: their named
    temporary folders (:func:`gspo.outputs.remove_stale`) and, an hour after they were made, the
    model files earlier versions' probes wrote (owned by this user)."""
    import glob
    import os
    import tempfile
    import time

    from gspo.outputs import remove_stale

    folder = tempfile.gettempdir()
    remove_stale(folder)
    for path in glob.glob(os.path.join(glob.escape(folder), _OLD_PROBE_FILES)):
        try:
            st = os.stat(path, follow_symlinks=False)
            if st.st_uid == os.getuid() and time.time() - st.st_mtime > _OLD_PROBE_AGE:
                os.unlink(path)
        except OSError:
            continue


def openvino_probe(model: bytes, precision: str = "f32", timeout: float = 300.0) -> str | None:
    """Why OpenVINO cannot compile ``model``, found in a process of its own (``None``: it compiles):
    a model OpenVINO has never been given in this form (a quantized one gspo made) can crash its
    compile (SIGSEGV), which must not take the caller's process with it. The model goes to the
    process through a pipe (no file); :func:`sweep_temp` runs first."""
    import subprocess
    import sys

    sweep_temp()
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, precision], input=model, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"OpenVINO's compile ran past {timeout:g} s"
    if done.returncode < 0:
        return f"OpenVINO's compile crashed (signal {-done.returncode})"
    if done.returncode:  # its traceback's message, without the frames and the logs before it
        said = [line.removeprefix("RuntimeError: ") for line in done.stderr.decode(errors="replace").splitlines()
                if line.strip() and not line.startswith(("WARNING", "Traceback", "  "))]
        return f"OpenVINO cannot compile the model: {_reason(RuntimeError(chr(10).join(said) or 'no reason given'))}"
    return None
