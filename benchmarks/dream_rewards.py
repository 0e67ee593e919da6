"""Are dream rewards real? Replay the policy's training dreams on the real pages and compare.

    python benchmarks/dream_rewards.py                                   # every runs/claims/shared/*/episodes.jsonl
    python benchmarks/dream_rewards.py --episodes outputs/dynaweb-gspo/episodes.jsonl
    python benchmarks/dream_rewards.py --guards none '{"judge_votes": 5}' '{"gate_termination": true}'
    python benchmarks/dream_rewards.py --demonstrations 6 --guards none '{"world_model_samples": 3}'

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

**Reward guards** (``--guards``, :mod:`dynaweb_env.envs.dream_guards`): each dream is also *re-dreamed*
once per guard setting (a JSON object of ``reward_guards``; ``none`` is no guard, the baseline re-dreamed
in the same run): ``DreamWeb-v0`` starts from the dream's recorded start page and is given the dream's
recorded actions, with the world model and judge named by ``--world-model`` / ``--judge``. The reward it
gives is compared with the same real reward, so each guard's agreement and precision sit side by side
(``guards`` in the JSON), with how often it abstained, cut or gated. ``--demonstrations N`` adds dreams
without a training run: the first ``N`` held-out (``test`` split) shipped demonstrations of more than one
action, each as two dreams from its first page: all its actions (a real success) and all but the last (a
real failure, the task left unfinished: the pages a world model wrongly declares finished).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import split_of
from dynaweb_env.data.start_states import StartState, builtin_start_states_path
from dynaweb_env.envs.dream_episode import DreamEpisode
from dynaweb_env.envs.dream_guards import RewardGuards
from dynaweb_env.models import DEFAULT_WORLD_MODELS, TRAINED_JUDGE

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


def compare(rows: Sequence[dict[str, Any]], reward: str = "dream_reward", threshold: float = 1.0) -> dict[str, Any]:
    """Agreement, the judge's precision and recall against the real outcome, and the 2x2 counts.

    ``reward`` names the row's dream reward (rows without one are left out: demonstrations have no recorded one);
    a reward of at least ``threshold`` counts as judged SUCCESS.
    """
    rows = [row for row in rows if row.get(reward) is not None]
    compared = [row for row in rows if row["replayed"]]
    counts = {"judged_success_real_success": 0, "judged_success_real_failure": 0}
    counts |= {"judged_failure_real_success": 0, "judged_failure_real_failure": 0}
    for row in compared:
        judged = "judged_success" if row[reward] >= threshold else "judged_failure"
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


def demonstration_dreams(count: int, path: Path | None = None) -> list[Trajectory]:
    """Dreams from the first ``count`` held-out multi-action demonstrations: all actions, and all but the last.

    ``path``: a trajectory JSONL (e.g. ``dynaweb-collect --policy expert`` on test-split seeds) instead of the
    shipped demonstrations; only its successful test-split (:func:`~dynaweb_env.data.shipped.split_of`) ones count.
    """
    dreams = []
    if path is None:
        held_out = [t for t in iter_trajectories(builtin_start_states_path()) if t.metadata.get("split") == "test"]
    else:
        seeded = [t for t in iter_trajectories(path) if isinstance(t.metadata.get("seed"), int) and t.success]
        held_out = [t for t in seeded if split_of(t.metadata["seed"]) == "test"]
    multi = [t for t in held_out if sum(bool(s.action.strip()) for s in t.steps) > 1]
    rank = {t.id: sum(o.task_id == t.task_id for o in multi[:i]) for i, t in enumerate(multi)}
    # Round robin over tasks, so that the first N demonstrations cover every task rather than the first one.
    for demo in sorted(multi, key=lambda t: rank[t.id])[:count]:
        start = {"task_id": demo.task_id, "goal": demo.goal, "url": demo.steps[0].url, "trajectory_id": demo.id}
        start |= {"task_seed": demo.metadata.get("seed"), "step_index": 0}
        acted = [step for step in demo.steps if step.action.strip()]
        for name, steps in (("full", acted), ("cut", acted[:-1])):
            metadata = {"options": {"start_state": start}, "demonstration": name}
            ended = dataclasses.replace(demo.steps[-1], action="")
            dreams.append(
                Trajectory(f"{demo.id}/{name}", demo.task_id, demo.goal, "dream", [*steps, ended], metadata=metadata)
            )
    return dreams


def start_state_of(dream: Trajectory) -> StartState:
    """The page a dream started on, as a start state (its recorded first page and history)."""
    start = dream.metadata.get("options", {}).get("start_state", {})
    return StartState.from_dict({**start, "axtree": dream.steps[0].axtree})


def group_key(row: dict[str, Any], dream: Trajectory) -> str:
    """The GSPO group of a dream: the dreams of one update and call from one start page (a demonstration's
    two dreams, its whole and its cut, are one group)."""
    start = dream.metadata.get("options", {}).get("start_state", {})
    parts = [row["run"], dream.metadata.get("global_step"), dream.metadata.get("call"), dream.task_id]
    parts += [start.get("task_seed"), start.get("step_index"), start.get("trajectory_id")]
    return json.dumps(parts)


#: Guards that change only how a finished dream is judged, not the pages the world model draws.
JUDGE_ONLY_FIELDS = frozenset({"judge_votes", "judge_vote_temperature", "group_judging"})


def redream_all(
    dreams: Sequence[Trajectory], guards: dict[str, Any], models: dict[str, Any], seed: int, keep: list | None = None
) -> list[dict[str, Any]]:
    """Dream every dream's recorded actions again from its start page with these reward guards; what the env gave.

    All dreams are stepped together (:class:`~dynaweb_env.envs.dream.DreamDynamics`: one batched world-model
    call and one judge call per step). A dream whose actions run out before the world model ends it is judged
    then (``finish``), as a dream cut at its length is. With group-relative judging the finished dreams of each
    group (:func:`group_key`) are then scored together, in one more call. ``keep``: a list that receives the
    finished episodes and their ``(reward, info)``, for :func:`rejudge_all`.
    """
    actions = [[step.action for step in dream.steps if step.action] for dream in dreams]
    longest = max(map(len, actions), default=1)
    env = gym.make("DreamWeb-v0", dream_length=longest + 1, reward_guards=guards, **models).unwrapped
    dynamics, rng = env.dynamics, np.random.default_rng(seed)
    episodes = [DreamEpisode.begin(start_state_of(dream)) for dream in dreams]
    ends: list[tuple[float, dict[str, Any]] | None] = [None] * len(dreams)
    for step in range(longest):
        live = [i for i in range(len(dreams)) if ends[i] is None and step < len(actions[i])]
        if not live:
            break
        results = dynamics.step([episodes[i] for i in live], [actions[i][step] for i in live], int(rng.integers(2**31)))
        for index, (_, reward, terminated, truncated, info) in zip(live, results, strict=True):
            if terminated or truncated:
                ends[index] = (reward, info)
    running = [i for i in range(len(dreams)) if ends[i] is None]
    finished = dynamics.finish([episodes[i] for i in running], seed=int(rng.integers(2**31))) if running else []
    for index, outcome in zip(running, finished, strict=True):
        ends[index] = outcome
    if dynamics.guards.group_judging != "off":
        ends = judge_in_groups(dynamics, dreams, ends, int(rng.integers(2**31)))
    if keep is not None:
        keep[:] = list(zip(episodes, ends, strict=True))
    return outcomes(ends)


def rejudge_all(
    dreams: Sequence[Trajectory], base: list, guards: dict[str, Any], models: dict[str, Any], seed: int
) -> list[dict[str, Any]]:
    """A judge-only guard setting (:data:`JUDGE_ONLY_FIELDS`) on the pages of an unguarded re-dream (``base``).

    Exact: such guards act only once a dream has ended, and with the same seed the world model draws the same
    pages with or without them, so only the judge is called again (one batched call). Dreams the base run did
    not judge (no valid action, a backend failure) keep its outcome.
    """
    env = gym.make("DreamWeb-v0", reward_guards=guards, **models).unwrapped
    dynamics = env.dynamics
    judged = [index for index, (_, (_, info)) in enumerate(base) if "judge_reward" in info]
    ends = [end for _, end in base]
    if dynamics.guards.group_judging != "off":
        for index in judged:
            request = dataclasses.asdict(dynamics.judge_request(base[index][0]))
            ends[index] = (0.0, {**ends[index][1], "judge_pending": True, "judge_request": request})
        return outcomes(judge_in_groups(dynamics, dreams, ends, seed))
    verdicts = dynamics.judge.judge([dynamics.judge_request(base[index][0]) for index in judged], seed=seed)
    for index, verdict in zip(judged, verdicts, strict=True):
        info = {key: value for key, value in ends[index][1].items() if key not in ("judge_abstained", "judge_votes")}
        ends[index] = (dynamics.guards.reward_of(verdict, 0, info), info)
    return outcomes(ends)


def outcomes(ends: Sequence[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the benchmark records of each re-dream's end."""
    flags = ("judge_abstained", "termination_gated", "world_model_uncertain_steps", "backend_error", "judge_reward")
    flags += ("group_score", "group_rank", "group_size", "judge_error")
    return [
        {"reward": float(reward), "end_reason": info.get("end_reason"), **{k: info[k] for k in flags if k in info}}
        for reward, info in ends
    ]


