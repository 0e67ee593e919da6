"""Peak resident memory of a one-step ``dynaweb-train --env dream --expert-frac 0.5``, per preset.

    python benchmarks/memory_peak.py                          # every preset, ~2 min each on 2 CPU cores
    python benchmarks/memory_peak.py --presets cpu-small      # one preset
    python benchmarks/memory_peak.py --label before           # keep this run's figures under "before"

Each preset runs in its own ``dynaweb-train`` process (``--max-steps 1``, a temporary output
directory); the process tree (the trainer and every child it starts: browsers, helper processes) is
sampled every 0.2 s and the peak of the summed RSS is kept, beside the trainer process's own peak.
A run that leaves less than ``--min-available-gb`` of the machine's
memory available is killed and reported as such, so the benchmark cannot take a shared machine down.

Results are merged into ``benchmarks/results/memory_peak.json`` by label, so a ``before`` and an
``after`` run of the same presets stand side by side in one file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results" / "memory_peak.json"
PRESETS = Path(__file__).parent.parent / "dynaweb_trainer" / "presets"
GIB = 1024**3


def tree_rss(process: psutil.Process) -> int:
    """Summed RSS (bytes) of ``process`` and all its descendants that are still alive."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def measure(preset: str, extra: Sequence[str], min_available_gb: float, timeout_s: float) -> dict:
    """Run one training step of ``preset`` and return its peak memory figures."""
    with tempfile.TemporaryDirectory(prefix="memory-peak-") as output_dir:
        command = [
            sys.executable, "-m", "dynaweb_trainer.cli", "--preset", preset, "--env", "dream",
            "--expert-frac", "0.5", "--max-steps", "1", "--save-steps", "1000",
            "--output-dir", output_dir, *extra,
        ]  # fmt: skip
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        process = psutil.Process(child.pid)
        peak = own_peak = 0
        killed = ""
        while child.poll() is None:
            try:
                peak = max(peak, tree_rss(process))
                own_peak = max(own_peak, process.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            if psutil.virtual_memory().available < min_available_gb * GIB:
                killed = f"killed: less than {min_available_gb} GB of memory left available"
            elif time.perf_counter() - started > timeout_s:
                killed = f"killed: ran past {timeout_s} s"
            if killed:
                for member in [*process.children(recursive=True), process]:
                    try:
                        member.kill()
                    except psutil.NoSuchProcess:
                        pass
                break
            time.sleep(0.2)
        output, _ = child.communicate()
        seconds = time.perf_counter() - started
    return {
        "preset": preset,
        "command": " ".join(command[2:]).replace(output_dir, "<tmp>"),
        "returncode": child.returncode,
        "status": killed or ("ok" if child.returncode == 0 else "failed"),
        "peak_tree_rss_gib": round(peak / GIB, 3),
        "peak_trainer_rss_gib": round(own_peak / GIB, 3),
        "seconds": round(seconds, 1),
        "output_tail": output[-1500:] if child.returncode else output[-300:],
    }


def breakdown(sequences: int, tokens: int) -> dict:
    """RSS after each part of a ``cpu-small`` trainer is loaded, in this process (GiB, cumulative).

    The last entry is one policy forward and backward pass on ``sequences`` x ``tokens`` tokens: what a
    GSPO update costs beyond the weights (activations and the full-vocabulary logits).
    """
    process = psutil.Process()
    figures: dict[str, float] = {}

    def record(part: str) -> None:
        figures[part] = round(process.memory_info().rss / GIB, 3)
        print(f"  {part:45s} {figures[part]:.2f} GiB", flush=True)

    record("python")
    import torch
    import transformers  # noqa: F401
    import trl  # noqa: F401

    record("+ torch, transformers, trl imported")
    from dynaweb_env.llm import make_backend
    from dynaweb_env.models import resolve_model

    world_model = make_backend("smollm2-135m-wm", cache=False)
    record("+ world model (smollm2-135m-wm)")
    judge = make_backend("smollm2-135m-judge", cache=False)
    record("+ judge (smollm2-135m-judge)")
    policy = transformers.AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32)
    record("+ policy (smollm2-135m, fp32)")
    input_ids = torch.randint(0, 1000, (sequences, tokens))
    policy(input_ids).logits.float().log_softmax(-1).mean().backward()
    record(f"+ policy forward/backward {sequences}x{tokens} tokens")
    del world_model, judge, policy
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=sorted(path.stem for path in PRESETS.glob("*.yaml")))
    parser.add_argument("--label", default="after", help="key of this run's figures in the JSON (e.g. before/after)")
    parser.add_argument("--min-available-gb", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one preset may run")
    parser.add_argument(
        "--breakdown", type=int, nargs=2, metavar=("SEQUENCES", "TOKENS"), default=None,
        help="instead of training: RSS per loaded part, then one policy update on SEQUENCES x TOKENS",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more dynaweb-train flags (after --)")
    args = parser.parse_args(argv)
    if args.breakdown:
        report = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        report.setdefault("breakdown", {})["x".join(map(str, args.breakdown))] = breakdown(*args.breakdown)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        return 0

    report = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    report.setdefault("runs", {})
    report["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
    }
    figures = report["runs"].setdefault(args.label, {})
    for preset in args.presets:
        result = measure(preset, args.extra, args.min_available_gb, args.timeout)
        figures[preset] = result
        print(
            f"[{args.label}] {preset}: peak tree RSS {result['peak_tree_rss_gib']} GiB, "
            f"trainer process {result['peak_trainer_rss_gib']} GiB, {result['seconds']} s, {result['status']}",
            flush=True,
        )
        if result["returncode"]:
            print(result["output_tail"], file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
