"""The judge's success threshold under the objective check, chosen on held-out cases no reward benchmark plays.

A trained judge's verdict word is its greedy pick, so it pays a trajectory only where ``P(SUCCESS)`` (read from the
verdict token's log-prob, :func:`~dynaweb_env.world_model.judge.success_probability`) is above about 0.5. With the
objective check (on by default) vetoing a SUCCESS that leaves an explicit requirement undone, a lower threshold may
pay more real successes while the check still refuses the wrong actions. This script measures that trade, for every
threshold of a grid and for the verdict word itself, on two sets of cases:

- ``real``: real trajectories of the large dataset's validation and test splits (recorded on MiniWoB++ pages), the
  first ``--max-per-task`` per (task, policy), each as recorded and, for a success, cut before its last action
  (:func:`~dynaweb_env.world_model.judge_cases.judge_cases`; what ``dynaweb-eval-wm --judge-only`` scores);
- ``dreamed``: the shipped held-out dreamed final pages (``judge-dreamed/test``: the test split's trajectories with
  their final page drawn by a world model, labelled with the real outcome).

Task seeds 3 (which the first adapters trained on) and those of ``benchmarks/default_rewards.py``'s start states
(its first and second held-out page of each task: seeds 4 and 9) are left out, so the threshold is chosen on cases
the default-rewards measurement never plays. The judge runs once per case (greedy, no check); each threshold then
decides the reward (``P(SUCCESS) >= t``) and the objective check vetoes as the env's does.

The rule, fixed before the run: the chosen threshold maximises the mean of the two sets' accuracies; a tie goes to
the verdict word, then to the threshold nearest 0.5.

Command::

    python benchmarks/judge_threshold.py                       # benchmarks/results/judge/threshold.json
    python benchmarks/judge_threshold.py --judge smollm2-135m-judge-all --output /tmp/threshold-all.json
    python benchmarks/judge_threshold.py --tasks miniwob.click-button --max-per-task 1 --output /tmp/smoke.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import DREAMED_JUDGE_DATA_DIR, LARGE_DATA_DIR
from dynaweb_env.llm import make_backend
from dynaweb_env.models import DEFAULT_JUDGE, model_prompt_style
from dynaweb_env.world_model.judge import TrajectoryJudge, apply_success_threshold, check_objective
from dynaweb_env.world_model.judge_cases import judge_cases

RESULTS = Path(__file__).resolve().parent / "results" / "judge" / "threshold.json"
#: Task seeds left out: 3 (the first shipped adapters' train seed), 4 and 9 (default_rewards.py's start pages).
EXCLUDED_SEEDS = frozenset({3, 4, 9})
#: The thresholds tried, beside the verdict word (``None``).
GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))


def real_trajectories(max_per_task: int) -> list[Trajectory]:
    """The first ``max_per_task`` real trajectories per (task, policy) of the validation and test splits."""
    from dynaweb_trainer.evaluate_world_model import per_task_sample

    sources = [LARGE_DATA_DIR / "validation", LARGE_DATA_DIR / "test"]
    kept = [t for t in read_trajectories(sources) if t.metadata.get("seed") not in EXCLUDED_SEEDS]
    return per_task_sample(kept, max_per_task)


def dreamed_trajectories(limit: int) -> list[Trajectory]:
    """The held-out dreamed final pages, those dreamed from an excluded task seed left out."""

    def seed(trajectory: Trajectory) -> int | None:
        parts = str(trajectory.metadata.get("dreamed_from", "")).split("/")
        return int(parts[1].removeprefix("seed-")) if len(parts) > 1 and parts[1].startswith("seed-") else None

    kept = [t for t in read_trajectories([DREAMED_JUDGE_DATA_DIR / "test"]) if seed(t) not in EXCLUDED_SEEDS]
    return kept[: limit or None]


def score(judge: TrajectoryJudge, trajectories: Sequence[Trajectory], seed: int) -> list[dict[str, Any]]:
    """Every case's true reward, the judge's verdict and ``P(SUCCESS)``, and what the check would veto."""
    cases = judge_cases(trajectories)
    verdicts = judge.judge([request for request, _, _ in cases], seed=seed)
    rows = []
    for (request, reward, name), verdict in zip(cases, verdicts, strict=True):
        vetoed = check_objective(request, dataclasses.replace(verdict, reward=1.0)).unmet
        rows.append(
            {
                "case": name,
                "task": name.split("/")[0],
                "reward": reward,
                "verdict": verdict.reward,
                "success_probability": verdict.success_probability,
                "error": verdict.error,
                "vetoed": list(vetoed),
            }
        )
    return rows


def paid(row: dict[str, Any], threshold: float | None) -> bool:
    """Whether the env pays this case at ``threshold`` (``None``: the verdict word), the check applied."""
    verdict = apply_success_threshold(row["verdict"], row["success_probability"], threshold)
    return verdict >= 0.5 and not row["vetoed"]


def metrics(rows: Sequence[dict[str, Any]], threshold: float | None) -> dict[str, Any]:
    """Accuracy and per-outcome recall of the paid rewards at ``threshold``."""
    right = [paid(row, threshold) == (row["reward"] >= 0.5) for row in rows]
    successes = [ok for ok, row in zip(right, rows, strict=True) if row["reward"] >= 0.5]
    failures = [ok for ok, row in zip(right, rows, strict=True) if row["reward"] < 0.5]

    def share(flags: Sequence[bool]) -> float | None:
        return round(sum(flags) / len(flags), 4) if flags else None

    return {
        "cases": len(rows),
        "accuracy": share(right),
        "success_recall": share(successes),
        "failure_recall": share(failures),
    }


def choose(sweep: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rule: the highest mean accuracy of the two sets; ties to the verdict word, then nearest 0.5."""

    def key(entry: dict[str, Any]) -> tuple[float, int, float]:
        mean = entry["mean_accuracy"]
        threshold = entry["threshold"]
        return (round(mean, 6), threshold is None, -abs((threshold or 0.5) - 0.5))

    return max(sweep, key=key)