def judge_in_groups(
    dynamics: Any, dreams: Sequence[Trajectory], ends: list[Any], seed: int
) -> list[tuple[float, dict[str, Any]]]:
    """Group-relative rewards of finished re-dreams, one judge call for all groups."""
    groups: dict[str, list[int]] = {}
    for index, dream in enumerate(dreams):
        groups.setdefault(dream.metadata["group"], []).append(index)
    scored = dynamics.judge_groups([[ends[i][1] for i in members] for members in groups.values()], seed=seed)
    ends = list(ends)
    for members, outcomes in zip(groups.values(), scored, strict=True):
        for index, (reward, update) in zip(members, outcomes, strict=True):
            ends[index] = (reward, {**ends[index][1], **update})
    return ends


def ordering(rows: Sequence[dict[str, Any]], reward: str) -> dict[str, Any]:
    """Within each GSPO group, the pairs of dreams whose real rewards differ: how often ``reward`` orders them
    as the real rewards do (what a group-normalised advantage needs), ties (no signal) and the wrong way."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("group") is not None:  # rows of another record (no group known) are not paired
            groups.setdefault(row["group"], []).append(row)
    right = tied = wrong = 0
    for members in groups.values():
        for a in members:
            for b in members:
                if a["real_reward"] > b["real_reward"]:
                    right += a[reward] > b[reward]
                    tied += a[reward] == b[reward]
                    wrong += a[reward] < b[reward]
    pairs = right + tied + wrong
    return {"pairs": pairs, "ordered_right": right, "tied": tied, "ordered_wrong": wrong,
            "ordering_accuracy": right / pairs if pairs else None}  # fmt: skip


def reward_gap(rows: Sequence[dict[str, Any]], reward: str) -> dict[str, Any]:
    """Mean reward of dreams that really succeed and of those that really fail (graded rewards included)."""
    wins = [row[reward] for row in rows if row["real_reward"] >= 1]
    losses = [row[reward] for row in rows if row["real_reward"] < 1]
    win = sum(wins) / len(wins) if wins else None
    loss = sum(losses) / len(losses) if losses else None
    gap = None if win is None or loss is None else win - loss
    return {"mean_reward_real_success": win, "mean_reward_real_failure": loss, "reward_gap": gap}


def guard_summary(rows: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    """One guard setting's comparison with the real rewards, and how often its guards acted.

    A graded reward (a discounted or group-relative one) counts as judged SUCCESS from 0.5 on.
    """
    outcomes = [row["guards"][name] for row in rows if row["replayed"]]
    flat = [row | {"guarded_reward": row["guards"][name]["reward"]} for row in rows if row["replayed"]]
    return {
        **compare(flat, "guarded_reward", threshold=0.5),
        **reward_gap(flat, "guarded_reward"),
        **ordering(flat, "guarded_reward"),
        "abstained": sum(bool(outcome.get("judge_abstained")) for outcome in outcomes),
        "cut_uncertain": sum(outcome["end_reason"] == "uncertain" for outcome in outcomes),
        "discounted_or_withheld": sum(bool(outcome.get("world_model_uncertain_steps")) for outcome in outcomes),
        "gated": sum(bool(outcome.get("termination_gated")) for outcome in outcomes),
        "group_judge_errors": sum(bool(outcome.get("judge_error")) for outcome in outcomes if "group_score" in outcome),
    }


def uncertainty_modes(rows: Sequence[dict[str, Any]], name: str, discount: float) -> dict[str, Any]:
    """``cut``, ``no_reward`` and ``discount`` from one ``uncertainty="discount"`` re-dream of each dream.

    Exact, not an estimate: with the same seed the three modes sample the same pages up to a dream's first
    disagreeing step, and both ``cut`` and ``no_reward`` then give reward 0; ``discount`` gives the verdict of the
    whole dream times ``discount`` per disagreeing step. (In training they differ otherwise: a cut dream ends at
    its first disagreement, so its later actions are neither dreamed nor trained on.)
    """
    report = {}
    for mode in ("cut", "no_reward", "discount"):
        flat = []
        for row in rows:
            outcome = row["guards"][name]
            steps, verdict = outcome.get("world_model_uncertain_steps", 0), outcome.get("judge_reward", 0.0)
            reward = verdict * discount**steps if mode == "discount" else (0.0 if steps else verdict)
            flat.append(row | {"mode_reward": reward})
        summary = compare(flat, "mode_reward", threshold=0.5)
        report[mode] = {**summary, **reward_gap(flat, "mode_reward"), **ordering(flat, "mode_reward")}
    return report


def run(
    dreams: Sequence[tuple[str, Trajectory]],
    max_steps: int,
    guards: dict[str, dict[str, Any]] | None = None,
    models: dict[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Replay every ``(run, dream)``, then re-dream the replayed ones under each guard setting (all dreams of a
    setting stepped together); per-run and overall comparisons."""
    env = gym.make("RealWeb-v0", max_steps=max_steps)
    rows = []
    try:
        for run_name, dream in tqdm(dreams, desc="replaying dreams", unit="dream"):
            row = {
                "run": run_name,
                "id": dream.id,
                "global_step": dream.metadata.get("global_step"),
                "task_id": dream.task_id,
                "dream_actions": [step.action for step in dream.steps if step.action],
                "dream_reward": None if dream.metadata.get("demonstration") else float(dream.reward),
                "judge_reasoning": dream.metadata.get("judge_reasoning", ""),
            }
            row["group"] = group_key(row, dream)
            row |= replay(env, dream)
            rows.append(row)
    finally:
        env.close()
    replayed = [(row, dream) for row, (_, dream) in zip(rows, dreams, strict=True) if row["replayed"]]
    marked = [dataclasses.replace(d, metadata={**d.metadata, "group": row["group"]}) for row, d in replayed]
    base: list = []
    failed: dict[str, str] = {}
    # The unguarded re-dream first: every judge-only setting reuses its pages (rejudge_all).
    ordered = sorted((guards or {}).items(), key=lambda item: bool(item[1]))
    for name, setting in tqdm(ordered, desc="re-dreaming under each guard setting", unit="setting"):
        try:
            if base and set(setting) <= JUDGE_ONLY_FIELDS:
                results = rejudge_all(marked, base, setting, models or {}, seed)
            else:
                results = redream_all(marked, setting, models or {}, seed, keep=None if setting else base)
        except Exception as error:  # one failing setting must not lose the hours the others took
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"dream_rewards: guards {name} failed: {failed[name]}", file=sys.stderr)
            continue
        for (row, _), outcome in zip(replayed, results, strict=True):
            row.setdefault("guards", {})[name] = outcome
    runs = sorted({row["run"] for row in rows})
    tasks = sorted({row["task_id"] for row in rows})
    report = {
        "overall": compare(rows),
        "per_run": {name: compare([row for row in rows if row["run"] == name]) for name in runs},
        "per_task": {task: compare([row for row in rows if row["task_id"] == task]) for task in tasks},
    }
    if guards:
        redreamed = [row for row in rows if "guards" in row]
        report["guards"] = {
            name: {"reward_guards": setting, **guard_summary(redreamed, name)}
            for name, setting in guards.items()
            if name not in failed
        }
        report["guards_failed"] = failed
        for name, setting in guards.items():
            parsed = RewardGuards.parse(setting)
            if name not in failed and parsed.world_model_samples > 1 and parsed.uncertainty == "discount":
                modes = uncertainty_modes(redreamed, name, parsed.uncertainty_discount)
                report["guards"][name]["uncertainty_modes"] = modes
        report["guard_models"] = models
    return report | {"dreams": rows}


