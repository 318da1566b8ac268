#!/bin/bash
# The campaign's call on a lent GPU (recipes/smollm2-135m/README.md, "GPU campaign"): stages the kit's last part,
# installs the kit, then runs gpu_campaign.py into $OUT within BUDGET seconds; its log is the eighth returned file.
# Usage: bash lab/campaigns/campaign/gpu_call.sh BUDGET [gpu_campaign.py flags, e.g. --resume-from DIR]
# Run from the repository root on the device machine, with .gpu-kit/part-3 carried and parts 1-2 staged before.
BUDGET=${1:-530}; shift
python3 lab/benchmarks/gpu_kit.py stage .gpu-kit/part-3 \
  && python3 lab/benchmarks/gpu_kit.py install > /tmp/gpu-kit-install.log 2>&1 \
  || { tail -20 /tmp/gpu-kit-install.log; exit 3; }
export PYTHONPATH=$PWD/src:/tmp/gpu-kit/site HF_JACOBI_CACHE=/tmp/hfj PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 lab/campaigns/gpu_campaign.py --output-dir "$OUT" --budget-seconds "$BUDGET" "$@" 2>&1 \
  | tee "$OUT/campaign.log" | grep -a '^\[campaign\]\|Error\|error:'
ls -la "$OUT"; cat "$OUT/judged.md" 2>/dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get('outcome'), indent=1))" "$OUT/campaign.json"
