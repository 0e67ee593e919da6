"""Default rewards that mean something: the default ``DreamWeb-v0``'s reward against the real outcome, held out.

    python benchmarks/default_rewards.py                                   # all 24 tasks, the default env
    python benchmarks/default_rewards.py --tasks miniwob.click-button miniwob.enter-text
    python benchmarks/default_rewards.py --limit 2 --output /tmp/smoke.json   # a smoke run: the first 2 tasks
    python benchmarks/default_rewards.py --env-kwargs '{"reward_guards": {"judge_votes": 3}}' --output other.json

For each task, its first held-out start state: step 0 of the scripted expert's recording on the smallest ``test``
task seed (:func:`~dynaweb_env.data.shipped.split_of`) of the large dataset's test split (seed 4 for every task).
Two episodes are played from it, each on the real page (``RealWeb-v0``, the same task and task seed) and in a dream
(``gym.make("DreamWeb-v0")`` with the defaults, or ``--env-kwargs``), from that recorded page:

- **expert**: the scripted expert's actions (:mod:`dynaweb_env.experts`, as recorded on that page).
- **wrong**: one clearly wrong action, then ``stop [N/A]`` where the episode has not ended. The rule, fixed before
  measuring: click the first element of the start page, in tree order, that no action of the expert's episode
  names and whose role is that of the element the expert acts on first (another button, checkbox, tab...); if
  there is none, the first such element of a role a user clicks (:data:`CLICKABLE_ROLES`); if the expert acts on
  every element, the element of its last action, clicked first (out of order: a submit before the form is
  filled); if it acts on the page's only element, ``stop [N/A]`` at once (nothing done).

In the dream too, an episode whose actions are all played and which has not ended gets ``stop [N/A]`` (the
policy's way to end a dream before its step limit). The dreams of all episodes are stepped together through the
env's own dynamics (``env.unwrapped.dynamics.step``, what ``env.step`` runs, with one batched world-model call per
step, as ``make_vec`` does), the step seeds drawn from ``--seed``; the real pages are played meanwhile on a thread.
The real reward of the same actions is what the dream's reward should be. The report
(``benchmarks/results/default_rewards/default_rewards.json``) gives:

- ``agreement`` over the 48 episodes, over the wrong actions alone and over the expert's alone, and per task: the
  dream's reward (success from 0.5) equals the real outcome;
- ``judge_errors``: dreams whose judge gave no verdict (``info["judged"]`` false);
- per disagreeing episode, who was wrong (``attribution``): the same judge is also asked about the *real* episode
  (its actions and the real final page). If it judges the real page right, the dream's page misled it (the world
  model: e.g. a dream that completes the task anyway); if it misjudges the real page too, the judge is wrong.

Every episode's actions, both final pages, the world model's predicted changes, the judge's reasoning and errors are
kept in ``episodes``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.axtree import parse_axtree_line
from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.data.shipped import LARGE_DATA_DIR, split_of
from dynaweb_env.data.start_states import StartState, start_states_from_trajectories
from dynaweb_env.envs.dream_episode import DreamEpisode
from dynaweb_env.world_model.judge import JudgeRequest, JudgeStep, judge_step

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "default_rewards" / "default_rewards.json"
#: The held-out recordings the start states come from.
HELD_OUT = LARGE_DATA_DIR / "test" / "expert.jsonl.xz"
#: Roles of elements a user clicks, for the wrong-action rule.
CLICKABLE_ROLES = frozenset(
    {"button", "link", "checkbox", "radio", "tab", "menuitem", "option", "treeitem", "textbox", "combobox"}
)
#: What ends an episode whose actions are played and which has not ended.
STOP = "stop [N/A]"
#: Most real steps of an expert episode.
MAX_STEPS = 10
#: Success from this reward on (the real env's rewards are 0 or 1; a dream's graded ones count from here).
SUCCESS = 0.5


def held_out_starts(tasks: Sequence[str] | None = None, rank: int = 0) -> list[tuple[StartState, list[str]]]:
    """The first held-out start state of each task (the smallest ``test`` task seed; ``rank`` 1: the next one), in
    task order, with the scripted expert's recorded actions from it."""
    trajectories = [t for t in iter_trajectories(HELD_OUT) if split_of(int(t.metadata["seed"])) == "test"]
    by_seed: dict[str, dict[int, Any]] = {}  # task -> task seed -> its first recording, in seed order
    for trajectory in sorted(trajectories, key=lambda t: (t.task_id, int(t.metadata["seed"]))):
        by_seed.setdefault(trajectory.task_id, {}).setdefault(int(trajectory.metadata["seed"]), trajectory)
    firsts = {task: [*seeds.values()][rank] for task, seeds in by_seed.items() if len(seeds) > rank}
    unknown = sorted(set(tasks or ()) - set(firsts))
    if unknown:
        raise ValueError(f"no held-out recording of task(s) {unknown}; known: {sorted(firsts)}")
    chosen = [firsts[task] for task in (tasks or sorted(firsts))]
    return [
        (start_states_from_trajectories([t], include_intermediate=False)[0], [s.action for s in t.steps if s.action])
        for t in chosen
    ]


