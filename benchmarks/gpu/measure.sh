#!/usr/bin/env bash
# The issue-#54 measurements on a GPU lent for a few minutes, each section in its own process under its own time
# limit, so that a lease ending early still returns the sections that finished (each JSON is also written after
# every role or run inside a section). Run from the project root, after the set-up:
#
#   bash /tmp/stage/on_device.sh bash benchmarks/gpu/measure.sh [OUT_DIR]     # OUT_DIR default: $OUT or /tmp/gpu-out
#
# Then merge the parts here: python benchmarks/gpu/merge.py OUT_DIR/*.json  ->  results/gpu/<device>.json
#
# Sized for a lease of ~9 minutes of commands, what is still unknown first (the H200 lease of 2026-12-04,
# results/gpu/nvidia_h200.json, measured the world model's batched generation, the dreams and the default update with
# the policy uncompiled: 21 s an update, 83-94% of it the policy's uncompiled generation):
# 1. train (170 s): 3 updates of the default dynaweb-train --env dream --expert-frac 0.5, the trained policy compiled
#    (DYNAWEB_POLICY_COMPILE=1): does compiling the policy bring an update near 5 s?
# 2. generation (150 s): the policy's and the judge's prompts, batched only (compiling batch size 1 took the whole
#    limit of the first H200 lease), 64 greedy tokens: plain model.generate, the backend's generate uncompiled, and
#    compiled with one graph for every shape (dynamic, the default) and one per shape (static).
# 3. The policy's compilation for (4) is chosen from (2) by benchmarks/gpu/choose.py's rule (compiled if its
#    compiled batch decodes faster, warm, than uncompiled generate).
# 4. train (200 s): 2 updates of --preset gpu (G = 8, 10 steps, dream length 5).
set -uo pipefail
out=${1:-${OUT:-/tmp/gpu-out}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log="$out/measure.log"
run() {  # seconds, name, arguments of gpu_throughput.py
  local limit=$1 name=$2; shift 2
  echo "== $name (limit ${limit} s) $(date +%T)" | tee -a "$log"
  timeout "$limit" python3 benchmarks/gpu_throughput.py --output "$out/$name.json" "$@" ${MEASURE_EXTRA:-} 2>&1 \
    | grep -v -e "Loading weights" -e "it/s]" -e "env/s]" -e "FutureWarning" | tee -a "$log"
  echo "== $name exit ${PIPESTATUS[0]} $(date +%T)" | tee -a "$log"
}
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" \
  2>&1 | tee -a "$log"
DYNAWEB_POLICY_COMPILE=1 run 170 train_policy_compiled --sections train --train-runs default --train-steps 3
run 150 generation --sections generation --new-tokens 64 --repeats 1 --modes batched --roles policy,judge \
  --contenders backend_generate,backend_generate_compiled_dynamic,backend_generate_compiled,plain_generate
eval "$(python3 benchmarks/gpu/choose.py "$out/generation.json" 2>&1 | tee -a "$log")"
run 200 train_preset_gpu --sections train --train-runs preset_gpu --train-steps 2
