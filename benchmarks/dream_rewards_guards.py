"""Re-dreaming recorded dreams under reward guards, and scoring rewards against the real outcome.

The parts of ``benchmarks/dream_rewards.py`` (see its docstring) that re-dream, re-judge and compare, also used by
``dream_consistency.py`` and ``judge_dream_scores.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.start_states import StartState
from dynaweb_env.envs.dream_episode import DreamEpisode


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
JUDGE_ONLY_FIELDS = frozenset({"judge_votes", "judge_vote_temperature", "group_judging", "progress_reward"})


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
    requests = [dynamics.judge_request(base[index][0]) for index in judged]
    verdicts = dynamics.judge.judge(requests, seed=seed)
    for index, request, verdict in zip(judged, requests, verdicts, strict=True):
        info = {key: value for key, value in ends[index][1].items() if key not in ("judge_abstained", "judge_votes")}
        ends[index] = (dynamics.guards.reward_of(verdict, 0, info, request), info)
    return outcomes(ends)


def outcomes(ends: Sequence[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the benchmark records of each re-dream's end."""
    flags = ("judge_abstained", "termination_gated", "world_model_uncertain_steps", "backend_error", "judge_reward")
    flags += ("group_score", "group_rank", "group_size", "judge_error", "objective_progress")
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


def ordering(rows: Sequence[dict[str, Any]], reward: str, by: str = "real_reward") -> dict[str, Any]:
    """Within each GSPO group, the pairs of dreams whose ``by`` (their real rewards) differ: how often ``reward``
    orders them as ``by`` does (what a group-normalised advantage needs), ties (no signal) and the wrong way."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("group") is not None:  # rows of another record (no group known) are not paired
            groups.setdefault(row["group"], []).append(row)
    right = tied = wrong = 0
    for members in groups.values():
        for a in members:
            for b in members:
                if a[by] > b[by]:
                    right += a[reward] > b[reward]
                    tied += a[reward] == b[reward]
                    wrong += a[reward] < b[reward]
    pairs = right + tied + wrong
    return {"pairs": pairs, "ordered_right": right, "tied": tied, "ordered_wrong": wrong,
            "ordering_accuracy": right / pairs if pairs else None}  # fmt: skip


def progress_ordering(rows: Sequence[dict[str, Any]], reward: str) -> dict[str, Any]:
    """Within each GSPO group, the pairs of dreams that both really fail but got unequally far (their
    ``real_progress`` differs): how often ``reward`` orders them by that progress, ties and the wrong way. A reward
    that pays only the finished task ties them all; ``reward_guards={"progress_reward": w}`` is meant to order them.
    """
    failed = [row for row in rows if row["real_reward"] < 1 and row.get("real_progress") is not None]
    return {f"progress_{key}": value for key, value in ordering(failed, reward, by="real_progress").items()}


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
        **progress_ordering(flat, "guarded_reward"),
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
