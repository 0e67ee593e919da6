"""Peak resident memory of what users run: ``make demo``, every ``dynaweb-train`` preset, and the other commands.

    python -m benchmarks.memory_peak                                  # every target, 3 runs each
    python -m benchmarks.memory_peak --targets make-demo dynaweb-sft  # some targets
    python -m benchmarks.memory_peak --presets cpu-small --repeats 1  # one preset, once
    python -m benchmarks.memory_peak --dry-run                        # print each command, run none
    python -m benchmarks.memory_peak --targets dynaweb-sft --repeats 1 --label defaults --append  # one more run
    python -m benchmarks.memory_peak --activations 2000 1 true        # one policy update on 1 x 2000 tokens

Each target is one command exactly as a user types it, on its **defaults** (full-length episodes, every
update), in its own process with a temporary output directory; the process tree (the command and every
child it starts: browsers, engine workers) is sampled every 0.2 s over the whole run and the peak of the
summed RSS is kept. A run that leaves the machine less than ``--min-available-gb`` is killed and
reported as such, so the benchmark cannot take a shared machine down; a run refused up front (exit 2: e.g.
``dynaweb-train``'s memory estimate, or a preset that needs vLLM on a machine without it) is reported as
``refused``, with the command's message.

Targets: ``make-demo`` (``make demo``'s training command, ``dynaweb-train --env dream --expert-frac 0.5``,
which is the ``cpu-small`` preset's run), ``preset:<name>`` for every preset, ``dynaweb-dream``
(``make demo``'s first command), ``dynaweb-sft``, ``dynaweb-train-wm`` and ``dynaweb-eval``.

``--activations TOKENS SEQUENCES CHECKPOINTING`` measures instead the peak of one policy forward and
backward pass in this process (the constants of :mod:`dynaweb_trainer.memory` come from it).

Results are merged into ``benchmarks/results/memory_peak.json`` by ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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

#: What each non-preset target runs (``{out}``: its temporary output directory).
COMMANDS: dict[str, list[str]] = {
    "make-demo": ["dynaweb-train", "--env", "dream", "--expert-frac", "0.5", "--output-dir", "{out}"],
    "dynaweb-dream": ["dynaweb-dream", "--policy", "expert"],
    "dynaweb-sft": ["dynaweb-sft", "--output_dir", "{out}"],
    "dynaweb-train-wm": ["dynaweb-train-wm", "--output_dir", "{out}"],
    "dynaweb-eval": ["dynaweb-eval", "--output", "{out}/eval.json"],
}


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS.glob("*.yaml"))


def target_command(target: str, output_dir: str, extra: Sequence[str]) -> list[str]:
    """The command line of ``target`` writing into ``output_dir``, with ``extra`` flags appended."""
    if target.startswith("preset:"):
        preset = target.split(":", 1)[1]
        base = ["dynaweb-train", "--preset", preset, "--env", "dream", "--expert-frac", "0.5", "--output-dir", "{out}"]
    elif target in COMMANDS:
        base = COMMANDS[target]
    else:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(all_targets())}")
    return [part.replace("{out}", output_dir) for part in base] + list(extra)


def all_targets() -> list[str]:
    return ["make-demo", *(f"preset:{name}" for name in preset_names()), *list(COMMANDS)[1:]]


def tree_rss(process: psutil.Process) -> int:
    """Summed RSS (bytes) of ``process`` and all its descendants that are still alive."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def measure(command: list[str], min_available_gb: float, timeout_s: float) -> dict:
    """Run ``command`` to its end and return its peak memory figures."""
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
    refused = child.returncode == 2  # the CLIs' exit status for a configuration refused before anything loads
    status = killed or ("ok" if child.returncode == 0 else "refused" if refused else "failed")
    return {
        "returncode": child.returncode,
        "status": status,
        "peak_tree_rss_gib": round(peak / GIB, 3),
        "peak_process_rss_gib": round(own_peak / GIB, 3),
        "seconds": round(time.perf_counter() - started, 1),
        "output_tail": output[-1500:] if status != "ok" else output[-400:],
    }


def measure_target(target: str, repeats: int, extra: Sequence[str], min_available_gb: float, timeout_s: float) -> dict:
    """``repeats`` runs of ``target``; the summary is the worst run (highest peak, first non-ok status)."""
    runs, command = [], []
    for index in range(repeats):
        with tempfile.TemporaryDirectory(prefix="memory-peak-") as output_dir:
            command = target_command(target, output_dir, extra)
            result = measure(command, min_available_gb, timeout_s)
            result["command"] = " ".join(command).replace(output_dir, "<tmp>")
        runs.append(result)
        print(
            f"  {target} run {index + 1}/{repeats}: peak tree RSS {result['peak_tree_rss_gib']} GiB, "
            f"{result['seconds']} s, {result['status']}",
            flush=True,
        )
        if result["status"] == "refused":
            break  # refused up front: the same configuration is refused again
    statuses = [run["status"] for run in runs]
    return {
        "target": target,
        "command": runs[-1]["command"],
        "status": next((status for status in statuses if status != "ok"), "ok"),
        "runs": len(runs),
        "peak_tree_rss_gib": max(run["peak_tree_rss_gib"] for run in runs),
        "peak_tree_rss_gib_each": [run["peak_tree_rss_gib"] for run in runs],
        "seconds_each": [run["seconds"] for run in runs],
        "output_tail": next((run["output_tail"] for run in runs if run["status"] != "ok"), runs[-1]["output_tail"]),
    }


