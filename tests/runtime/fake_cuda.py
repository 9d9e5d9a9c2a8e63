"""Stand-ins for onnxruntime-gpu and cuda-python that record every call in one log.

They follow the documented call shapes (cuda-python's ``(err, *values)`` tuples, onnxruntime's
sessions, IOBinding and OrtValues) and compute nothing: what the CPU can check of the CUDA path
is the order and the arguments of the calls, which these record. With ``FakeOrt(compute=True)``
the device values hold arrays: ``cudaMemcpyAsync`` copies into them and each session computes
its outputs with onnxruntime's CPU provider, so that outputs can be compared with the CPU's.
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from types import SimpleNamespace

import numpy as np

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


class Err:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Handle:
    """A cuda-python object: its address only through get_cuda_native_handle."""

    def __init__(self, kind: str, number: int, flags=None):
        self.kind, self.number, self.flags = kind, number, flags
        self.handle = 0x1000 + number

    def __int__(self):
        raise AssertionError("int() on a cuda-python object is deprecated; use get_cuda_native_handle")

    def __repr__(self) -> str:
        return f"{self.kind}{self.number}"


class FakeCudart:
    """``cuda.bindings.runtime`` with a log."""

    cudaStreamNonBlocking = 1
    cudaEventDefault = 0
    cudaEventDisableTiming = 2
    cudaMemcpyKind = SimpleNamespace(cudaMemcpyHostToDevice="H2D")

    class cudaError_t:  # noqa: N801 (cuda-python's name)
        cudaSuccess = Err("cudaSuccess")
        cudaErrorNoDevice = Err("cudaErrorNoDevice")
        cudaErrorInsufficientDriver = Err("cudaErrorInsufficientDriver")
        cudaErrorInvalidResourceHandle = Err("cudaErrorInvalidResourceHandle")

    def __init__(self, log: list, devices: int = 1, device_error=None, driver: int = 12040, fail: str | None = None,
                 cuda_python: str = "12.9.1"):
        self.log, self.devices, self.device_error, self.driver, self.fail = log, devices, device_error, driver, fail
        self.cuda_python = cuda_python  # the cuda-python version "installed" with these bindings (for CUDA 12)
        self._ids = itertools.count()
        self._clock = itertools.count(1)
        self.recorded: dict = {}
        self.memory: dict = {}  # device values by data_ptr (shared with FakeOrt)

    def _result(self, name: str, *values):
        ok = self.cudaError_t.cudaSuccess
        return (self.cudaError_t.cudaErrorInvalidResourceHandle if self.fail == name else ok, *values)

    def cudaGetDeviceCount(self):  # noqa: N802
        return (self.device_error or self.cudaError_t.cudaSuccess, self.devices)

    def cudaDriverGetVersion(self):  # noqa: N802
        return self._result("cudaDriverGetVersion", self.driver)

    def cudaGetErrorString(self, err):  # noqa: N802
        return (self.cudaError_t.cudaSuccess, f"text of {err.name}".encode())

    def cudaGetDeviceProperties(self, device):  # noqa: N802
        return self._result("cudaGetDeviceProperties", SimpleNamespace(name=b"Fake GPU 16GB\x00\x00"))

    def cudaSetDevice(self, device):  # noqa: N802
        self.log.append(("set_device", device))
        return self._result("cudaSetDevice")

    def cudaStreamCreateWithFlags(self, flags):  # noqa: N802
        s = Handle("stream", next(self._ids), flags)
        self.log.append(("create_stream", s))
        return self._result("cudaStreamCreateWithFlags", s)

    def cudaEventCreateWithFlags(self, flags):  # noqa: N802
        e = Handle("event", next(self._ids), flags)
        self.log.append(("create_event", e))
        return self._result("cudaEventCreateWithFlags", e)

    def cudaStreamWaitEvent(self, stream, event, flags):  # noqa: N802
        self.log.append(("wait", stream, event))
        return self._result("cudaStreamWaitEvent")

    def cudaEventRecord(self, event, stream):  # noqa: N802
        self.log.append(("record", event, stream))
        self.recorded[event.number] = float(next(self._clock))
        return self._result("cudaEventRecord")

    def cudaEventSynchronize(self, event):  # noqa: N802
        return self._result("cudaEventSynchronize")

    def cudaEventElapsedTime(self, start, end):  # noqa: N802
        return self._result("cudaEventElapsedTime", self.recorded[end.number] - self.recorded[start.number])

    def cudaRuntimeGetVersion(self):  # noqa: N802
        return self._result("cudaRuntimeGetVersion", 12080)

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):  # noqa: N802
        self.log.append(("memcpy", kind, stream))
        value = self.memory.get(dst)
        if value is not None and value.array is not None:
            ctypes.memmove(value.array.ctypes.data, src, nbytes)
        return self._result("cudaMemcpyAsync")

    def cudaStreamSynchronize(self, stream):  # noqa: N802
        self.log.append(("sync", stream))
        return self._result("cudaStreamSynchronize")

    def cudaEventDestroy(self, event):  # noqa: N802
        self.log.append(("destroy_event", event))
        return self._result("cudaEventDestroy")

    def cudaStreamDestroy(self, stream):  # noqa: N802
        self.log.append(("destroy_stream", stream))
        return self._result("cudaStreamDestroy")


class FakeUtils:
    def __init__(self, log: list):
        self.log = log

    def get_cuda_native_handle(self, obj):
        self.log.append(("native_handle", obj))
        return obj.handle


class FakeValue:
    def __init__(self, shape=(1,), dtype=np.float32, array=None):
        self.shape, self.dtype, self.array = tuple(shape), dtype, array

    def data_ptr(self) -> int:
        return id(self)

    def numpy(self) -> np.ndarray:
        return self.array.copy() if self.array is not None else np.zeros(self.shape, self.dtype)


class FakeBinding:
    def __init__(self, session):
        self.session, self.inputs, self.outputs, self.results = session, {}, [], None

    def bind_ortvalue_input(self, name, value):
        assert isinstance(value, FakeValue), f"{name}: a host array was bound, not a device OrtValue"
        self.inputs[name] = value

    def bind_output(self, name, device, device_id):
        assert device == "cuda"
        self.outputs.append(name)

    def get_outputs(self):
        return self.results if self.results is not None else [FakeValue() for _ in self.outputs]


class FakeSession:
    def __init__(self, ort, index: int, providers, options, cpu=None):
        self.ort, self.index, self.providers, self.options, self.cpu = ort, index, list(providers), options, cpu
        weakref.finalize(self, ort.log.append, ("session_freed", index))

    def get_providers(self):
        return self.providers

    def io_binding(self):
        return FakeBinding(self)

    def run(self, names, feeds):
        """A run on host arrays (onnxruntime copies them to and from the device)."""
        assert all(isinstance(v, np.ndarray) for v in feeds.values())
        self.ort.log.append(("host_run", self.index, tuple(names)))
        if self.cpu is not None:
            return self.cpu.run(list(names), dict(feeds))
        return [np.zeros((1,), np.float32) for _ in names]

    def run_with_iobinding(self, binding, run_options):
        assert run_options.entries.get("disable_synchronize_execution_providers") == "1"
        self.ort.log.append(("run", self.index, self.options.get("user_compute_stream")))
        if self.cpu is not None:
            outs = self.cpu.run(binding.outputs, {n: v.array for n, v in binding.inputs.items()})
            binding.results = [FakeValue(o.shape, o.dtype, o) for o in outs]


class FakeOrt:
    """``onnxruntime`` (the onnxruntime-gpu build) with a log; ``uses``: what sessions report."""

    __file__ = "/nonexistent/onnxruntime/__init__.py"

    def __init__(self, log: list, available=(CUDA, CPU), uses=(CUDA, CPU), version="1.26.0", cuda_version="12.8",
                 compute: bool = False):
        self.log, self.available, self.uses, self.compute = log, list(available), list(uses), compute
        self.memory: dict = {}
        self.__version__, self.cuda_version = version, cuda_version
        self.sessions: list[dict] = []
        self.OrtAllocatorType = SimpleNamespace(ORT_ARENA_ALLOCATOR="arena")
        self.OrtMemType = SimpleNamespace(DEFAULT="default")
        self.OrtValue = SimpleNamespace(ortvalue_from_shape_and_type=self._device_value)

    def _device_value(self, shape, dtype, device, device_id):
        assert device == "cuda"
        value = FakeValue(shape, dtype, np.empty(shape, dtype) if self.compute else None)
        self.memory[value.data_ptr()] = value
        return value

    def get_available_providers(self):
        return self.available

    def preload_dlls(self):
        self.log.append(("preload_dlls",))
        print("preload_dlls chatter that must not reach stdout")

    def OrtMemoryInfo(self, *args):  # noqa: N802
        return args

    def OrtArenaCfg(self, *args):  # noqa: N802
        return args

    def create_and_register_allocator_v2(self, provider, info, options, cfg):
        self.log.append(("shared_arena", provider, info[2]))

    def SessionOptions(self):  # noqa: N802
        so = SimpleNamespace(entries={}, log_severity_level=2)
        so.add_session_config_entry = so.entries.__setitem__
        return so

    def RunOptions(self):  # noqa: N802
        ro = SimpleNamespace(entries={})
        ro.add_run_config_entry = ro.entries.__setitem__
        return ro

    def InferenceSession(self, model, sess_options=None, providers=()):  # noqa: N802
        (name, options), *rest = providers
        assert name == CUDA and rest == [CPU]
        self.sessions.append({"options": options, "config": getattr(sess_options, "entries", {}),
                              "threads": getattr(sess_options, "intra_op_num_threads", None)})
        self.log.append(("session", len(self.sessions) - 1))
        cpu = None
        if self.compute:
            import onnxruntime

            cpu = onnxruntime.InferenceSession(model, providers=[CPU])
        return FakeSession(self, len(self.sessions) - 1, self.uses, options, cpu)


#: Why the torch runtime does not run while the stand-ins are installed.
TORCH_REFUSED = "the torch runtime is not used with the stand-ins of tests/runtime/fake_cuda.py"


def _refuse_torch_cuda(monkeypatch) -> None:
    """Keep the real torch CUDA runtime out of reach. Every CUDA executor is made by
    :func:`gspo.runtime.cuda.choice.cuda_executor`, which takes torch only where its status says it
    runs: that status says no, so ``auto`` takes onnxruntime-gpu (the stand-in) or names both
    missing, and ``torch`` asked for is an error. (On a GPU, torch would be handed the stand-in's
    made-up stream handles: a crash.) No runtime is asked for by the environment."""
    from gspo.runtime.torchrt import status as torch_status

    monkeypatch.setattr(torch_status, "torch_status", lambda device_id=0: (False, TORCH_REFUSED))
    monkeypatch.delenv("GSPO_CUDA_RUNTIME", raising=False)


def install(monkeypatch, ort: FakeOrt | None = None, cudart: FakeCudart | None = None, log: list | None = None):
    """Make ``gspo.runtime.cuda`` see the fakes; returns (log, ort, cudart).

    They stand in for everything :func:`gspo.runtime.cuda.gpu_status` reads of the machine: the
    onnxruntime and cuda-python modules, cuda-python's version (``cudart.cuda_python``) and the
    installed onnxruntime distributions (onnxruntime-gpu alone), so that a real cuda-python or
    onnxruntime installed here changes nothing. The torch CUDA runtime is out of reach
    (:func:`_refuse_torch_cuda`): ``--device cuda`` runs on the stand-ins or fails naming what is
    missing. The backends' cached CUDA status starts empty and is dropped after the test (a status
    found with the fakes must not make 'cuda' available to the tests that run later)."""
    from gspo.runtime import backends
    from gspo.runtime.cuda import common, executor, status

    log = [] if log is None else log
    ort = ort or FakeOrt(log)
    cudart = cudart or FakeCudart(log)
    utils = FakeUtils(log)
    cudart.memory = ort.memory
    monkeypatch.setattr(common, "import_ort", lambda: ort)
    monkeypatch.setattr(common, "import_cudart", lambda: cudart)
    monkeypatch.setattr(common, "import_cuda_utils", lambda: utils)
    monkeypatch.setattr(status, "cuda_python_version", lambda: cudart.cuda_python)
    monkeypatch.setattr(status, "installed_runtimes", lambda: ("onnxruntime-gpu",))
    monkeypatch.setattr(executor, "_arenas", set())
    monkeypatch.setattr(backends, "_cuda_checked", {})
    _refuse_torch_cuda(monkeypatch)
    return log, ort, cudart