def parse_guards(values: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--guards`` values (``none`` or JSON objects of reward_guards) by name; ``ValueError`` for a bad one."""
    parsed = {}
    for value in values:
        setting = {} if value == "none" else json.loads(value)
        RewardGuards.parse(setting)  # a clear error now, not after an hour of replays
        parsed["none" if not setting else json.dumps(setting, sort_keys=True, separators=(",", ":"))] = setting
    return parsed


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
    parser.add_argument(
        "--guards", nargs="+", default=[], help="re-dream each dream with these reward_guards (JSON, or 'none')"
    )
    parser.add_argument("--demonstrations", type=int, default=0, help="add dreams from N held-out demonstrations")
    parser.add_argument(
        "--demonstrations-file",
        type=Path,
        default=None,
        help="take --demonstrations from this trajectory JSONL (its successful test-split seeds), not the shipped ones",
    )
    parser.add_argument(
        "--world-model-max-new-tokens",
        type=int,
        default=384,
        help="token budget of a re-dreamed page (default 384, as dynaweb-train's cpu-small preset)",
    )
    parser.add_argument("--world-model", default=DEFAULT_WORLD_MODELS["tree"], help="world model of re-dreams")
    parser.add_argument("--judge", default=TRAINED_JUDGE, help="judge of re-dreams")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of re-dreams")
    args = parser.parse_args(argv)
    try:
        guards = parse_guards(args.guards)
    except ValueError as error:
        print(f"dream_rewards: error: --guards: {error}", file=sys.stderr)
        return 2
    default = sorted((ROOT / "runs" / "claims" / "shared").glob("*/episodes.jsonl"))
    paths = args.episodes or ([] if args.demonstrations else default)
    missing = [path for path in paths if not path.is_file()]
    if (not paths and not args.demonstrations) or missing:
        print(
            f"dream_rewards: error: no episode log at {missing or 'runs/claims/shared/*/episodes.jsonl'}",
            file=sys.stderr,
        )
        return 2
    dreams = [(rel(path.parent), dream) for path in paths for dream in dreams_of(path)]
    demos = demonstration_dreams(args.demonstrations, args.demonstrations_file)
    dreams += [("demonstrations", dream) for dream in demos]
    models = {"world_model": args.world_model, "judge": args.judge, "max_new_tokens": args.world_model_max_new_tokens}
    report = run(dreams, args.max_steps, guards, models, args.seed)
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
    print(f"{'re-dreamed under reward guards':44} {'dreams':>6} {'agree':>6} {'judged S->real S':>17} "
          f"{'real S seen':>11} {'gap':>5} {'order':>5}")  # fmt: skip
    rows = [(name, summary) for name, summary in report.get("guards", {}).items()]
    for name, summary in list(rows):
        rows += [(f"{name} as {mode}", modes) for mode, modes in summary.get("uncertainty_modes", {}).items()]
    for name, summary in rows:
        print(
            f"{name[-44:]:44} {summary['compared']:>6} {fmt(summary['agreement']):>6} "
            f"{fmt(summary['judge_success_precision']):>17} {fmt(summary['real_success_recall']):>11} "
            f"{fmt(summary['reward_gap']):>5} {fmt(summary['ordering_accuracy']):>5}"
        )
    print(f"dream_rewards: {report['overall']['compared']} dreams compared; {rel(args.output)}")
    return 0


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