def merge_runs(earlier: dict | None, result: dict) -> dict:
    """``result`` with the runs of ``earlier`` (the same target's figures from a past invocation) before its own,
    where both ran the same command: ``--append`` gathers a target's runs over several sessions, since one run
    of a training target takes up to an hour here. A changed command starts over."""
    if not earlier or earlier.get("command") != result["command"] or "peak_tree_rss_gib_each" not in earlier:
        return result
    statuses = [earlier["status"], result["status"]]
    each = [*earlier["peak_tree_rss_gib_each"], *result["peak_tree_rss_gib_each"]]
    return {
        **result,
        "status": next((status for status in statuses if status != "ok"), "ok"),
        "runs": earlier["runs"] + result["runs"],
        "peak_tree_rss_gib": max(each),
        "peak_tree_rss_gib_each": each,
        "seconds_each": [*earlier["seconds_each"], *result["seconds_each"]],
        "output_tail": result["output_tail"] if result["status"] != "ok" else earlier["output_tail"],
    }


def activations(tokens: int, sequences: int, checkpointing: bool) -> dict:
    """Peak RSS of one LoRA policy update (forward and backward through DynaWeb's head) in this process."""
    import torch
    from peft import LoraConfig, get_peft_model

    from dynaweb_trainer.model_loading import load_model_and_tokenizer
    from dynaweb_trainer.trainer import completion_logps_and_entropies

    model, _, _ = load_model_and_tokenizer("smollm2-135m", trainable=True)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    loaded = psutil.Process().memory_info().rss
    input_ids = torch.randint(0, 40_000, (sequences, tokens))
    started = time.perf_counter()
    logps, _, _ = completion_logps_and_entropies(
        model.get_base_model(), input_ids, torch.ones_like(input_ids), tokens // 2, 0.7
    )
    logps.sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "tokens": tokens,
        "sequences": sequences,
        "gradient_checkpointing": checkpointing,
        "rss_loaded_gib": round(loaded / GIB, 3),
        "peak_rss_gib": round(peak / GIB, 3),
        "update_gib": round((peak - loaded) / GIB, 3),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=None, help=f"of: {', '.join(all_targets())} (default: all)")
    parser.add_argument("--presets", nargs="+", default=None, help="shorthand for --targets preset:NAME ...")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each target")
    parser.add_argument("--label", default="after", help="key of this run's figures in the JSON (e.g. before/after)")
    parser.add_argument("--min-available-gb", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one run may take")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--dry-run", action="store_true", help="print each target's command, run none")
    parser.add_argument(
        "--append", action="store_true", help="add these runs to the label's earlier runs of the same command"
    )
    parser.add_argument(
        "--activations", nargs=3, metavar=("TOKENS", "SEQUENCES", "CHECKPOINTING"), default=None,
        help="instead: one policy update on SEQUENCES x TOKENS tokens, gradient checkpointing true/false",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more flags for every command (after --)")
    args = parser.parse_args(argv)
    report = json.loads(args.output.read_text()) if args.output.exists() else {}
    if args.activations:
        tokens, sequences, checkpointing = args.activations
        figures = activations(int(tokens), int(sequences), checkpointing.lower() in ("1", "true", "yes"))
        print(json.dumps(figures), flush=True)
        report.setdefault("activations", []).append(figures)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        return 0
    targets = list(args.targets or [])
    targets += [f"preset:{name}" for name in args.presets or []]
    targets = targets or all_targets()
    if args.dry_run:
        for target in targets:
            print(f"{target}: {' '.join(target_command(target, '<tmp>', args.extra))}")
        return 0
    report.setdefault("runs", {})
    report["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
    }
    figures = report["runs"].setdefault(args.label, {})
    for target in targets:
        result = measure_target(target, args.repeats, args.extra, args.min_available_gb, args.timeout)
        key = target.removeprefix("preset:")
        figures[key] = result = merge_runs(figures.get(key), result) if args.append else result
        print(
            f"[{args.label}] {target}: peak tree RSS {result['peak_tree_rss_gib']} GiB over {result['runs']} runs, "
            f"{result['status']}",
            flush=True,
        )
        if result["status"] not in ("ok", "refused"):
            print(result["output_tail"], file=sys.stderr)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")  # after every target: a killed run keeps the rest
    print(f"saved {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
