"""Does the planner's score rank candidate actions as the real page does? Judge ranking on replayed candidates.

Planning (``dynaweb eval --plan K``, :mod:`dynaweb_trainer.planning`) runs, of K candidate actions, the one whose
dreamed future the judge scores highest. It can only help where that score orders the candidates as the real page
would. This measures it on held-out real pages, with the shipped world model and judge:

1. **Pages.** The first page of each task at held-out task seeds (the test split,
   :func:`~dynaweb_env.data.shipped.split_of`), live from ``RealWeb-v0``.
2. **Candidates.** The scripted expert's action, then random valid actions
   (:func:`~dynaweb_trainer.exploration.random_action`, seeded by task and seed) until ``--candidates`` distinct
   parsed actions (fewer where the page offers fewer).
3. **Real label.** Each candidate is replayed on the real page (same task seed), then the expert plays on until
   the task ends or its step limit: the label is the real reward, i.e. whether the candidate left the task
   solvable. (A harmless click is *good*; a click that ends the task in failure, or breaks it, is *bad*.)
4. **Score.** :class:`~dynaweb_env.envs.lookahead.Lookahead` at depth 1, as the planner scores: the world model
   dreams each candidate's next page (one call per page), the judge scores each dream (its probability of
   SUCCESS from log-probs, one call per page). With ``--depth d`` the scripted expert goes on acting in each dream
   for ``d - 1`` more steps: the score the planner could reach with a policy that knows the task behind it.

Reported, overall and per task: ``top1_good`` (on pages with both good and bad candidates, how often the
best-scored candidate is good: what planning needs), ``pairwise`` (over every good/bad pair of a page, how often the
good one scores higher; ties count half), ``expert_first`` (how often the expert's action scores strictly highest),
``tied`` (pages whose candidates all score the same: planning falls back to the policy), the candidates per page,
and ``planner_success_by_tie_margin`` (:func:`planner_success`: what the planner's pick would achieve for each tie
margin, against no planning). ``by_progress_weight`` recomputes the ranking measures and the planner's success
(default tie margin) from the same dreams for each progress weight of :func:`dynaweb_trainer.planning.score`
(``0``: the judge's probability alone; ``w``: an unfinished dream scores at least ``w`` times its objective
progress), side by side; ``--progress-weight`` picks the one behind each candidate's ``score``.

Resumable: each page's row goes to ``<output>.partial.jsonl`` as it is done; rerunning skips those pages, and the
pages of a finished ``<output>`` (rerunning it only recomputes the summaries).

Command::

    python -m benchmarks.planning_ranking --suite small --seeds-per-task 2
    python -m benchmarks.planning_ranking --tasks miniwob.click-button --seeds-per-task 1 --world-model tiny-random \\
        --judge tiny-random --output /tmp/ranking.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynaweb_env.data.jsonl import append_jsonl, iter_jsonl_lines
from dynaweb_env.data.tasks import TASK_SUITES

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.claims.jobs import held_out_seed_list  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "planning"


def candidates_for(task_id: str, task_seed: int, observation: dict[str, str], count: int) -> list[str]:
    """The expert's action first, then seeded random valid actions, deduplicated by their parsed action."""
    from dynaweb_env.actions import read_action
    from dynaweb_env.experts import get_expert
    from dynaweb_trainer.exploration import random_action

    shown = [read_action(get_expert(task_id).act(observation)[1]).shown]
    rng = np.random.default_rng([zlib.crc32(task_id.encode()), task_seed])
    for _ in range(20 * count):
        if len(shown) >= count:
            break
        action = read_action(random_action(observation, rng)[1]).shown
        if action not in shown:
            shown.append(action)
    return shown


