#!/bin/bash
# The measuring call on a lent GPU (docs/benchmarking.md, "On a GPU"): stages the kit's last part, installs it, then
# runs the host phase (HOST entries: each step's host work, and with TRACE=1 its kernels and launches beside greedy's)
# and the decode phase (DECODE entries, compiled Jacobi only) within BUDGET seconds, every entry in its own process
# with its own share of the time, writing straight into $OUT so that whatever finished comes back if the lease ends.
# Usage: bash lab/benchmarks/gpu_run.sh BUDGET [--tiny]   (--tiny: a tiny random model here, nothing staged or installed)
# DECODE="bfloat16:1 float32:8", HOST="float32:1" (HOST= for none), TRACE=1, HOST_S=150 (seconds per host entry),
# WIDTHS="1 3" (the compiled Jacobi rows once per count of static forward widths; default: the device's one width).
# Logs are named host-bfloat16-b8.log, decode-float32-b1.log: the device tool returns no file with ":" in its name.
BUDGET=${1:-560}; TINY=${2:-}
H=${HOST-bfloat16:8}; D=${DECODE-"float32:1 bfloat16:1 bfloat16:8 float32:8"}; HS=${HOST_S:-150}
[ -n "$TINY" ] && H=float32:2 && D="float32:1 float32:2"
TR=""; [ -n "${TRACE:-}" ] && TR=--trace
end=$((SECONDS + BUDGET))
mkdir -p "$OUT/gpu"
if [ -z "$TINY" ]; then
  python3 lab/benchmarks/gpu_kit.py stage .gpu-kit/part-3 && python3 lab/benchmarks/gpu_kit.py install > "$OUT/gpu/install.log" 2>&1 || { tail -20 "$OUT/gpu/install.log"; exit 3; }
  export PYTHONPATH=$PWD/src:/tmp/gpu-kit/site HF_JACOBI_CACHE=/tmp/hfj
  # why a graph compiles again, if it does (bench_gpu counts the CUDA graphs recorded)
  export TORCH_LOGS=recompiles   # not cudagraphs: with torch 2.11 its re-recording message fails an assertion inside torch
fi
nvidia-smi > "$OUT/gpu/nvidia-smi.txt" 2>&1
for e in $H; do
  left=$((end - SECONDS - 5)); [ "$left" -gt "$HS" ] && left=$HS; [ "$left" -lt 1 ] && left=1
  timeout $left python3 lab/benchmarks/bench_gpu.py $TINY --phases host --decode $e $TR --output-dir "$OUT/gpu" > "$OUT/gpu/host-${e/:/-b}.log" 2>&1
  echo "host $e rc $? at $SECONDS s"; grep -h "^jacobi:\|^greedy:\|host work per\|^per call" "$OUT/gpu/host-${e/:/-b}.log"
done
set -- $D
while [ $# -gt 0 ]; do
  left=$(( (end - SECONDS - 5) / $# )); [ "$left" -lt 1 ] && left=1
  timeout $left python3 lab/benchmarks/bench_gpu.py $TINY --phases decode --decode $1 --compiled-jacobi-only ${WIDTHS:+--static-widths $WIDTHS} --output-dir "$OUT/gpu" > "$OUT/gpu/decode-${1/:/-b}.log" 2>&1
  echo "decode $1 rc $? at $SECONDS s"; grep -h "tok/s\|^|\|CUDA graphs recorded" "$OUT/gpu/decode-${1/:/-b}.log" | tail -13
  shift
done
