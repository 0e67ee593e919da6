#!/usr/bin/env bash
# Runs on the GPU machine, from the project root: reassembles what benchmarks/gpu/stage.sh staged in /tmp/stage,
# installs it beside the machine's own torch/transformers, installs the project (editable, no deps), prepares the
# embedded model, then runs "$@" (default: benchmarks/gpu_throughput.py, every section, sized for a few minutes; its
# JSON lands in benchmarks/results/gpu/<device>.json). Idempotent on a warm machine.
set -euo pipefail
export PYTHONUNBUFFERED=1
if [ ! -f /tmp/site/.ok ]; then
  cat /tmp/stage/part.* | tar xf - -C /tmp/stage
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/stage/whl/*.whl
  touch /tmp/site/.ok
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} DYNAWEB_CACHE=${DYNAWEB_CACHE:-/tmp/dwc}
export DYNAWEB_ENGINE=transformers  # the shipped world model and judge on the GPU, not a CTranslate2 CPU copy
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null
python3 -m dynaweb_env.models prepare smollm2-135m | tail -1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ $# -eq 0 ]; then set -- python3 benchmarks/gpu_throughput.py --new-tokens 64 --repeats 1 --single-prompts 2; fi
"$@"
