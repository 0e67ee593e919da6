"""How often ``RealWeb-v0(lookahead_guard=...)`` would have blocked real failures, and how often real successes.

The shipped exploration data (``dynaweb_env/data/miniwob-large/<split>/explore-e0.3-s0.jsonl.xz``: the scripted
expert with random actions, recorded on real MiniWoB++ pages) holds real failures: episodes that a wrong action
ended with reward 0. For every episode the task ended (``end_reason == "terminated"``), the action that ended it is
put to the guard on the page it was taken on, after the episode's earlier actions, exactly as the guard would have
seen it (:class:`~dynaweb_env.envs.lookahead_guard.LookaheadGuard`: the world model dreams the next page, the judge
scores it; :func:`~dynaweb_env.envs.lookahead_guard.guard_refusal` decides). A guard is good when it blocks the
final actions of failures and lets the final actions of successes run. ``--steps all`` also puts every earlier
action of a success to it (blocking one of those stalls a success as well).

The held-out splits are the default (the shipped world model and judge learned from the train split). Each action's
outcome (the judge's probability, whether the dream ended or left the page) is saved to ``<output>.jsonl`` as it is
scored (removed once the JSON is written), so an interrupted run resumes; the block rates at every threshold come
from the same dreams.

Command::

    python -m benchmarks.lookahead_guard --splits validation test
    python -m benchmarks.lookahead_guard --world-model tiny-random --judge tiny-random --limit 4 --output /tmp/g.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.jsonl import append_jsonl, iter_jsonl_lines
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import LARGE_DATA_DIR
from dynaweb_env.envs.lookahead import ImaginedOutcome, Lookahead, start_from_observation
from dynaweb_env.envs.lookahead_guard import DEFAULT_GUARD_THRESHOLD, guard_refusal
from dynaweb_env.observation import action_target, make_observation

RESULTS = Path(__file__).resolve().parent / "results" / "planning"
EXPLORATION_FILE = "explore-e0.3-s0.jsonl.xz"
THRESHOLDS = (0.1, 0.3, 0.5, 0.7, 0.9)


def guard_cases(trajectories: Sequence[Trajectory], steps: str = "final") -> list[dict[str, Any]]:
    """The actions to put to the guard: each ended episode's final action (``kind`` ``"failure_final"`` or
    ``"success_final"``), and with ``steps="all"`` a success's earlier actions (``"success_earlier"``)."""
    cases = []
    for trajectory in trajectories:
        if trajectory.metadata.get("end_reason") != "terminated":
            continue
        acted = [index for index, step in enumerate(trajectory.steps) if step.action.strip()]
        if not acted:
            continue
        chosen = acted if steps == "all" and trajectory.success else acted[-1:]
        for index in chosen:
            final = index == acted[-1]
            kind = ("success" if trajectory.success else "failure") + ("_final" if final else "_earlier")
            cases.append({"id": f"{trajectory.id}#{index}", "kind": kind, "trajectory": trajectory, "step": index})
    return cases


def put_to_guard(lookahead: Lookahead, cases: Sequence[dict[str, Any]], seed: int) -> list[ImaginedOutcome]:
    """Each case's dreamed outcome: one world-model call and one judge call for the whole batch."""
    starts, actions = [], []
    for case in cases:
        trajectory, index = case["trajectory"], case["step"]
        step = trajectory.steps[index]
        earlier = [s for s in trajectory.steps[:index] if s.action.strip()]
        last = trajectory.steps[index - 1].action if index else ""
        observation = make_observation(trajectory.goal, step.url, step.axtree, last, step.last_action_error)
        history = [s.action for s in earlier]
        targets = [action_target(s.action, s.axtree) for s in earlier]
        seed_of = trajectory.metadata.get("seed")
        starts.append(start_from_observation(observation, trajectory.task_id, history, targets, seed_of))
        actions.append(step.action)
    episodes = lookahead.begin(starts)
    first = lookahead.step(episodes, actions, seed)
    return lookahead.score(episodes, first, seed)


def row_of(case: dict[str, Any], outcome: ImaginedOutcome) -> dict[str, Any]:
    """One scored action as saved: its case (id, kind, task, action) and its dreamed outcome."""
    action = case["trajectory"].steps[case["step"]].action
    return {"id": case["id"], "kind": case["kind"], "task_id": case["trajectory"].task_id, "action": action,
            "outcome": outcome.to_dict()}  # fmt: skip