def replay(env: Any, task_id: str, task_seed: int, candidate: str) -> dict[str, Any]:
    """``candidate`` on the real page, then the expert to the end: the real reward and how the episode went."""
    from dynaweb_env.experts import ExpertError, get_expert

    observation, _ = env.reset(options={"task": task_id, "task_seed": task_seed})
    observation, reward, terminated, truncated, _ = env.step(candidate)
    ended_by_candidate = terminated or truncated
    expert_steps, expert_error = 0, ""
    while not (terminated or truncated):
        try:
            action = get_expert(task_id).act(observation)[1]
        except ExpertError as error:  # the candidate left a page the expert cannot read: the task is lost
            expert_error = str(error)
            break
        observation, reward, terminated, truncated, _ = env.step(action)
        expert_steps += 1
    return {"real_reward": float(reward), "ended_by_candidate": bool(ended_by_candidate),
            "expert_steps_after": expert_steps, "expert_error": expert_error}  # fmt: skip


def score_page(lookahead: Any, task_id: str, task_seed: int, observation: dict[str, str],
               candidates: Sequence[str], seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """Each candidate's dreamed outcome from the page: one world-model call per depth and one judge call.

    Past the first step, the scripted expert acts on each dreamed page (a continuation that knows the task: what
    the score could do with a good policy behind it); a dreamed page the expert cannot read ends with ``stop``.
    """
    from dynaweb_env.envs.lookahead import start_from_observation
    from dynaweb_env.experts import ExpertError, get_expert

    start = start_from_observation(observation, task_id, task_seed=task_seed)
    episodes = lookahead.begin([start] * len(candidates))
    first = lookahead.step(episodes, list(candidates), seed)
    for _ in range(1, lookahead.depth):
        if all(episode.done for episode in episodes):
            break
        actions = []
        for episode in episodes:
            try:
                actions.append("stop [N/A]" if episode.done else get_expert(task_id).act(episode.observation())[1])
            except ExpertError:
                actions.append("stop [N/A]")
        lookahead.step(episodes, actions, seed)
    return [outcome.to_dict() for outcome in lookahead.score(episodes, first, seed)]


def page_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """The ranking measures of one page (``None`` where a measure does not apply to it)."""
    scores = [c["score"] for c in row["candidates"]]
    good = [c["real_reward"] > 0 for c in row["candidates"]]
    mixed = any(good) and not all(good)
    best = max(scores)
    tied = len(set(scores)) == 1
    pairs = [(g, b) for g in range(len(good)) if good[g] for b in range(len(good)) if not good[b]]
    pairwise = statistics.fmean(1.0 if scores[g] > scores[b] else 0.5 if scores[g] == scores[b] else 0.0
                                for g, b in pairs) if pairs else None  # fmt: skip
    leaders = [index for index, score in enumerate(scores) if score == best]
    top1 = statistics.fmean(good[index] for index in leaders) if mixed else None  # a tie: its expected pick
    expert_first = scores[0] > max(scores[1:]) if len(scores) > 1 else None
    return {"mixed": mixed, "tied": tied, "top1_good": top1, "pairwise": pairwise, "expert_first": expert_first,
            "candidates": len(scores)}  # fmt: skip


def planner_success(rows: Sequence[dict[str, Any]], margin: float) -> float:
    """The real success of the candidate the planner runs, averaged over pages and over which candidate is the
    policy's own answer (each in turn): the best-scored one if it scores more than ``margin`` above the own
    answer, else the own answer (:meth:`~dynaweb_trainer.planning.PlanningPolicy` with ``tie_margin=margin``).
    ``margin=inf`` is no planning: the mean success of the candidates."""
    from dynaweb_trainer.planning import pick

    picks = []
    for row in rows:
        scores = [c["score"] for c in row["candidates"]]
        good = [float(c["real_reward"] > 0) for c in row["candidates"]]
        picks += [good[pick(scores, own, margin)] for own in range(len(scores))]
    return round(statistics.fmean(picks), 3) if picks else 0.0


#: Tie margins compared by :func:`planner_success` (``inf``: no planning).
MARGINS = (1e-6, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, float("inf"))
#: Progress weights compared side by side (:func:`dynaweb_trainer.planning.score`).
PROGRESS_WEIGHTS = (0.0, 0.25, 0.5, 0.75)


def candidate_score(dream: dict[str, Any], progress_weight: float) -> float:
    """A candidate's planning score from its recorded dream (``0`` where no score could be had)."""
    from dynaweb_env.envs.lookahead import ImaginedOutcome
    from dynaweb_trainer.planning import score

    return max(score(ImaginedOutcome(**dream), progress_weight), 0.0)


def by_progress_weight(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ranking measures and the planner's success (tie margin 1e-6) for each of :data:`PROGRESS_WEIGHTS`."""
    report = {}
    for weight in PROGRESS_WEIGHTS:
        rescored = [{**row, "candidates": [{**c, "score": candidate_score(c["dream"], weight)}
                                           for c in row["candidates"]]} for row in rows]  # fmt: skip
        metrics = [page_metrics(row) for row in rescored]
        means = {}
        for key in ("top1_good", "pairwise", "expert_first"):
            values = [float(m[key]) for m in metrics if m[key] is not None]
            means[key] = round(statistics.fmean(values), 3) if values else None
        report[str(weight)] = {**means, "planner_success": planner_success(rescored, MARGINS[0])}
    return report


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The measures over pages: means of those that apply, with how many pages each is over."""
    metrics = [page_metrics(row) for row in rows]

    def mean_of(key: str) -> dict[str, Any]:
        values = [float(m[key]) for m in metrics if m[key] is not None]
        return {"mean": round(statistics.fmean(values), 3) if values else None, "pages": len(values)}

    return {
        "pages": len(rows),
        "mixed_pages": sum(m["mixed"] for m in metrics),
        "top1_good": mean_of("top1_good"),
        "pairwise": mean_of("pairwise"),
        "expert_first": mean_of("expert_first"),
        "tied": mean_of("tied"),
        "candidates_per_page": round(statistics.fmean(m["candidates"] for m in metrics), 2) if metrics else 0,
        "good_candidates": sum(c["real_reward"] > 0 for row in rows for c in row["candidates"]),
        "bad_candidates": sum(c["real_reward"] <= 0 for row in rows for c in row["candidates"]),
        "planner_success_by_tie_margin": {str(margin): planner_success(rows, margin) for margin in MARGINS},
        "by_progress_weight": by_progress_weight(rows),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every page scored and replayed (resuming the partial file); the report, also written to ``args.output``."""
    import gymnasium as gym

    import dynaweb_env  # noqa: F401  (registers the envs)
    from dynaweb_env.envs.lookahead import Lookahead

    tasks = args.tasks or list(TASK_SUITES[args.suite])
    seeds = held_out_seed_list(args.first_seed, args.seeds_per_task)
    output = Path(args.output)
    partial = output.with_suffix(".partial.jsonl")
    done = json.loads(output.read_text()).get("pages", []) if output.is_file() else []  # a finished run's pages
    done += [line.record for line in iter_jsonl_lines(partial)] if partial.is_file() else []
    rows = {(row["task_id"], row["task_seed"]): row for row in done}
    started = time.perf_counter()
    lookahead = Lookahead(world_model=args.world_model, judge=args.judge, depth=args.depth).load()
    env = gym.make("RealWeb-v0", max_steps=args.max_steps)
    try:
        for task_id in tasks:
            for task_seed in seeds:
                if (task_id, task_seed) in rows:
                    continue
                observation, _ = env.reset(options={"task": task_id, "task_seed": task_seed})
                candidates = candidates_for(task_id, task_seed, observation, args.candidates)
                outcomes = score_page(lookahead, task_id, task_seed, observation, candidates, args.seed)
                row = {"task_id": task_id, "task_seed": task_seed, "candidates": []}
                for index, (candidate, outcome) in enumerate(zip(candidates, outcomes, strict=True)):
                    row["candidates"].append({
                        "action": candidate, "expert": index == 0,
                        "score": candidate_score(outcome, args.progress_weight),
                        "dream": outcome, **replay(env, task_id, task_seed, candidate),
                    })  # fmt: skip
                rows[(task_id, task_seed)] = row
                append_jsonl(partial, [row])
                shown = ", ".join(f"{c['action']}={c['score']:.2f}/{c['real_reward']:g}" for c in row["candidates"])
                print(f"{task_id} seed {task_seed}: {shown}", flush=True)
    finally:
        env.close()
    for row in rows.values():  # rows resumed from another --progress-weight are scored by this one
        for candidate in row["candidates"]:
            candidate["score"] = candidate_score(candidate["dream"], args.progress_weight)
    ordered = [rows[key] for key in sorted(rows)]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        by_task.setdefault(row["task_id"], []).append(row)
    report = {
        "command": shlex.join(["python", "-m", "benchmarks.planning_ranking", *args.argv]),
        "world_model": args.world_model or "shipped default", "judge": args.judge or "shipped default",
        "tasks": tasks, "task_seeds": seeds, "candidates_asked": args.candidates,
        "label": "real reward after the candidate, then the scripted expert to the end (1: the task stayed solvable)",
        "score": f"Lookahead depth {args.depth}: the judge's probability of SUCCESS of the candidate's dream"
        + (" (the expert acting in the dream after the candidate)" if args.depth > 1 else "")
        + (f"; an unfinished dream at least {args.progress_weight} x its objective progress"
           if args.progress_weight else ""),
        "depth": args.depth,
        "progress_weight": args.progress_weight,
        "overall": summarize(ordered),
        "per_task": {task: summarize(task_rows) for task, task_rows in sorted(by_task.items())},
        "wall_seconds_this_invocation": round(time.perf_counter() - started, 1),
        "pages": ordered,
    }  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1) + "\n")
    partial.unlink(missing_ok=True)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``0`` done, ``2`` bad arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.planning_ranking", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(TASK_SUITES), default="small", help="Task suite (default: small).")
    parser.add_argument("--tasks", nargs="+", default=None, help="Task ids instead of a suite.")
    parser.add_argument("--seeds-per-task", type=int, default=2, help="Held-out task seeds per task.")
    parser.add_argument("--first-seed", type=int, default=100, help="Held-out seeds are taken from this one on.")
    parser.add_argument("--candidates", type=int, default=4, help="Candidates per page (the planner's K).")
    parser.add_argument("--depth", type=int, default=1, help="Dream steps (candidate, then expert).")
    parser.add_argument("--max-steps", type=int, default=10, help="Step limit of a replay (long tasks: their own).")
    parser.add_argument("--world-model", default=None, help="World model spec (default: DreamWeb-v0's).")
    parser.add_argument("--judge", default=None, help="Judge spec (default: DreamWeb-v0's).")
    parser.add_argument(
        "--progress-weight",
        type=float,
        default=None,
        help="Score floor of an unfinished dream per unit of objective progress (default: the planner's, 0.5; 0: off).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seeds the model calls.")
    parser.add_argument("--output", default=str(RESULTS / "planning_ranking.json"), help="Where the JSON goes.")
    args = parser.parse_args(argv)
    if args.candidates < 2 or args.seeds_per_task < 1 or args.depth < 1:
        parser.error("--candidates must be at least 2, --seeds-per-task and --depth at least 1")
    if args.progress_weight is None:
        from dynaweb_trainer.planning import DEFAULT_PROGRESS_WEIGHT

        args.progress_weight = DEFAULT_PROGRESS_WEIGHT
    if not 0 <= args.progress_weight < 1:
        parser.error("--progress-weight must be in [0, 1)")
    args.argv = argv
    report = run(args)
    overall = report["overall"]
    print(json.dumps({key: overall[key] for key in ("pages", "mixed_pages", "top1_good", "pairwise", "expert_first",
                                                    "tied")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
