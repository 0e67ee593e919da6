"""Planning with the world model at test time: ``dynaweb eval --plan K --plan-depth d`` (after WebDreamer).

DynaWeb trains its policy in the world model's dreams; :class:`PlanningPolicy` uses the same dreams to *act*.
It wraps any :class:`~dynaweb_trainer.policy.Policy`. At each real step, for every live episode at once:

1. **Propose.** The policy's own answer (decoded as the evaluation decodes it) is candidate 0; ``K - 1`` more
   are sampled at ``proposal_temperature``. Candidates are deduplicated by their parsed action (two responses
   that click ``[13]`` are one candidate); an unreadable sampled one is dropped.
2. **Dream.** Each candidate's next page is dreamed from the real page
   (:class:`~dynaweb_env.envs.lookahead.Lookahead`: DreamWeb-v0's dynamics), all candidates of all episodes in
   one world-model call. Up to depth ``d`` the policy goes on in each dream (its own answer, one batched call
   per depth) and the world model dreams again (one call per depth).
3. **Score.** The judge reads each imagined trajectory (the real actions so far, then the dreamed ones) in one
   call; the score is its probability of SUCCESS from its log-probs, so two dreams with the same verdict rank.
   A dream that leaves the task's page scores 0.
4. **Act.** The best-scoring candidate runs on the real page; when none scores higher than the policy's own
   answer (all tie), the own answer runs, so planning never overrides the policy without a reason.

A dream that has not ended at depth ``d`` is judged as it stands and scores at least ``progress_weight`` times its
objective progress (:func:`score`): the judge reads an unfinished form as a failure. An ended dream is scored by the
judge alone (capping it by its progress was measured and changes no arm beyond its spread,
``benchmarks/planning_rescore.py``). :attr:`PlanningPolicy.stats` counts the cost per real step.

Example:
    >>> lookahead = Lookahead(depth=1)  # the shipped world model and judge
    >>> planner = PlanningPolicy(loaded.policy, encoder, lookahead, num_candidates=4)
    >>> run_episodes(vector_env, planner, encoder, options, sampling)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dynaweb_env.actions import read_action
from dynaweb_env.envs.lookahead import ImaginedOutcome, Lookahead, start_from_observation
from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_env.observation import action_target

from .encoding import EncodedEpisode, EpisodeEncoder
from .policy import Policy, PolicyTurn

#: The progress weight planning uses by default (:func:`score`). Measured side by side on held-out first pages
#: (``benchmarks/planning_ranking.py``, docs/planning.md): 0.5 lifts the planner's pick on the multi-step suite from
#: 0.80 to 0.90 real success and leaves the small suite's 0.944 as it was.
DEFAULT_PROGRESS_WEIGHT = 0.5


def pick(scores: Sequence[float], own: int, tie_margin: float) -> int:
    """The candidate planning runs: the best-scored one if it scores more than ``tie_margin`` above the policy's own
    answer (index ``own``), else the own answer (ties at the top also go to it)."""
    best = max(range(len(scores)), key=lambda i: (scores[i], i == own))
    return best if best != own and scores[best] > scores[own] + tie_margin else own


@dataclass
class PlanningStats:
    """What planning cost, summed over real steps (see :meth:`to_dict` for the per-step figures)."""

    real_steps: int = 0
    candidates: int = 0
    dreamed_steps: int = 0
    chose_other: int = 0
    all_tied: int = 0
    single_candidate: int = 0
    proposal_calls: int = 0
    proposal_seconds: float = 0.0
    continuation_calls: int = 0
    continuation_seconds: float = 0.0
    planning_seconds: float = 0.0

    def to_dict(self, lookahead: Lookahead | None = None) -> dict[str, Any]:
        """The totals, the lookahead's model costs, and each divided by the real steps (``per_real_step``)."""
        totals: dict[str, Any] = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        if lookahead is not None:
            totals.update(lookahead.cost.to_dict())
        steps = max(self.real_steps, 1)
        per_step = {key: round(value / steps, 3) for key, value in totals.items() if key != "real_steps"}
        per_step["world_model_tokens"] = round(
            (totals.get("world_model_prompt_tokens", 0) + totals.get("world_model_completion_tokens", 0)) / steps, 1
        )
        per_step["judge_tokens"] = round(
            (totals.get("judge_prompt_tokens", 0) + totals.get("judge_completion_tokens", 0)) / steps, 1
        )
        return {**totals, "per_real_step": per_step}


