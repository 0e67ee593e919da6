"""Success rate of every registered scripted expert on real MiniWoB++ pages, in parallel browsers.

    python benchmarks/expert_success.py                      # every expert x seeds 0-49, 3 browsers (~1 h here)
    python benchmarks/expert_success.py --tasks miniwob.click-menu --seeds 0-4 --num-envs 1   # quick look

The episodes run through ``dynaweb-eval``'s :func:`~dynaweb_trainer.evaluate.evaluate_policy` with the
``expert`` policy, i.e. :func:`~dynaweb_trainer.rollout.run_episodes` on an async ``RealWeb-v0`` vector
env (one Chromium per sub-env), the same loop training and evaluation use. Results go to
``benchmarks/results/expert_success/expert_success.json``: per task the episodes, successes, success rate and
the mean, median and largest action counts, the tasks below ``--min-success``, every failed episode (seed, actions,
errors), and the exact command of each run. The file is merged, not overwritten: the rows of the tasks run replace
those tasks' rows, every other task's row (and its run) is kept, and the summary is recomputed over all rows, so
runs on different tasks (in parallel too: the read-modify-write holds a lock) build one table. Each task gets its
own step limit (:func:`~dynaweb_env.data.tasks.step_limit`) unless ``--max-steps`` raises it. An expert ships
only if it reaches ``--min-success`` (95%) here; the exit status is 1 when one does not.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shlex
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
        steps = [episode["steps"] for episode in episodes]
        per_task[task] = {
            "episodes": row["episodes"],
            "successes": row["successes"],
            "success_rate": round(row["success_rate"], 4),
            "mean_steps": round(row["mean_steps"], 3),
            "median_steps": statistics.median(steps) if steps else 0,
            "max_steps": max(steps, default=0),
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
    run = {"tasks": sorted(per_task), "command": report["command"]} | {
        key: report[key] for key in ("config", "started_at", "wall_seconds", "num_envs", "rollout_stats", "host")
    }
    return finish(
        {"benchmark": "expert_success", "per_task": per_task, "failures": failures, "runs": [run]}, min_success
    )


def finish(result: dict[str, Any], min_success: float) -> dict[str, Any]:
    """``result`` with its summary (over every row of ``per_task``) and ``commands`` (one per run) recomputed."""
    per_task = dict(sorted(result["per_task"].items()))
    episodes = sum(row["episodes"] for row in per_task.values())
    successes = sum(row["successes"] for row in per_task.values())
    steps = sum(row["mean_steps"] * row["episodes"] for row in per_task.values())
    summary = {
        "tasks": len(per_task),
        "episodes": episodes,
        "success_rate": round(successes / episodes, 4) if episodes else 0.0,
        "mean_steps": round(steps / episodes, 3) if episodes else 0.0,
        "min_success": min_success,
        "tasks_below_min_success": [task for task, row in per_task.items() if row["success_rate"] < min_success],
    }
    return {
        "benchmark": "expert_success",
        "commands": [run["command"] for run in result["runs"]],
        "summary": summary,
        "per_task": per_task,
        "failures": sorted(result["failures"], key=lambda failure: (failure["task_id"], failure["task_seed"])),
        "runs": result["runs"],
    }


def _runs_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs recorded in a results file; a file written before runs were recorded is one run of all its tasks."""
    if "runs" in result:
        return list(result["runs"])
    keys = ("command", "config", "started_at", "wall_seconds", "num_envs", "rollout_stats", "host")
    return [{"tasks": sorted(result.get("per_task", {}))} | {key: result[key] for key in keys if key in result}]


def merge(old: dict[str, Any] | None, new: dict[str, Any], min_success: float) -> dict[str, Any]:
    """``new``'s task rows, failures and run over ``old``'s: the rows of the tasks ``new`` ran replace theirs.

    Args:
        old: The results file's content so far, or ``None`` when there is none.
        new: A fresh :func:`summarize` result.
        min_success: The success rate the summary checks each task against.

    Returns:
        One result over the tasks of both, its summary and ``commands`` recomputed; a run of ``old`` keeps only
        the tasks no later run replaced, and is dropped when none is left.
    """
    if old is None:
        return finish(new, min_success)
    ran = set(new["per_task"])
    runs = []
    for run in _runs_of(old):
        kept = [task for task in run.get("tasks", []) if task not in ran]
        if kept:
            runs.append(run | {"tasks": kept})
    return finish(
        {
            "per_task": {task: row for task, row in old.get("per_task", {}).items() if task not in ran}
            | new["per_task"],
            "failures": [f for f in old.get("failures", []) if f["task_id"] not in ran] + new["failures"],
            "runs": runs + new["runs"],
        },
        min_success,
    )


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` lock for ``path``: one read-modify-write of it at a time on this machine.

    The lock file lives in the temporary directory (named after ``path``'s resolved location), not beside the
    results, which hold measurements only.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"expert_success-{digest}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_results(path: Path) -> dict[str, Any] | None:
    """The results file at ``path``, or ``None`` when there is none.

    Raises:
        ValueError: If the file exists but is not a results JSON of this benchmark (it is left as it is).
    """
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}); move it away to start a new file") from error
    if not isinstance(old, dict) or old.get("benchmark") != "expert_success" or "per_task" not in old:
        raise ValueError(f"{path} is not an expert_success result; move it away to start a new file")
    return old


def save_merged(path: Path, new: dict[str, Any], min_success: float) -> dict[str, Any]:
    """Merge ``new`` into the results file at ``path`` (:func:`merge`) under its lock; write it whole; return it.

    Raises:
        ValueError: If the file exists but is not a results JSON of this benchmark (it is left as it is).
    """
    with locked(path):
        result = merge(read_results(path), new, min_success)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        os.replace(temporary, path)
    return result


def format_table(result: dict[str, Any]) -> str:
    """Per-task success and steps as a fixed-width table."""
    width = max(len(task) for task in result["per_task"])
    lines = [f"{'task':<{width}}  success  episodes  mean steps  median  max"]
    for task, row in result["per_task"].items():
        flag = "" if row["success_rate"] >= result["summary"]["min_success"] else "  < min"
        median, most = row.get("median_steps", "-"), row.get("max_steps", "-")
        lines.append(
            f"{task:<{width}}  {row['success_rate']:>7.3f}  {row['episodes']:>8}  {row['mean_steps']:>10.2f}"
            f"  {median:>6}  {most:>3}{flag}"
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
    parser.add_argument(
        "--max-steps", type=int, default=10, help="agent step limit (paper: 10), raised to a long task's own limit"
    )
    parser.add_argument("--min-success", type=float, default=0.95, help="success rate an expert must reach")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON the run's rows are merged into")
    parser.add_argument("--details", type=Path, default=None, help="also keep dynaweb-eval's full report here")
    args = parser.parse_args(argv)
    missing = [task for task in args.tasks if task not in EXPERTS]
    if missing:
        parser.error(f"no expert for {', '.join(missing)}")
    try:
        read_results(args.output)  # refuse a file that cannot be merged into before the run, not after it
    except ValueError as error:
        parser.error(str(error))

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
    fresh = summarize(report, args.min_success)
    merged = save_merged(args.output, fresh, args.min_success)
    print(format_table(fresh))
    print(
        f"{fresh['summary']['episodes']} episodes in {report['wall_seconds']:.0f} s; merged into {args.output} "
        f"({merged['summary']['tasks']} tasks there)"
    )
    below = fresh["summary"]["tasks_below_min_success"]
    if below:
        print(f"below {args.min_success:.0%}: {', '.join(below)}", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
