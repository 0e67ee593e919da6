#!/usr/bin/env bash
# The issue-#54 measurements on a GPU lent for a few minutes, most telling first, each section in its own process
# under its own time limit, so that a lease ending early still returns the sections that finished (each JSON is
# also written after every role or run inside a section). Run from the project root, after the set-up:
#
#   bash /tmp/stage/on_device.sh bash benchmarks/gpu/measure.sh [OUT_DIR]     # OUT_DIR default: $OUT or /tmp/gpu-out
#
# Then merge the parts here: python benchmarks/gpu/merge.py OUT_DIR/*.json  ->  results/gpu/<device>.json
# Sized for a lease of ~10 minutes: 8 dreams (160 s), 2 updates each of the default dynaweb-train and --preset gpu
# (230 s), generation of 64 greedy tokens with the default decoding against plain model.generate, the policy's
# prompts first (130 s). The first call of each model, batch size and cache length compiles (22-60 s on an H100,
# 2026-11-28), so each limit is mostly compilation; the first lease's limits (110/190/200 s, generation first)
# left the dreams and --preset gpu unmeasured.
set -uo pipefail
out=${1:-${OUT:-/tmp/gpu-out}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log="$out/measure.log"
run() {  # seconds, name, arguments of gpu_throughput.py
  local limit=$1 name=$2; shift 2
  echo "== $name (limit ${limit} s) $(date +%T)" | tee -a "$log"
  timeout "$limit" python3 benchmarks/gpu_throughput.py --output "$out/$name.json" "$@" 2>&1 \
    | grep -v -e "Loading weights" -e "it/s]" -e "env/s]" | tee -a "$log"
  echo "== $name exit ${PIPESTATUS[0]} $(date +%T)" | tee -a "$log"
}
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" \
  2>&1 | tee -a "$log"
run 160 dreams --sections dreams
run 230 train --sections train --train-steps 2
run 130 generation --sections generation --new-tokens 64 --repeats 1 --single-prompts 2 \
  --contenders backend_generate_compiled,plain_generate --roles policy,world_model,judge
