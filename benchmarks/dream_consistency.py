"""Page consistency and typed text kept, measured: how often real pages and dreamed pages break the rules, and
what the guards do to dream rewards (:mod:`dynaweb_env.world_model.consistency`, ``reward_guards={"consistency":
..., "keep_typed_text": ...}``).

Usage::

    python benchmarks/dream_consistency.py --dreams benchmarks/results/dreams_only_consistency_cut/dream_rewards.json \\
        benchmarks/results/dream_rewards/grounded_judge.json benchmarks/results/dream_rewards/dagger_judge.json \\
        --judge ct2:runs/judge-grounded/judge

1. **Real transitions.** Every same-URL transition of the real trajectories (default: all the package ships,
   24 MiniWoB++ tasks; add files with ``--real``), checked with :func:`page_inconsistencies` and
   :func:`typed_text_left_out`. The rules are meant to hold on every one: the counts are the guards' false
   alarms on real dynamics.
2. **Replayed dreams.** Each ``--dreams`` file is a ``benchmarks/dream_rewards.py`` report: training dreams
   replayed on their real pages. Each dream's recorded steps are checked, and its reward is compared with
   the real outcome four ways:

   - ``as_dreamed``: the recorded reward;
   - ``cut``: 0 for a dream with an inconsistent step (``consistency="cut"``), else as recorded;
   - ``repair`` (with ``--judge``): a dream with an inconsistent step is re-judged on its repaired pages,
     each page repaired against the repaired page before it (``consistency="repair"``);
   - ``cut+keep_typed_text`` (with ``--judge``): typed text written in first; then 0 if a step is
     inconsistent, else re-judged where text was written in.

   All are *offline*: the policy's later actions and the world model's later pages are the recorded ones,
   whereas in a run with the guard on they would follow from the repaired page. A fresh run with the guard,
   replayed with ``benchmarks/dream_rewards.py``, is the measurement that counts.

Writes ``benchmarks/results/dream_consistency/dream_consistency.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import iter_trajectories, read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import real_trajectory_files
from dynaweb_env.envs.dream import DreamDynamics
from dynaweb_env.envs.dream_episode import DreamEpisode
from dynaweb_env.world_model.consistency import (
    page_inconsistencies,
    repair_page,
    same_page_transitions,
    typed_text_left_out,
    write_typed_text_in,
)
from dynaweb_env.world_model.judge import judge_step

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.dream_rewards_guards import compare, start_state_of  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "dream_consistency" / "dream_consistency.json"
#: What the report keeps of each dream besides its rewards.
RECORDED = ("run", "id", "task_id", "real_reward", "inconsistencies", "omissions")


def real_breaks(paths: list[Path]) -> dict[str, Any]:
    """Same-URL transitions of the real trajectories in ``paths``: those that break consistency, and those that
    leave out typed text (the premise of ``keep_typed_text``)."""
    checked, typings, by_task, breaks, omissions = 0, 0, collections.Counter(), [], []
    for trajectory in read_trajectories(paths):
        for step, following in same_page_transitions(trajectory.steps):
            checked += 1
            typings += step.action.lstrip().startswith("type")
            by_task[trajectory.task_id] += 1
            for item in page_inconsistencies(step.axtree, step.action, following.axtree):
                breaks.append({"trajectory": trajectory.id, "action": step.action, "inconsistency": item.describe()})
            for item in typed_text_left_out(step.axtree, step.action, following.axtree):
                omissions.append({"trajectory": trajectory.id, "action": step.action, "omission": item.describe()})
    return {
        "files": [str(path) for path in paths],
        "transitions": checked,
        "typings": typings,
        "tasks": len(by_task),
        "breaks": len(breaks),
        "examples": breaks[:20],
        "omissions": len(omissions),
        "omission_examples": omissions[:20],
    }


def repaired_steps(dream: Trajectory, keep_typed_text: bool = False) -> tuple[list[str], list[str], list[str]]:
    """The dream's pages, each repaired against the repaired page before it, every inconsistency found and, with
    ``keep_typed_text``, every omission written in (before the consistency check, as the env does)."""
    pages, found_all, left_out_all = [dream.steps[0].axtree], [], []
    for step, following in zip(dream.steps, dream.steps[1:], strict=False):
        page = following.axtree
        if step.action and step.url == following.url:
            if keep_typed_text:
                page, left_out = write_typed_text_in(pages[-1], step.action, page)
                left_out_all += [item.describe() for item in left_out]
            found = page_inconsistencies(pages[-1], step.action, page)
            page = repair_page(page, found) if found else page
            found_all += [item.describe() for item in found]
        pages.append(page)
    return pages, found_all, left_out_all


def repaired_episode(dream: Trajectory, pages: list[str]) -> DreamEpisode:
    """The dream as the env holds it at its end, on the given (repaired) pages: what ``judge_request`` reads."""
    episode = DreamEpisode.begin(start_state_of(dream))
    episode.steps = [
        judge_step(step.action, step.reasoning, page)
        for step, page in zip(dream.steps, pages, strict=False)
        if step.action
    ]
    episode.url, episode.axtree = dream.steps[-1].url, pages[-1]
    return episode


def dream_rows(report: dict[str, Any]) -> list[tuple[dict[str, Any], Trajectory]]:
    """Each replayed dream of a ``dream_rewards.py`` report, with its record from its run's ``episodes.jsonl``."""
    records: dict[str, dict[str, Trajectory]] = {}
    rows = []
    for row in report["dreams"]:
        if row["run"] not in records:
            path = ROOT / row["run"] / "episodes.jsonl"
            records[row["run"]] = {dream.id: dream for dream in iter_trajectories(path)}
        rows.append((row, records[row["run"]][row["id"]]))
    return rows