def run(args: argparse.Namespace) -> dict[str, Any]:
    began = time.perf_counter()
    judge = TrajectoryJudge(make_backend(args.judge), prompt_style=model_prompt_style(args.judge))
    sets = {"real": real_trajectories(args.max_per_task), "dreamed": dreamed_trajectories(args.dreamed_limit)}
    if args.tasks:
        sets = {name: [t for t in trajectories if t.task_id in args.tasks] for name, trajectories in sets.items()}
    rows = {name: score(judge, trajectories, args.seed) for name, trajectories in sets.items()}
    sweep = []
    for threshold in (None, *GRID):
        per_set = {name: metrics(set_rows, threshold) for name, set_rows in rows.items()}
        mean = sum(m["accuracy"] or 0.0 for m in per_set.values()) / len(per_set)
        sweep.append({"threshold": threshold, "mean_accuracy": round(mean, 4), **per_set})
        print(f"threshold {threshold}: " + ", ".join(f"{k} {v['accuracy']}" for k, v in per_set.items()), flush=True)
    chosen = choose(sweep)
    return {
        "command": "python benchmarks/judge_threshold.py " + shlex.join(args.argv or []),
        "date": datetime.date.today().isoformat(),
        "judge": args.judge,
        "seed": args.seed,
        "excluded_task_seeds": sorted(EXCLUDED_SEEDS),
        "rule": "the highest mean of the real and dreamed sets' accuracies; ties to the verdict word, then nearest 0.5",
        "trajectories": {name: len(trajectories) for name, trajectories in sets.items()},
        "verdict_word": sweep[0],
        "chosen": chosen,
        "sweep": sweep,
        "seconds": round(time.perf_counter() - began, 1),
        "cases": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/judge_threshold.py", description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default=DEFAULT_JUDGE, help="The judge to calibrate (a model spec).")
    parser.add_argument("--max-per-task", type=int, default=2, help="Real trajectories per (task, policy).")
    parser.add_argument("--dreamed-limit", type=int, default=0, help="Dreamed trajectories kept (0: all).")
    parser.add_argument("--tasks", nargs="*", default=None, help="Only these tasks (default: every task).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    report = run(args)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1) + "\n")
    chosen = report["chosen"]
    print(f"chosen threshold {chosen['threshold']} (mean accuracy {chosen['mean_accuracy']}; the verdict word "
          f"{report['verdict_word']['mean_accuracy']}) -> {output}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