@dataclass
class _Candidate:
    turn: int
    generation: Generation
    action: str
    own: bool
    encoded: EncodedEpisode | None = None
    outcome: ImaginedOutcome | None = None
    dreamed: list[str] = field(default_factory=list)


class PlanningPolicy:
    """A policy that plans each real step in the world model's dreams (see the module docstring).

    Args:
        policy: The policy that proposes candidates and acts in the dreams.
        encoder: The episode encoding of the evaluation (a dream turn is encoded as a real one).
        lookahead: The world model and judge (:class:`~dynaweb_env.envs.lookahead.Lookahead`); its ``depth`` is
            the planning depth ``d``.
        num_candidates: ``K``, most candidates per real step (``>= 2``; fewer remain when samples repeat).
        proposal_temperature: Sampling temperature of the ``K - 1`` extra candidates (``> 0``).
        proposal_top_p: Their nucleus mass.
        tie_margin: A candidate replaces the policy's own answer only if it scores more than this above it.
        progress_weight: What a dream that has not ended earns for its objective progress (:func:`score`); ``0``:
            the judge's probability alone (default :data:`DEFAULT_PROGRESS_WEIGHT`).

    Raises:
        ValueError: If ``num_candidates < 2``, ``proposal_temperature <= 0`` or ``progress_weight`` is outside
            ``[0, 1)``.
    """

    def __init__(
        self,
        policy: Policy,
        encoder: EpisodeEncoder,
        lookahead: Lookahead,
        num_candidates: int = 2,
        proposal_temperature: float = 1.0,
        proposal_top_p: float = 1.0,
        tie_margin: float = 1e-6,
        progress_weight: float = DEFAULT_PROGRESS_WEIGHT,
    ):
        if isinstance(num_candidates, bool) or not isinstance(num_candidates, int) or num_candidates < 2:
            raise ValueError(f"num_candidates must be an integer >= 2 (1 is no planning), got {num_candidates!r}")
        if not proposal_temperature > 0:
            raise ValueError(f"proposal_temperature must be > 0 (greedy samples repeat), got {proposal_temperature}")
        if not 0 <= progress_weight < 1:
            raise ValueError(
                f"progress_weight must be in [0, 1) (an ended success must outrank it), got {progress_weight}"
            )
        self.policy, self.encoder, self.lookahead = policy, encoder, lookahead
        self.progress_weight = progress_weight
        self.num_candidates, self.tie_margin = num_candidates, tie_margin
        self.proposal = SamplingParams(temperature=proposal_temperature, top_p=proposal_top_p)
        self.model_name = f"plan(K={num_candidates},d={lookahead.depth}):{getattr(policy, 'model_name', 'policy')}"
        self.stats = PlanningStats()
        #: One record per planned real step: the episode, the candidates with their scores, and the choice.
        self.plans: list[dict[str, Any]] = []
        self._histories: dict[int, tuple[EncodedEpisode, list[str], list[str]]] = {}
        self._rng = np.random.default_rng(0)

    def act(self, turns: Sequence[PolicyTurn], sampling: SamplingParams) -> list[Generation]:
        """Plan every turn's real step (one proposal call, one world-model call per depth, one judge call)."""
        if not turns:
            return []
        started = time.perf_counter()
        seed = int(self._rng.integers(2**31 - 1)) if sampling.seed is None else int(sampling.seed)
        own = self.policy.act(turns, sampling)
        tick = time.perf_counter()
        proposal = replace(self.proposal, max_new_tokens=sampling.max_new_tokens, seed=seed)
        samples = self.policy.act([turn for turn in turns for _ in range(self.num_candidates - 1)], proposal)
        self.stats.proposal_calls += 1
        self.stats.proposal_seconds += time.perf_counter() - tick
        candidates = self._candidates(turns, own, samples)
        histories = [self._history(turn) for turn in turns]
        self._forget(turns)
        planned = [c for c in candidates if sum(o.turn == c.turn for o in candidates) > 1]
        if planned:
            self._dream(turns, planned, histories, sampling, seed)
        chosen = [self._choose(turn, [c for c in candidates if c.turn == i]) for i, turn in enumerate(turns)]
        for turn, candidate, (_, actions, targets) in zip(turns, chosen, histories, strict=True):
            actions.append(candidate.action)
            targets.append(action_target(candidate.action, turn.observation.get("axtree", "")))
        self.stats.real_steps += len(turns)
        self.stats.planning_seconds += time.perf_counter() - started
        return [candidate.generation for candidate in chosen]

    def _candidates(
        self, turns: Sequence[PolicyTurn], own: Sequence[Generation], samples: Sequence[Generation]
    ) -> list[_Candidate]:
        """Each turn's own answer, then its distinct readable samples (by parsed action), at most ``K`` a turn."""
        candidates: list[_Candidate] = []
        extra = self.num_candidates - 1
        for index, generation in enumerate(own):
            seen = {read_action(generation.text).shown}
            candidates.append(_Candidate(index, generation, read_action(generation.text).shown, True))
            for sample in samples[index * extra : (index + 1) * extra]:
                read = read_action(sample.text)
                if read.action is None or read.shown in seen:
                    continue
                seen.add(read.shown)
                candidates.append(_Candidate(index, sample, read.shown, False))
        self.stats.candidates += len(candidates)
        return candidates

    def _history(self, turn: PolicyTurn) -> tuple[EncodedEpisode, list[str], list[str]]:
        """The real actions taken so far in the turn's episode (kept per episode; decoded if not kept)."""
        kept = self._histories.get(id(turn.encoded))
        if kept is not None and kept[0] is turn.encoded and len(kept[1]) == turn.turn:
            return kept
        actions = [read_action(self.encoder.decode_turn(ids)).shown for ids in turn.encoded.policy_turn_ids()]
        kept = (turn.encoded, actions, [""] * len(actions))
        self._histories[id(turn.encoded)] = kept
        return kept

    def _forget(self, turns: Sequence[PolicyTurn]) -> None:
        """Drop the histories of episodes that are not live any more (the rollout asks for every live one)."""
        live = {id(turn.encoded) for turn in turns}
        for key in [key for key in self._histories if key not in live]:
            del self._histories[key]

    def _dream(
        self,
        turns: Sequence[PolicyTurn],
        candidates: list[_Candidate],
        histories: Sequence[tuple[EncodedEpisode, list[str], list[str]]],
        sampling: SamplingParams,
        seed: int,
    ) -> None:
        """Dream every candidate up to the depth and score it (fills ``candidate.outcome``)."""
        starts = []
        for candidate in candidates:
            turn = turns[candidate.turn]
            _, actions, targets = histories[candidate.turn]
            task = str(turn.info.get("task_id") or turn.options.get("task", ""))
            starts.append(
                start_from_observation(turn.observation, task, actions, targets, turn.options.get("task_seed"))
            )
        episodes = self.lookahead.begin(starts)
        first = self.lookahead.step(episodes, [c.generation.text for c in candidates], seed)
        for candidate, episode in zip(candidates, episodes, strict=True):
            candidate.encoded = copy.deepcopy(turns[candidate.turn].encoded)
            candidate.encoded.add_policy_turn(candidate.generation.completion_ids)
            candidate.dreamed.append(episode.last_action)
        for depth in range(1, self.lookahead.depth):
            live = [index for index, episode in enumerate(episodes) if not episode.done]
            if not live:
                break
            dream_turns = []
            for index in live:
                candidate, observation = candidates[index], episodes[index].observation()
                self.encoder.add_observation(candidate.encoded, observation)
                info = {**turns[candidate.turn].info, **episodes[index].reset_info()}
                dream_turns.append(PolicyTurn(observation, info, candidate.encoded, turns[candidate.turn].options))
            tick = time.perf_counter()
            answers = self.policy.act(dream_turns, replace(sampling, seed=seed + depth))
            self.stats.continuation_calls += 1
            self.stats.continuation_seconds += time.perf_counter() - tick
            texts = [""] * len(episodes)
            for index, answer in zip(live, answers, strict=True):
                texts[index] = answer.text
                candidates[index].encoded.add_policy_turn(answer.completion_ids)  # type: ignore[union-attr]
            self.lookahead.step(episodes, texts, seed + depth)
            for index in live:
                candidates[index].dreamed.append(episodes[index].last_action)
        self.stats.dreamed_steps += sum(episode.num_steps for episode in episodes)
        for candidate, outcome in zip(candidates, self.lookahead.score(episodes, first, seed), strict=True):
            candidate.outcome = outcome

    def _choose(self, turn: PolicyTurn, candidates: list[_Candidate]) -> _Candidate:
        """The best-scoring candidate; the policy's own answer when none scores above it, or when it is alone."""
        scores = [score(candidate.outcome, self.progress_weight) for candidate in candidates]
        best = pick(scores, own=0, tie_margin=self.tie_margin)
        if len(candidates) == 1:
            self.stats.single_candidate += 1
            reason = "single candidate"
        elif best != 0:
            self.stats.chose_other += 1
            reason = "best imagined future"
        else:
            tied = max(scores) - min(scores) <= self.tie_margin
            self.stats.all_tied += tied
            reason = "all tied: the policy's own answer" if tied else "the policy's own answer scored best"
        chosen = candidates[best]
        self.plans.append(
            {
                "task": str(turn.info.get("task_id") or turn.options.get("task", "")),
                "task_seed": turn.options.get("task_seed"),
                "turn": turn.turn,
                "chosen": chosen.action,
                "reason": reason,
                "candidates": [
                    {
                        "action": c.action,
                        "own": c.own,
                        "dream": c.dreamed,
                        **(c.outcome.to_dict() if c.outcome is not None else {}),
                    }
                    for c in candidates
                ],
            }  # fmt: skip
        )
        return chosen

    def pop_plans(self, task: str, task_seed: Any) -> list[dict[str, Any]]:
        """The planned steps of one episode (``task``, ``task_seed``), removed from :attr:`plans`."""
        mine = [plan for plan in self.plans if plan["task"] == task and plan["task_seed"] == task_seed]
        self.plans = [plan for plan in self.plans if not (plan["task"] == task and plan["task_seed"] == task_seed)]
        return mine


def score(outcome: ImaginedOutcome | None, progress_weight: float = 0.0) -> float:
    """A candidate's score: the judge's probability of SUCCESS, else its 0/1 verdict, else ``-1`` (no score).

    With ``progress_weight`` ``w > 0``, a dream that has not ended (it reached the planning depth) scores at least
    ``w`` times its objective progress (:attr:`~dynaweb_env.envs.lookahead.ImaginedOutcome.progress`). The judge
    reads an unfinished form as a failure, so without it every right first step of a multi-step task scores near
    0, and a stray action whose dream ends can outrank it (``benchmarks/planning_ranking.py``, docs/planning.md).
    """
    if outcome is None:
        return -1.0
    if outcome.success_probability is not None:
        value = float(outcome.success_probability)
    else:
        value = -1.0 if outcome.verdict is None else float(outcome.verdict)
    if progress_weight > 0 and value >= 0 and not outcome.ended and outcome.progress is not None:
        value = max(value, progress_weight * outcome.progress)
    return value


__all__ = ["DEFAULT_PROGRESS_WEIGHT", "PlanningPolicy", "PlanningStats", "pick", "score"]
