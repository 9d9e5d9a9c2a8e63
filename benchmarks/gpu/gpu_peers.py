"""The peers gspo is measured against on a GPU: torch.compile of the same converted program.

The torch runtime's converted program (:class:`gspo.runtime.torchrt.convert.Program`) is the
computation: the same ops and the same weights as plain PyTorch eager on one stream. The program
is traced to one FX graph of ATen ops by ``make_fx`` and ``torch.compile`` compiles that graph:
the fair anchor (dynamo also takes the program whole, one graph and no break on every zoo model
and the 29 corpus exports without an onnxruntime island: tests/runtime/torchrt/test_dynamo.py).
A program with an onnxruntime island, or one that reads values of the data back to the host
(``Program.host_reads``), is not traced, since its trace would bake one input's values in:
dynamo compiles the program itself there, its graph breaks running eagerly. Where dynamo breaks
on the program is recorded (``torch._dynamo.explain``).

Every peer runs with TF32 off; ``max-autotune-no-cudagraphs`` is replayed from a CUDA graph
captured here, ``reduce-overhead`` uses inductor's own CUDA graphs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

#: torch.compile modes, in the order they are compiled (the first is compiled where time allows
#: only one).
MODES = ("reduce-overhead", "max-autotune-no-cudagraphs")
#: dynamo's compiles per frame on a program it cannot take whole (its default: 8).
RECOMPILES = 512


def device_of(rehearse: bool):
    import torch

    return torch.device("cpu") if rehearse else torch.device("cuda", 0)


def inputs_on(program, feeds: dict, device) -> list:
    from gspo.runtime.torchrt.convert import to_device

    return [to_device(np.asarray(feeds[name]), device) for name in program.inputs]


def flat(program) -> Callable:
    """The program as a function of positional tensors returning a tuple (what make_fx traces)."""
    def run(*xs):
        out = program(dict(zip(program.inputs, xs)))
        return tuple(out[name] for name in program.outputs)
    return run


def where_dynamo_breaks(program, args: list, limit: int = 3) -> dict:
    """dynamo on the program itself: how many graphs, how many breaks, and the first few places."""
    import torch

    try:
        torch._dynamo.reset()
        ex = torch._dynamo.explain(flat(program))(*args)
    except Exception as e:  # explain itself failing is a finding, not a crash of the step
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    places = []
    for b in ex.break_reasons:
        frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in b.user_stack][-2:]
        text = f"{str(b.reason).splitlines()[0][:120]} at {' <- '.join(reversed(frames))}"
        if text not in places:
            places.append(text)
    return {"graphs": ex.graph_count, "breaks": ex.graph_break_count, "where": places[:limit]}


def trace(program, args: list):
    """The program as one FX graph of ATen ops (make_fx on real tensors), or (None, why it cannot
    be: an onnxruntime island, or a read of the data's values, which the trace would bake in:
    ``Program.host_reads`` names each, found by running the steps on fake tensors)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    if program.fallbacks:
        return None, f"not traced: onnxruntime runs part of it ({program.fallbacks[0]})"
    if program.host_reads:
        return None, f"not traced: a run reads values of the data back to the host ({program.host_reads[0]})"
    with torch.no_grad():
        return make_fx(flat(program), tracing_mode="real")(*args), None


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compiled(gm, args: list, mode: str, device) -> tuple[Callable, float]:
    """``torch.compile(gm, mode=mode)``, compiled by its first calls (two for reduce-overhead:
    inductor's CUDA graph is recorded on the second): the callable and those calls' seconds."""
    import torch

    fn = torch.compile(gm, mode=mode, dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(2 if mode == "reduce-overhead" else 1):
            _call(fn, args, mode)
        sync(device)
    return fn, time.perf_counter() - start


def _call(fn, args, mode):
    import torch

    if mode == "reduce-overhead":
        torch.compiler.cudagraph_mark_step_begin()
    return fn(*args)


def replayed(fn, args: list, device) -> tuple[Callable | None, str | None]:
    """``fn`` captured once in a CUDA graph on static inputs and replayed: (callable, None), or
    (None, why not)."""
    import torch

    if device.type != "cuda":
        return None, "CUDA graphs need a CUDA device"
    static = [a.clone() for a in args]
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):
                fn(*static)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            out = fn(*static)
    except RuntimeError as e:
        sync(device)
        return None, f"capture failed: {str(e).splitlines()[0][:200]}"

    def replay(*xs):
        for s, x in zip(static, xs):
            if s.data_ptr() != x.data_ptr():
                s.copy_(x)
        graph.replay()
        return out
    return replay, None


def runner(fn: Callable, args: list, device, mode: str = "") -> Callable[[], object]:
    """One timed call for gspo.runtime.interleaved: CUDA events on the current stream (device
    time, inputs already on the device), the host's clock on the CPU."""
    import torch

    from gspo.runtime.bench import DeviceTime

    if device.type != "cuda":
        def host():
            with torch.no_grad():
                return _call(fn, args, mode)
        return host
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed():
        with torch.no_grad():
            start.record()
            _call(fn, args, mode)
            end.record()
        end.synchronize()
        return DeviceTime(start.elapsed_time(end) / 1e3)
    return timed


def outputs(fn: Callable, args: list, names, mode: str = "") -> dict:
    """One call's outputs as host arrays by name."""
    import torch

    from gspo.runtime.torchrt.convert import to_numpy

    with torch.no_grad():
        out = _call(fn, args, mode)
        return {name: to_numpy(t.clone()) for name, t in zip(names, out)}


def build_peers(program, args: list, device, modes, left: Callable[[], float], cost: Callable[[str], float]) -> dict:
    """The compiled peers of one program: {label: (callable, mode)} plus what happened to each.

    ``left()``: seconds left in the step; ``cost(mode)``: the seconds a compile of ``mode`` is
    budgeted (a mode that would not fit is skipped and recorded as such)."""
    info: dict = {"compile_s": {}, "skipped": {}, "refused": {}}
    peers: dict = {}
    start = time.perf_counter()
    gm, why = trace(program, args)
    info["trace_s"] = round(time.perf_counter() - start, 2)
    info["compiled"] = "the program traced to one FX graph (make_fx)"
    if gm is None:  # dynamo on the program itself, its graph breaks falling back to eager
        import torch

        info["refused"]["trace"] = why
        info["compiled"] = "the program itself (dynamo, graph breaks run eagerly)"
        # between graph breaks each op function is a frame of its own, called at many shapes:
        # dynamo's default of 8 compiles per frame would leave most of the program eager
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILES)
        torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit,
                                                               16 * RECOMPILES)
    for k, mode in enumerate(modes):
        if left() < cost(mode):
            info["skipped"][mode] = f"deadline: {left():.0f} s left, its compile is budgeted {cost(mode):.0f} s"
            continue
        if gm is None:
            target = flat(program)  # a function of its own for each mode
        else:  # a graph module of its own for each mode (dynamo caches compiled code per code object)
            target = gm if not k else trace(program, args)[0]
        try:
            fn, seconds = compiled(target, args, mode, device)
        except Exception as e:  # a compile failure is a finding
            info["refused"][mode] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            continue
        info["compile_s"][mode] = round(seconds, 1)
        label = f"compile_{mode.replace('-', '_')}"
        if mode == "reduce-overhead":
            peers[label] = (fn, mode)
            continue
        graph, why = replayed(fn, args, device)
        if graph is None:
            info["refused"][f"{mode} in a CUDA graph"] = why
            peers[label] = (fn, mode)
        else:
            peers[label + "_graph"] = (graph, "")
    return {"peers": peers, **info}
