"""Success rate of every registered scripted expert on real MiniWoB++ pages, in parallel browsers.

    python benchmarks/expert_success.py                      # every expert x seeds 0-49, 3 browsers (~1 h here)
    python benchmarks/expert_success.py --tasks miniwob.click-menu --seeds 0-4 --num-envs 1   # quick look

The episodes run through ``dynaweb-eval``'s :func:`~dynaweb_trainer.evaluate.evaluate_policy` with the
``expert`` policy, i.e. :func:`~dynaweb_trainer.rollout.run_episodes` on an async ``RealWeb-v0`` vector
env (one Chromium per sub-env), the same loop training and evaluation use. Results go to
``benchmarks/results/expert_success/expert_success.json``: per task the episodes, successes, success rate and mean
steps, the tasks below ``--min-success``, every failed episode (seed, actions, errors), and the exact
command. An expert ships only if it reaches ``--min-success`` (95%) here; the exit status is 1 when one
does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.experts import EXPERTS
from dynaweb_trainer.evaluate import EvalConfig, evaluate_policy

RESULTS = Path(__file__).parent / "results" / "expert_success" / "expert_success.json"


def expert_tasks() -> list[str]:
    """MiniWoB++ tasks with a registered scripted expert, in a fixed order."""
    return sorted(task for task in EXPERTS if task.startswith("miniwob."))


def summarize(report: dict[str, Any], min_success: float) -> dict[str, Any]:
    """The compact benchmark result from a ``dynaweb-eval`` report (all episodes kept only when they failed)."""
    per_task = {}
    for task, row in sorted(report["per_task"].items()):
        episodes = [episode for episode in report["episodes"] if episode["task_id"] == task]
        per_task[task] = {
            "episodes": row["episodes"],
            "successes": row["successes"],
            "success_rate": round(row["success_rate"], 4),
            "mean_steps": round(row["mean_steps"], 3),
            "mean_steps_successful": round(
                sum(e["steps"] for e in episodes if e["success"]) / max(1, sum(e["success"] for e in episodes)), 3
            ),
            "browser_errors": sum(bool(e["env_error"]) for e in episodes),
        }
    failures = [
        {key: episode[key] for key in ("task_id", "task_seed", "steps", "end_reason", "actions", "action_errors")}
        | {
            "env_error": episode["env_error"],
            "last_reasoning": episode["responses"][-1] if episode["responses"] else "",
        }
        for episode in report["episodes"]
        if not episode["success"]
    ]
    summary = report["summary"]
    return {
        "benchmark": "expert_success",
        "command": report["command"],
        "summary": {
            "tasks": len(per_task),
            "episodes": summary["episodes"],
            "success_rate": round(summary["success_rate"], 4),
            "mean_steps": round(summary["mean_steps"], 3),
            "min_success": min_success,
            "tasks_below_min_success": [task for task, row in per_task.items() if row["success_rate"] < min_success],
        },
        "per_task": per_task,
        "failures": failures,
        "config": report["config"],
        "started_at": report["started_at"],
        "wall_seconds": report["wall_seconds"],
        "num_envs": report["num_envs"],
        "rollout_stats": report["rollout_stats"],
        "host": report["host"],
    }


def format_table(result: dict[str, Any]) -> str:
    """Per-task success and steps as a fixed-width table."""
    width = max(len(task) for task in result["per_task"])
    lines = [f"{'task':<{width}}  success  episodes  mean steps"]
    for task, row in result["per_task"].items():
        flag = "" if row["success_rate"] >= result["summary"]["min_success"] else "  < min"
        lines.append(
            f"{task:<{width}}  {row['success_rate']:>7.3f}  {row['episodes']:>8}  {row['mean_steps']:>10.2f}{flag}"
        )
    summary = result["summary"]
    lines.append(
        f"{'all':<{width}}  {summary['success_rate']:>7.3f}  {summary['episodes']:>8}  {summary['mean_steps']:>10.2f}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=expert_tasks(), help="tasks (default: every registered expert)")
    parser.add_argument("--seeds", default="0-49", help="task seeds, e.g. 0-49 or 1,5,9")
    parser.add_argument("--num-envs", type=int, default=3, help="browsers in parallel (each ~640 MB)")
    parser.add_argument("--max-steps", type=int, default=10, help="agent step limit (paper: 10)")
    parser.add_argument("--min-success", type=float, default=0.95, help="success rate an expert must reach")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--details", type=Path, default=None, help="also keep dynaweb-eval's full report here")
    args = parser.parse_args(argv)
    missing = [task for task in args.tasks if task not in EXPERTS]
    if missing:
        parser.error(f"no expert for {', '.join(missing)}")

    command = shlex.join(["python", "benchmarks/expert_success.py", *argv])
    with tempfile.TemporaryDirectory() as scratch:
        details = args.details or Path(scratch) / "eval.json"
        config = EvalConfig(
            policy="expert",
            tasks=list(args.tasks),
            seeds=args.seeds,
            num_envs=args.num_envs,
            max_steps=args.max_steps,
            output=str(details),
        )
        report = evaluate_policy(config, command=command)
    result = summarize(report, args.min_success)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.output.with_name(args.output.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, args.output)
    print(format_table(result))
    print(f"{result['summary']['episodes']} episodes in {result['wall_seconds']:.0f} s; results in {args.output}")
    below = result["summary"]["tasks_below_min_success"]
    if below:
        print(f"below {args.min_success:.0%}: {', '.join(below)}", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