def block_rates(rows: Sequence[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """Per kind of action: how many, how many the guard blocks at ``threshold``, and the rate."""
    rates: dict[str, Any] = {}
    for kind in sorted({row["kind"] for row in rows}):
        group = [row for row in rows if row["kind"] == kind]
        blocked = sum(bool(guard_refusal(ImaginedOutcome(**row["outcome"]), threshold)) for row in group)
        rates[kind] = {"actions": len(group), "blocked": blocked, "rate": round(blocked / len(group), 3)}
    return rates


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Block rates at each threshold, and how the dreams of each kind ended."""
    kinds: dict[str, Any] = {}
    for kind in sorted({row["kind"] for row in rows}):
        group = [row["outcome"] for row in rows if row["kind"] == kind]
        scored = [o["success_probability"] for o in group if o["success_probability"] is not None]
        kinds[kind] = {
            "actions": len(group),
            "dream_ended": sum(o["ended"] for o in group),
            "leaves_site": sum(o["leaves_site"] for o in group),
            "no_score": len(group) - len(scored),
            "mean_success_probability": round(sum(scored) / len(scored), 3) if scored else None,
        }
    return {"by_threshold": {str(t): block_rates(rows, t) for t in THRESHOLDS}, "dreams": kinds}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/lookahead_guard.py")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"], help="Splits of the large dataset.")
    parser.add_argument("--data", default=None, help="A trajectory file to use instead of the splits' exploration.")
    parser.add_argument("--steps", choices=["final", "all"], default="final", help="Which actions to put to it.")
    parser.add_argument("--world-model", default=None, help="World model (default: the shipped one).")
    parser.add_argument("--judge", default=None, help="Judge (default: the shipped trained judge).")
    parser.add_argument("--batch", type=int, default=8, help="Actions dreamed per world-model call.")
    parser.add_argument("--limit", type=int, default=0, help="Put at most this many actions to the guard (0: all).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(RESULTS / "lookahead_guard.json"))
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    files = [Path(args.data)] if args.data else [LARGE_DATA_DIR / split / EXPLORATION_FILE for split in args.splits]
    trajectories = [t for path in files for t in read_trajectories(path)]
    cases = guard_cases(trajectories, args.steps)
    if args.limit:
        failures = [c for c in cases if c["kind"].startswith("failure")]
        cases = (failures[: args.limit // 2] + [c for c in cases if not c["kind"].startswith("failure")])[: args.limit]
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".jsonl")
    done = {line.record["id"]: line.record for line in iter_jsonl_lines(partial, on_error="skip")} if (
        partial.is_file()
    ) else {}  # fmt: skip
    todo = [case for case in cases if case["id"] not in done]
    lookahead = Lookahead(args.world_model, args.judge, depth=1)
    started = time.perf_counter()
    for first in range(0, len(todo), args.batch):
        batch = todo[first : first + args.batch]
        outcomes = put_to_guard(lookahead, batch, args.seed + first)
        rows = [row_of(case, outcome) for case, outcome in zip(batch, outcomes, strict=True)]
        append_jsonl(partial, rows)
        done.update({row["id"]: row for row in rows})
        print(f"lookahead_guard: {len(done)}/{len(cases)} actions", file=sys.stderr, flush=True)
    rows = [done[case["id"]] for case in cases]
    seconds = time.perf_counter() - started
    report = {
        "command": shlex.join(["python", "-m", "benchmarks.lookahead_guard", *(argv or sys.argv[1:])]),
        "data": [str(path.relative_to(LARGE_DATA_DIR.parent)) if path.is_relative_to(LARGE_DATA_DIR.parent) else
                 str(path) for path in files],  # fmt: skip
        "world_model": args.world_model or "shipped default", "judge": args.judge or "shipped default",
        "default_threshold": DEFAULT_GUARD_THRESHOLD,
        "summary": summarize(rows),
        "cost_this_run": {**lookahead.cost.to_dict(), "actions": len(todo), "wall_seconds": round(seconds, 1)},
        "rows": rows,
    }  # fmt: skip
    output.write_text(json.dumps(report, indent=1) + "\n")
    partial.unlink(missing_ok=True)  # its rows are in the JSON now
    default = report["summary"]["by_threshold"][str(DEFAULT_GUARD_THRESHOLD)]
    for kind, rate in default.items():
        print(f"{kind}: blocked {rate['blocked']}/{rate['actions']} ({rate['rate']:.0%})")
    return report


if __name__ == "__main__":
    main()