def named_ids(actions: Sequence[str]) -> set[str]:
    """The element ids the actions name (``click [13]``, ``type [5] [x] [0]``: their first argument)."""
    ids = set()
    for action in actions:
        name, _, rest = action.partition("[")
        if name.strip() in ("click", "type", "hover", "select_option") and "]" in rest:
            ids.add(rest.split("]", 1)[0].strip())
    return ids


def wrong_action(axtree: str, expert_actions: Sequence[str]) -> str:
    """The rule's wrong action on this page (see the module docstring)."""
    taken = named_ids(expert_actions)
    nodes = [node for node in map(parse_axtree_line, axtree.splitlines()) if node is not None and node.bid]
    by_bid = {node.bid: node for node in nodes}
    order = [named for action in expert_actions for named in sorted(named_ids([action])) if named in by_bid]
    first_role = by_bid[order[0]].role if order else None
    untaken = [node for node in nodes if node.bid not in taken]
    for candidates in (
        [node for node in untaken if node.role == first_role],
        [node for node in untaken if node.role in CLICKABLE_ROLES],
    ):
        if candidates:
            return f"click [{candidates[0].bid}]"
    if len(set(order)) > 1:  # the expert acts on every element: its last one, first, is out of order
        return f"click [{order[-1]}]"
    return STOP  # nothing else to act on: doing nothing is wrong


def play_real(env: gym.Env, start: StartState, actions: Sequence[str]) -> dict[str, Any]:
    """The actions played on the real page of ``start``'s task and seed, then ``stop`` if the episode has not ended."""
    observation, _ = env.reset(options={"task": start.task_id, "task_seed": start.task_seed})
    row: dict[str, Any] = {"start_reproduced": observation["axtree"] == start.axtree}
    taken, steps, reward, ended = [], [], 0.0, False
    planned = list(actions)
    while not ended and len(taken) < MAX_STEPS:
        action = planned.pop(0) if planned else STOP
        steps.append(judge_step(action, "", observation["axtree"]))
        observation, reward, terminated, truncated, _ = env.step(action)
        taken.append(action)
        ended = terminated or truncated or action == STOP
    return row | {
        "actions": taken,
        "targets": [step.target for step in steps],
        "target_texts": [step.text for step in steps],
        "target_rows": [step.row for step in steps],
        "real_reward": float(reward),
        "real_final_url": observation["url"],
        "real_final_axtree": observation["axtree"],
    }


def play_all_real(plans: Sequence[tuple[StartState, str, list[str]]]) -> list[dict[str, Any]]:
    """Every plan played on a real page (one browser)."""
    env = gym.make("RealWeb-v0", max_steps=MAX_STEPS)
    rows = []
    try:
        for start, kind, actions in plans:
            rows.append(play_real(env, start, actions))
            print(f"real {start.task_id} {kind}: {rows[-1]['real_reward']:g}", flush=True)
    finally:
        env.close()
    return rows


