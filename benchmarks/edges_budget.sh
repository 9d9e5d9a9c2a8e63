#!/usr/bin/env bash
# The time-budget and memory cases of benchmarks/edges.md ("Budgets and memory, issue 51"): each
# `gspo optimize` run alone, wall seconds and peak RSS from /usr/bin/time, the load beside it.
# Usage: bash benchmarks/edges_budget.sh [WORKDIR]   (about 15 minutes; needs ~9 GB of disk)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
G="$here/.venv/bin/gspo"; PY="$here/.venv/bin/python"
work=${1:-$(mktemp -d)}; mkdir -p "$work"; cd "$work"
echo "# $(date -u +%F) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$PY" - <<'PY'
import os, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
def mm(path, n_in, n_out, rows=1):
    if os.path.exists(path): return
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n_in, n_out)).astype(np.float32) * 0.1, "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n_out])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    onnx.save(m, path)
def samples(folder, n, shape, start=0):
    os.makedirs(folder, exist_ok=True)
    for i in range(start, start + n):
        p = os.path.join(folder, f"s{i:05d}.npz")
        if not os.path.exists(p):
            np.savez(p, x=np.random.default_rng(i).standard_normal(shape).astype(np.float32))
mm("tiny.onnx", 16, 16); samples("cal50k", 50000, (1, 16)); samples("val8", 8, (1, 16), start=100000)
os.makedirs("cal10k", exist_ok=True)
for f in sorted(os.listdir("cal50k"))[:10000]:
    if not os.path.exists(os.path.join("cal10k", f)): os.link(os.path.join("cal50k", f), os.path.join("cal10k", f))
mm("w400.onnx", 10000, 10000)
mm("large.onnx", 4096, 64, rows=4096); samples("cal64m", 120, (4096, 4096)); samples("val64m", 8, (4096, 4096), start=1000)
PY
[ -f relu30k.onnx ] || "$PY" "$here/benchmarks/edges.py" relu 30000 30000 -o relu30k.onnx
[ -f mm4.onnx ] || "$PY" "$here/benchmarks/edges.py" matmuls 4 5000 -o mm4.onnx
[ -f in2.onnx ] || "$PY" "$here/benchmarks/edges.py" gather 550000 1000 -o in2.onnx
[ -n "${BUILD_ONLY:-}" ] && exit 0
run() {  # NAME BUDGET ARGS...
    local name=$1 budget=$2; shift 2
    sync; sleep 5
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -o "time_$name.txt" -f "%e %M" "$G" optimize "$@" -o "out_$name.onnx" --force \
        --time-budget "$budget" --report "r_$name.json" > "log_$name.txt" 2>&1
    local t; t=$(tail -1 "time_$name.txt")  # wall seconds, peak RSS in KB
    local rc; rc=$(grep -c "^wrote" "log_$name.txt")
    printf '%-28s budget %4s s  wall %6s s  peak %6.2f GB  load %s  wrote %s\n' "$name" "$budget" \
        "${t% *}" "$(echo "${t#* } / 1048576" | bc -l)" "$load" "$rc"
}
P="--precision int8 --max-error nmse=1e-3"
run tiny_50k_samples 10 tiny.onnx $P --calibration cal50k --validation val8
run tiny_10k_samples 3 tiny.onnx $P --calibration cal10k --validation val8
run w400_int8 5 w400.onnx $P
run w400_fp32 10 w400.onnx
run samples_120x64MB 60 large.onnx $P --calibration cal64m --validation val64m
run relu_30000x30000 30 relu30k.onnx
run matmuls_4x100MB 60 mm4.onnx --jobs 1
run gather_2.2GB_table 30 in2.onnx
