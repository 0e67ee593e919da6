#!/usr/bin/env bash
# The issue-#54 measurements on a GPU lent for a few minutes, each section in its own process under its own time
# limit, so that a lease ending early still returns the sections that finished (each JSON is also written after
# every role or run inside a section). Run from the project root, after the set-up:
#
#   bash /tmp/stage/on_device.sh bash benchmarks/gpu/measure.sh [OUT_DIR]     # OUT_DIR default: $OUT or /tmp/gpu-out
#
# Then merge the parts here: python benchmarks/gpu/merge.py OUT_DIR/*.json  ->  results/gpu/<device>.json
#
# Sized for a lease of ~9 minutes of commands:
# 1. generation (200 s): the world model's, the policy's and the judge's prompts, 64 greedy tokens, plain
#    model.generate against the backend's generate compiled with one graph per shape (static) and with one graph
#    for every shape (dynamic). The first call of each compiled contender compiles (22-60 s per model and shape on
#    an H100, 2026-11-28: most of each limit).
# 2. The compiled path of the runs below is chosen from (1), by the rule in benchmarks/gpu/choose.py: shapes
#    dynamic unless they decode the world model's batch more than 1.25x slower than static; the trained policy
#    compiled if its compiled batch beats uncompiled generate.
# 3. dreams (100 s): 8 dreams of the default env, batched against one by one.
# 4. train (200 s): 2 updates of the default dynaweb-train --env dream --expert-frac 0.5, then 2 of --preset gpu.
# A smoke run of the whole script in a minute, on any machine: MEASURE_EXTRA=--dry-run bash benchmarks/gpu/measure.sh
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
run 200 generation --sections generation --new-tokens 64 --repeats 1 --single-prompts 1 --roles world_model,policy,judge \
  --contenders backend_generate,backend_generate_compiled,backend_generate_compiled_dynamic,plain_generate
eval "$(python3 benchmarks/gpu/choose.py "$out/generation.json" 2>&1 | tee -a "$log")"
run 100 dreams --sections dreams
run 200 train --sections train --train-steps 2