def measure_dreams(path: Path, dynamics: DreamDynamics | None) -> dict[str, Any]:
    """The rewards of each dream of one report under each setting, compared with the real outcome (``repair`` and
    ``cut+keep_typed_text`` re-judged with ``dynamics``' judge, one batched call)."""
    rows, to_rejudge = [], []
    for row, dream in dream_rows(json.loads(path.read_text())):
        pages, found, _ = repaired_steps(dream)
        scored = {**row, "inconsistencies": found, "as_dreamed": row["dream_reward"]}
        scored["cut"] = 0.0 if found else row["dream_reward"]
        scored["repair"] = row["dream_reward"]
        if found:
            to_rejudge.append((scored, "repair", repaired_episode(dream, pages)))
        filled_pages, filled_found, scored["omissions"] = repaired_steps(dream, keep_typed_text=True)
        scored["cut+keep_typed_text"] = 0.0 if filled_found else row["dream_reward"]
        if scored["omissions"] and not filled_found:
            to_rejudge.append((scored, "cut+keep_typed_text", repaired_episode(dream, filled_pages)))
        rows.append(scored)
    if dynamics is not None and to_rejudge:
        requests = [dynamics.judge_request(episode) for *_, episode in to_rejudge]
        for (scored, setting, _), verdict in zip(to_rejudge, dynamics.judge.judge(requests, seed=0), strict=True):
            scored[setting] = verdict.reward
    settings = ["as_dreamed", "cut"] + (["repair", "cut+keep_typed_text"] if dynamics is not None else [])
    return {
        "report": str(path),
        "runs": sorted({row["run"] for row in rows}),
        "inconsistent_dreams": sum(bool(row["inconsistencies"]) for row in rows),
        "dreams_with_omissions": sum(bool(row["omissions"]) for row in rows),
        "settings": {name: compare(rows, reward=name) for name in settings},
        "dreams": [{key: row[key] for key in (*RECORDED, *settings)} for row in rows],  # fmt: skip
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dreams", nargs="+", default=[], help="dream_rewards.py reports to re-score")
    parser.add_argument("--real", nargs="*", default=[], help="real trajectory files besides the shipped ones")
    parser.add_argument("--judge", default=None, help="judge spec for the repair setting (the runs' judge)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    report: dict[str, Any] = {"command": "python benchmarks/dream_consistency.py " + shlex.join(argv or sys.argv[1:])}
    report["real"] = real_breaks([*real_trajectory_files(), *map(Path, args.real)])
    # The judge as a dream env builds it from the spec (prompt style, sampling); its world model is never loaded.
    dynamics = gym.make("DreamWeb-v0", judge=args.judge).unwrapped.dynamics if args.judge else None
    report["judge"] = args.judge
    report["dream_reports"] = [measure_dreams(Path(path), dynamics) for path in tqdm(args.dreams, desc="reports")]
    report["written_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")

    real = report["real"]
    print(
        f"real transitions (same URL): {real['transitions']} over {real['tasks']} tasks, breaks: {real['breaks']}, "
        f"typings: {real['typings']}, typed text left out: {real['omissions']}"
    )
    print(f"{'dreams':48} {'setting':>10} {'n':>4} {'agree':>6} {'precision':>9} {'recall':>6}")
    for measured in report["dream_reports"]:
        for name, summary in measured["settings"].items():
            fmt = lambda value: "-" if value is None else f"{value:.2f}"  # noqa: E731
            print(
                f"{Path(measured['report']).name[:48]:48} {name:>10} {summary['compared']:>4} "
                f"{fmt(summary['agreement']):>6} {fmt(summary['judge_success_precision']):>9} "
                f"{fmt(summary['real_success_recall']):>6}"
            )
    print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main()