def play_dreams(env: gym.Env, plans: Sequence[tuple[StartState, str, list[str]]], seed: int) -> list[dict[str, Any]]:
    """Every plan's actions dreamed from its start state (``stop`` where the dream has not ended), all dreams stepped
    together through the env's own dynamics (what its ``step`` runs), the step seeds drawn from ``seed``."""
    dynamics = env.unwrapped.dynamics
    rng = np.random.default_rng(seed)
    episodes = [DreamEpisode.begin(start) for start, _, _ in plans]
    queues = [[*actions, STOP] for _, _, actions in plans]
    rows: list[dict[str, Any]] = [{"dream_actions": [], "world_model_changes": [], "dream_pages": []} for _ in plans]
    ended: dict[int, tuple[dict[str, str], float, dict[str, Any]]] = {}
    while live := [index for index in range(len(plans)) if index not in ended]:
        actions = [queues[index].pop(0) if queues[index] else STOP for index in live]
        results = dynamics.step([episodes[i] for i in live], actions, seed=int(rng.integers(2**31 - 1)))
        for index, action, result in zip(live, actions, results, strict=True):
            observation, reward, terminated, truncated, info = result
            rows[index]["dream_actions"].append(action)
            rows[index]["world_model_changes"].append(info.get("changes", ""))
            rows[index]["dream_pages"].append(observation["axtree"])  # the page after each action
            if terminated or truncated:
                ended[index] = (observation, reward, info)
        print(f"dream step: {len(live)} dreams, {len(ended)} ended", flush=True)
    for index, row in enumerate(rows):
        observation, reward, info = ended[index]
        row |= {
            "dream_reward": float(reward),
            "judged": bool(info.get("judged", False)),
            "judge_error": info.get("judge_error", "") or info.get("backend_error", ""),
            "judge_reasoning": info.get("judge_reasoning", ""),
            "end_reason": info.get("end_reason", ""),
            "world_model_inconsistencies": info.get("world_model_inconsistencies", []),
            "dream_final_url": observation["url"],
        }
    return rows


def judge_real(env: gym.Env, plans: Sequence[tuple[StartState, str, list[str]]], rows: Sequence[dict[str, Any]],
               seed: int) -> list[float | None]:  # fmt: skip
    """The env's judge's verdict on each *real* episode (its actions and the real final page; ``None``: no verdict),
    in one call."""
    requests = []
    for (start, _, _), row in zip(plans, rows, strict=True):
        fields = zip(row["actions"], row["targets"], row["target_texts"], row["target_rows"], strict=True)
        steps = tuple(JudgeStep(a, target=t, text=x, row=r) for a, t, x, r in fields)
        answer = "N/A" if row["actions"][-1] == STOP else None
        requests.append(JudgeRequest(start.goal, steps, row["real_final_url"], row["real_final_axtree"], answer))
    verdicts = env.unwrapped.dynamics.judge.judge(requests, seed=seed)
    return [None if verdict.error else verdict.reward for verdict in verdicts]


