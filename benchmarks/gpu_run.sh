#!/bin/bash
# The measuring call of a GPU session (docs/benchmarking.md, "On a GPU"): stages the kit's last part, installs it, then
# runs the decode phase (every entry, compiled Jacobi only) and the host phase (bfloat16, batch 8) within BUDGET
# seconds, writing straight into $OUT so that whatever finished comes back if the lease ends first.
# Usage: bash benchmarks/gpu_run.sh BUDGET [--tiny]   (--tiny: a tiny random model here, nothing staged or installed)
# DECODE="bfloat16:1 float32:8" and HOST=float32:1 choose the entries (a lease holds about two; name the needed first).
BUDGET=${1:-560}; TINY=${2:-}
H=${HOST:-bfloat16:8}; D=${DECODE:-"float32:1 bfloat16:1 bfloat16:8 float32:8"}
[ -n "$TINY" ] && H=float32:2 && D="float32:1 float32:2"
end=$((SECONDS + BUDGET))
mkdir -p "$OUT/gpu"
if [ -z "$TINY" ]; then
  python3 benchmarks/gpu_kit.py stage .gpu-kit/part-3 && python3 benchmarks/gpu_kit.py install > "$OUT/gpu/install.log" 2>&1 || { tail -20 "$OUT/gpu/install.log"; exit 3; }
  export PYTHONPATH=$PWD/src:/tmp/gpu-kit/site HF_JACOBI_CACHE=/tmp/hfj
  export TORCH_LOGS=recompiles   # why a graph compiles again, if it does (bfloat16 batch 1 never left its warm-up)
fi
nvidia-smi > "$OUT/gpu/nvidia-smi.txt" 2>&1
left=$((end - SECONDS - 120)); [ "$left" -lt 1 ] && left=1
echo "decode gets $left s"
timeout $left python3 benchmarks/bench_gpu.py $TINY --phases decode --decode $D --compiled-jacobi-only --output-dir "$OUT/gpu" > "$OUT/gpu/decode.log" 2>&1
echo "decode rc $? at $SECONDS s"
left=$((end - SECONDS - 5)); [ "$left" -lt 1 ] && left=1
timeout $left python3 benchmarks/bench_gpu.py $TINY --phases host --decode $H --output-dir "$OUT/gpu" > "$OUT/gpu/host.log" 2>&1
echo "host rc $? at $SECONDS s"
grep -h "tok/s\|^|" "$OUT/gpu/decode.log" | tail -40
tail -5 "$OUT/gpu/host.log"
