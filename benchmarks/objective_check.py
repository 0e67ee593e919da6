"""How often the judge's objective check (``reward_guards={"objective_check": True}``, the default) flags real
trajectories: real failures it flags are SUCCESS verdicts it would withhold rightly, real successes it flags are
rewards it would withhold wrongly.

Every shipped real trajectory (both datasets, every split, experts and exploration, recorded on real MiniWoB++
pages) is checked as the judge checks a dream: its actions, the tree line each acted on in the page it was taken on
(:func:`~dynaweb_env.observation.action_target`) and its final page go to
:func:`~dynaweb_env.world_model.requirements.objective_requirements`. Each requirement is counted by kind (quoted text
typed, named box checked, named control acted on), so a new rule is chosen by what it costs on real successes.
Each success is also checked cut before its final action, on the page that action was taken on (``cuts``): the
failure a dream ended too early is, and the judge's ``/cut`` case. No model runs: this takes seconds.

Command::

    python -m benchmarks.objective_check
    python -m benchmarks.objective_check --datasets miniwob-all --splits test --output /tmp/objective_check.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR, LARGE_DATA_DIR
from dynaweb_env.observation import action_target, target_text_and_row
from dynaweb_env.world_model.judge_cases import last_acted_page
from dynaweb_env.world_model.requirements import objective_requirements, requirement_kind

RESULTS = Path(__file__).resolve().parent / "results" / "judge" / "objective_check.json"
DATASETS = {"miniwob-all": ALL_TASKS_DATA_DIR, "miniwob-large": LARGE_DATA_DIR}
SPLITS = ("train", "validation", "test")
#: How many flagged successes the JSON lists in full.
MAX_EXAMPLES = 20


def check(trajectory: Trajectory, cut: bool = False) -> list[tuple[str, bool]]:
    """The objective's requirements on one real trajectory, with whether it met each; with ``cut``, on the
    trajectory cut before its last action, ending on the page that action was taken on (a failure: the judge's
    ``/cut`` case, :func:`~dynaweb_env.world_model.judge_cases.judge_cases`)."""
    acted = [step for step in trajectory.steps if step.action.strip()]
    final = trajectory.steps[-1].axtree if trajectory.steps else ""
    if cut:
        acted, final = acted[:-1], acted[-1].axtree
    actions = [step.action.strip() for step in acted]
    targets = [action_target(step.action.strip(), step.axtree) for step in acted]
    shown = [target_text_and_row(target, step.axtree) for target, step in zip(targets, acted, strict=True)]
    return objective_requirements(trajectory.goal, actions, targets, final, shown, last_acted_page(acted))


def summarise(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Counts of flagged trajectories, overall and by requirement kind, for successes and failures."""
    totals = Counter(success=0, failure=0)
    flagged: dict[str, Counter] = {"any": Counter()}
    per_task: dict[str, Counter] = {}
    examples = []
    for trajectory in trajectories:
        outcome = "success" if trajectory.success else "failure"
        totals[outcome] += 1
        unmet = [requirement for requirement, met in check(trajectory) if not met]
        task = per_task.setdefault(trajectory.task_id, Counter())
        task[outcome] += 1
        if not unmet:
            continue
        flagged["any"][outcome] += 1
        task[f"{outcome}_flagged"] += 1
        for kind in {requirement_kind(requirement) for requirement in unmet}:
            flagged.setdefault(kind, Counter())[outcome] += 1
        if trajectory.success and len(examples) < MAX_EXAMPLES:
            examples.append({"id": trajectory.id, "task_id": trajectory.task_id, "goal": trajectory.goal,
                             "unmet": unmet, "reward": trajectory.reward})  # fmt: skip
    for trajectory in trajectories:  # each success cut before its final action: a failure to flag
        if not trajectory.success or not any(step.action.strip() for step in trajectory.steps):
            continue
        totals["cut"] += 1
        unmet = [requirement for requirement, met in check(trajectory, cut=True) if not met]
        per_task[trajectory.task_id]["cut_flagged" if unmet else "cut"] += 1
        for kind in {"any", *(requirement_kind(requirement) for requirement in unmet)} if unmet else ():
            flagged.setdefault(kind, Counter())["cut"] += 1
    return {
        "trajectories": dict(totals),
        "flagged": {
            kind: {
                "failures": counts["failure"],
                "failure_share": counts["failure"] / totals["failure"] if totals["failure"] else None,
                "successes": counts["success"],
                "success_share": counts["success"] / totals["success"] if totals["success"] else None,
                "cuts": counts["cut"],
                "cut_share": counts["cut"] / totals["cut"] if totals["cut"] else None,
            }
            for kind, counts in flagged.items()
        },
        "per_task": {task: dict(counts) for task, counts in sorted(per_task.items())},
        "flagged_successes": examples,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    trajectories = []
    for dataset in args.datasets:
        for split in args.splits:
            for path in sorted((DATASETS[dataset] / split).glob("*.jsonl.xz")):
                trajectories.extend(read_trajectories(path))
    result = summarise(trajectories)
    return {
        "command": "python -m benchmarks.objective_check " + shlex.join(args.argv or []),
        "date": time.strftime("%Y-%m-%d"),
        "datasets": list(args.datasets),
        "splits": list(args.splits),
        **result,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.objective_check", description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    result = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"trajectories": result["trajectories"], "flagged": result["flagged"]}, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
