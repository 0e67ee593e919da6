"""Are dream rewards real? Replay the policy's training dreams on the real pages and compare.

    python benchmarks/dream_rewards.py                                   # every runs/claims/shared/*/episodes.jsonl
    python benchmarks/dream_rewards.py --episodes outputs/dynaweb-gspo/episodes.jsonl

A DynaWeb dream starts from a page of a real trajectory (its ``start_state``: task, task seed, and
the actions that led there) and continues with the policy's actions, answered by the world model;
the judge then rewards it. Each dream of a training run's ``episodes.jsonl``
(:mod:`dynaweb_trainer.episode_log`) is replayed in Chromium: the same task and seed (the same
page), the start state's history, then the dream's actions, until the task ends. The real reward of
those actions is the reward the dream *should* have had, so the two side by side measure how much
of GSPO's signal in dreams is right:

- ``agreement``: the dream's reward equals the real reward of the same actions;
- ``judge_success_precision``: of the dreams judged SUCCESS, how many succeed for real;
- ``real_success_recall``: of the dreams whose actions succeed for real, how many the judge saw.

``start_reproduced`` says whether the replayed start page is the recorded one character for
character (MiniWoB++ pages are seeded, so it should be); a dream whose start could not be rebuilt
(no task seed recorded, or a history action failing) is counted apart, not compared. Results go to
``benchmarks/results/dream_rewards.json`` with every compared dream (run, update, task, actions,
both rewards, the judge's reasoning).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.data.schema import Trajectory

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "dream_rewards.json"


def dreams_of(path: Path) -> list[Trajectory]:
    """The dream records of one ``episodes.jsonl``."""
    return [record for record in iter_trajectories(path) if record.source == "dream"]


def replay(env: gym.Env, dream: Trajectory) -> dict[str, Any]:
    """Replay a dream's start-state history and actions on the real page; what happened there."""
    start = dream.metadata.get("options", {}).get("start_state", {})
    if start.get("task_seed") is None:
        return {"replayed": False, "why": "no task seed recorded for the start state"}
    observation, _ = env.reset(options={"task": dream.task_id, "task_seed": int(start["task_seed"])})
    for action in start.get("history", []):
        observation, _, terminated, truncated, _ = env.step(action)
        if observation["last_action_error"] or terminated or truncated:
            return {"replayed": False, "why": f"history action {action!r} did not replay"}
    start_reproduced = observation["axtree"] == dream.steps[0].axtree
    reward, executed, errors = 0.0, [], []
    for step in dream.steps:
        if not step.action:
            break
        observation, reward, terminated, truncated, _ = env.step(step.action)
        executed.append(step.action)
        errors.append(observation["last_action_error"])
        if terminated or truncated:
            break
    return {
        "replayed": True,
        "start_reproduced": start_reproduced,
        "real_reward": float(reward),
        "real_actions": executed,
        "real_action_errors": errors,
    }


def compare(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Agreement, the judge's precision and recall against the real outcome, and the 2x2 counts."""
    compared = [row for row in rows if row["replayed"]]
    counts = {"judged_success_real_success": 0, "judged_success_real_failure": 0}
    counts |= {"judged_failure_real_success": 0, "judged_failure_real_failure": 0}
    for row in compared:
        judged = "judged_success" if row["dream_reward"] >= 1 else "judged_failure"
        real = "real_success" if row["real_reward"] >= 1 else "real_failure"
        counts[f"{judged}_{real}"] += 1
    judged_success = counts["judged_success_real_success"] + counts["judged_success_real_failure"]
    real_success = counts["judged_success_real_success"] + counts["judged_failure_real_success"]
    agree = counts["judged_success_real_success"] + counts["judged_failure_real_failure"]
    return {
        "dreams": len(rows),
        "compared": len(compared),
        "not_replayed": len(rows) - len(compared),
        "start_reproduced": sum(row["start_reproduced"] for row in compared),
        "counts": counts,
        "agreement": agree / len(compared) if compared else None,
        "judge_success_precision": counts["judged_success_real_success"] / judged_success if judged_success else None,
        "real_success_recall": counts["judged_success_real_success"] / real_success if real_success else None,
    }


def run(paths: Iterable[Path], max_steps: int) -> dict[str, Any]:
    """Replay every dream of ``paths``; the report with per-file and overall comparisons."""
    dreams = [(path, dream) for path in paths for dream in dreams_of(path)]
    env = gym.make("RealWeb-v0", max_steps=max_steps)
    rows = []
    try:
        for path, dream in tqdm(dreams, desc="replaying dreams", unit="dream"):
            row = {
                "run": rel(path.parent),
                "id": dream.id,
                "global_step": dream.metadata.get("global_step"),
                "task_id": dream.task_id,
                "dream_actions": [step.action for step in dream.steps if step.action],
                "dream_reward": float(dream.reward),
                "judge_reasoning": dream.metadata.get("judge_reasoning", ""),
            }
            rows.append(row | replay(env, dream))
    finally:
        env.close()
    runs = sorted({row["run"] for row in rows})
    tasks = sorted({row["task_id"] for row in rows})
    return {
        "overall": compare(rows),
        "per_run": {name: compare([row for row in rows if row["run"] == name]) for name in runs},
        "per_task": {task: compare([row for row in rows if row["task_id"] == task]) for task in tasks},
        "dreams": rows,
    }


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/dream_rewards.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--episodes",
        nargs="+",
        type=Path,
        default=None,
        help="training episode logs (default: every runs/claims/shared/*/episodes.jsonl)",
    )
    parser.add_argument("--max-steps", type=int, default=10, help="real steps before truncation (default 10)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"default {rel(RESULTS)}")
    args = parser.parse_args(argv)
    paths = args.episodes or sorted((ROOT / "runs" / "claims" / "shared").glob("*/episodes.jsonl"))
    missing = [path for path in paths if not path.is_file()]
    if not paths or missing:
        print(
            f"dream_rewards: error: no episode log at {missing or 'runs/claims/shared/*/episodes.jsonl'}",
            file=sys.stderr,
        )
        return 2
    report = run(paths, args.max_steps)
    report = {
        "command": shlex.join(["python", "benchmarks/dream_rewards.py", *(argv if argv is not None else sys.argv[1:])]),
        "episodes": [rel(path) for path in paths],
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **report,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'':44} {'dreams':>6} {'agree':>6} {'judged S->real S':>17} {'real S seen':>11}")
    for name, summary in [("all", report["overall"]), *report["per_run"].items(), *report["per_task"].items()]:
        print(
            f"{name[-44:]:44} {summary['compared']:>6} {fmt(summary['agreement']):>6} "
            f"{fmt(summary['judge_success_precision']):>17} {fmt(summary['real_success_recall']):>11}"
        )
    print(f"dream_rewards: {report['overall']['compared']} dreams compared; {rel(args.output)}")
    return 0


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