def agreement(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Agreement of dream rewards with real outcomes over ``rows``."""
    if not rows:
        return {"episodes": 0}
    agree = [(row["dream_reward"] >= SUCCESS) == (row["real_reward"] >= SUCCESS) for row in rows]
    return {
        "episodes": len(rows),
        "agreement": sum(agree) / len(rows),
        "agree": sum(agree),
        "judge_errors": sum(not row["judged"] for row in rows),
        "dream_successes": sum(row["dream_reward"] >= SUCCESS for row in rows),
        "real_successes": sum(row["real_reward"] >= SUCCESS for row in rows),
    }


def attribute(row: dict[str, Any]) -> str | None:
    """Who was wrong in a disagreeing episode (see the module docstring); ``None`` where dream and real agree."""
    if (row["dream_reward"] >= SUCCESS) == (row["real_reward"] >= SUCCESS):
        return None
    if not row["judged"]:
        return "no_verdict"
    on_real = row.get("judge_on_real_page")
    if on_real is None:
        return "unknown"
    return "world_model" if (on_real >= SUCCESS) == (row["real_reward"] >= SUCCESS) else "judge"


def report(rows: list[dict[str, Any]], args: argparse.Namespace, env_kwargs: dict, seconds: float) -> dict[str, Any]:
    tasks = sorted({row["task_id"] for row in rows})
    wrong = [row for row in rows if row["kind"] == "wrong"]
    argv = sys.argv[1:] if args.argv is None else args.argv
    return {
        "command": "python benchmarks/default_rewards.py " + shlex.join(argv),
        "date": datetime.date.today().isoformat(),
        "env_kwargs": env_kwargs,
        "seed": args.seed,
        "start_rank": args.start_rank,
        "wrong_action_rule": "click the first element of the start page (tree order) that no expert action names, "
        "of the role of the expert's first element, else of a role in "
        f"{sorted(CLICKABLE_ROLES)}; else the expert's last element first (out of order); else {STOP!r} at once. "
        f"Then {STOP!r} where the episode has not ended",
        "targets": {"overall": 0.90, "wrong": 0.85},
        "overall": agreement(rows),
        "wrong": agreement(wrong),
        "expert": agreement([row for row in rows if row["kind"] == "expert"]),
        "per_task": {task: agreement([row for row in rows if row["task_id"] == task]) for task in tasks},
        "disagreements": {
            who: sorted(f"{r['task_id']}/{r['kind']}" for r in rows if r["attribution"] == who)
            for who in ("world_model", "judge", "no_verdict", "unknown")
        },
        "real_starts_reproduced": sum(row["start_reproduced"] for row in rows),
        "seconds": round(seconds, 1),
        "episodes": rows,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    env_kwargs = json.loads(args.env_kwargs)
    plans = []
    for start, expert in held_out_starts(args.tasks, args.start_rank)[: args.limit or None]:
        wrong = wrong_action(start.axtree, expert)
        plans += [(start, "expert", expert), (start, "wrong", [] if wrong == STOP else [wrong])]
    began = time.perf_counter()
    dream = gym.make("DreamWeb-v0", **env_kwargs)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the browser waits on pages while the models compute
        real_rows = pool.submit(play_all_real, plans)
        dream_rows = play_dreams(dream, plans, args.seed)
        real_rows = real_rows.result()
    rows = []
    for (start, kind, _), real, dreamed in zip(plans, real_rows, dream_rows, strict=True):
        rows.append({"task_id": start.task_id, "task_seed": start.task_seed, "kind": kind, **real, **dreamed})
    for row, on_real in zip(rows, judge_real(dream, plans, rows, args.seed), strict=True):
        row["judge_on_real_page"] = on_real
        row["attribution"] = attribute(row)
        print(
            f"{row['task_id']} {row['kind']}: dream {row['dream_reward']:g} real {row['real_reward']:g} "
            f"({row['end_reason']}{', no verdict' if not row['judged'] else ''}) -> {row['attribution'] or 'agree'}",
            flush=True,
        )
    dream.close()
    return report(rows, args, env_kwargs, time.perf_counter() - began)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/default_rewards.py", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=None, help="task ids (default: all 24)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N tasks (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of every dream (default 0)")
    parser.add_argument("--start-rank", type=int, default=0,
                        help="which held-out start state of each task: 0, the smallest test task seed (default); "
                        "1, the next (a second set of 48 episodes)")  # fmt: skip
    parser.add_argument("--env-kwargs", default="{}", help="JSON gym.make arguments of the dream (default: none)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.limit < 0:
        parser.error("--limit must be >= 0")
    try:
        kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as error:
        parser.error(f"--env-kwargs is not valid JSON: {error}")
    if not isinstance(kwargs, dict):
        parser.error("--env-kwargs must be a JSON object")
    results = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    summary = {key: results[key] for key in ("overall", "wrong", "expert", "disagreements")}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
