"""optimize's memory: on a model whose output is as large as its input, the arrays gspo itself
holds (numpy's allocations, which tracemalloc follows) peak at a small multiple of the input,
with every backend installed here compared on it. The runtimes' own working memory is theirs
and varies with the machine, so it is not what is measured.

What optimize does, and so what it holds, must not depend on this machine or its history: the
user cache is empty (the pieces' placement is measured, not read from an earlier run's
calibration cache: with it read, the placement's check is skipped and was not measured at all),
and the timings are scripted (the runtimes run as timed, their seconds are not used), so that
the same candidates are built, checked and kept on any machine, loaded or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys
import onnx
from onnx import TensorProto, helper
import gspo
from gspo.runtime import Timing, interleaved
from gspo.runtime.backends import available_backends
from gspo.search.strategies import Strategies
backends = available_backends()
if "openvino" in backends:
    import openvino  # its libraries loaded before the baseline, as the runtime's are
import tracemalloc
import onnxruntime

rows, cols = int(sys.argv[1]), int(sys.argv[2])
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
path = sys.argv[3]
onnx.save(model, path)

labels = []
def measure(calls, runs, warmup=3):
    # every runner runs as timed (what it holds counts); the seconds are the script's: the whole
    # model placed on another backend wins, the rest tie (nothing else beats what it is compared to)
    timed = interleaved(calls, runs, warmup)
    labels.extend(t.label for t in timed)
    return [Timing(t.label, tuple(0.5 if "@" in t.label else 1.0 for _ in t.seconds)) for t in timed]

tracemalloc.start()
result = gspo.optimize(path, backends=backends, time_budget=None, seed=0, budget=2, timing_runs=5,
                       strategies=Strategies(measure=measure))
_, peak = tracemalloc.get_traced_memory()
print(json.dumps({"peak": peak, "backends": list(backends), "labels": labels,
                  "placement_cached": result.report["placement"].get("pieces_cached"),
                  "verdict": result.report.get("verdict")}))
"""


def test_a_large_output_is_held_once_not_once_per_runtime(tmp_path):
    rows, cols = 9000, 9000  # 324 MB in, 324 MB out: above what is spilled to a file
    size = rows * cols * 4
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # no earlier run's measurements
    done = subprocess.run([sys.executable, "-c", _CHILD, str(rows), str(cols), str(tmp_path / "relu.onnx")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if "openvino" in got["backends"]:  # the piece measured (not cached) on both, then the model on OpenVINO kept
        assert got["placement_cached"] == 0, got
        assert {"ort", "openvino", "original", "original@openvino"} <= set(got["labels"]), got
        assert got["verdict"] == "faster", got
    # the random input and one output at a time (2.17x measured: 0.70 GB): the reference's output
    # waits in a file while another runtime's is checked, in the placement's check of each piece
    # as in the final choice, and onnxruntime and OpenVINO write into the same reused array. A
    # second output held, by either, is 3x (1.03 GB: the placement's check held the reference
    # beside OpenVINO's output, and ran only when the cache had no placement for the piece);
    # each runtime holding its own copy, and OpenVINO a second one, took over 4x.
    assert got["peak"] < 2.5 * size, (got, size)
