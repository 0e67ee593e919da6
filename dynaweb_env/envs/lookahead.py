"""Lookahead on a real page: the world model dreams what candidate actions would do, the judge scores the dreams.

The machinery of DreamWeb-v0 (:class:`~dynaweb_env.envs.dream.DreamDynamics`: its action rules, its one batched
world-model call per step) started from the page an agent is on now, not from a recorded start state. It serves
model-based planning (``dynaweb eval --plan K``, :mod:`dynaweb_trainer.planning`: each candidate's imagined future
scored, the best one run) and :class:`~dynaweb_env.envs.lookahead_guard.LookaheadGuard` (a candidate whose dreamed
outcome leaves the task's site or ends the task in failure is refused).

Every dream of a batch advances with one world-model call per step (:meth:`Lookahead.step`) and every dream is
scored with one judge call (:meth:`Lookahead.score`); :attr:`Lookahead.cost` counts both calls' tokens and seconds.
The score is the judge's probability of SUCCESS read from its log-probs
(:func:`~dynaweb_env.world_model.judge.success_probability`), so two dreams with the same verdict still rank.
Each judged dream also carries its objective progress (:attr:`ImaginedOutcome.progress`), which a planner may
weigh for a dream that has not ended (:func:`dynaweb_trainer.planning.score`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..actions import read_action
from ..data.start_states import StartState
from ..llm.base import Conversation, Generation, GenerationError, SamplingParams
from .dream_episode import DreamEpisode, _navigation_refusal
from .dream_guards import request_progress

#: End reasons of a dream that a guard cut, or that left the task: reward 0 without a judge call.
UNJUDGED_ENDS = ("left_task_page", "inconsistent", "uncertain")


@dataclass
class LookaheadCost:
    """What the lookahead's model calls cost so far (summed over calls)."""

    world_model_calls: int = 0
    world_model_prompt_tokens: int = 0
    world_model_completion_tokens: int = 0
    world_model_seconds: float = 0.0
    judge_calls: int = 0
    judge_prompt_tokens: int = 0
    judge_completion_tokens: int = 0
    judge_seconds: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {key: round(value, 3) if isinstance(value, float) else value for key, value in asdict(self).items()}


class _Metered:
    """A generation backend that counts its calls, prompt and completion tokens and seconds into a cost."""

    def __init__(self, backend: Any, cost: LookaheadCost, prefix: str):
        self.backend, self._cost, self._prefix = backend, cost, prefix

    def __getattr__(self, name: str) -> Any:
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)

    def _count(self, generations: list[Generation], started: float) -> list[Generation]:
        cost, prefix = self._cost, self._prefix
        setattr(cost, f"{prefix}_calls", getattr(cost, f"{prefix}_calls") + 1)
        setattr(cost, f"{prefix}_seconds", getattr(cost, f"{prefix}_seconds") + time.perf_counter() - started)
        prompt = sum(len(generation.prompt_ids) for generation in generations)
        completion = sum(len(generation.completion_ids) for generation in generations)
        setattr(cost, f"{prefix}_prompt_tokens", getattr(cost, f"{prefix}_prompt_tokens") + prompt)
        setattr(cost, f"{prefix}_completion_tokens", getattr(cost, f"{prefix}_completion_tokens") + completion)
        return generations

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        started = time.perf_counter()
        return self._count(self.backend.generate(conversations, params), started)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        started = time.perf_counter()
        return self._count(self.backend.generate_from_ids(prompt_ids, params), started)


@dataclass
class ImaginedOutcome:
    """How a dream that started on a real page came out.

    Attributes:
        success_probability: The judge's probability of SUCCESS of the dream (``0.0`` for a dream that left the
            task's page, was cut by a guard or took no valid action: no judge call); ``None`` when no score could
            be had (a backend failed, the judge's output held no verdict, or it gave no log-probs: then the 0/1
            verdict is used if there is one).
        verdict: The judge's 0/1 reward, ``None`` when it gave none (or was not asked).
        ended: The dream ended by itself (``stop``, a page the world model marked final, the task's page left)
            rather than at the lookahead depth.
        end_reason: Why it ended (:data:`~dynaweb_env.envs.END_REASONS`), ``""`` when it reached the depth.
        leaves_site: The first action left the task's page or site, or the world model dreamed it going off-site.
        error: Why the first action was refused in the dream, a backend or judge failure, or ``""``.
        final_url: The dream's last URL.
        steps: Dream steps taken.
        progress: The share of the objective's explicit requirements the dream met by its last page
            (:func:`~dynaweb_env.world_model.requirements.objective_progress`: quoted texts typed, named boxes checked);
            ``None`` when the objective states none there, or the dream was not judged.
    """

    success_probability: float | None
    verdict: float | None
    ended: bool
    end_reason: str
    leaves_site: bool
    error: str
    final_url: str
    steps: int
    progress: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def start_from_observation(
    observation: Mapping[str, str],
    task_id: str,
    history: Sequence[str] = (),
    history_targets: Sequence[str] = (),
    task_seed: int | None = None,
) -> StartState:
    """A dream start state on the page an agent is on now: its observation and the actions that led there."""
    targets = list(history_targets) if len(history_targets) == len(history) else []
    return StartState(
        task_id=task_id, goal=str(observation.get("goal", "")), url=str(observation.get("url", "")),
        axtree=str(observation.get("axtree", "")), trajectory_id="lookahead", step_index=len(history),
        history=list(history), task_seed=task_seed, history_targets=targets,
    )  # fmt: skip


class Lookahead:
    """Dreams forward from real pages with DreamWeb-v0's dynamics, and scores the dreams with its judge.

    Args:
        world_model: The world model (as ``DreamWeb-v0``'s ``world_model``; default: the shipped one).
        judge: The judge (as ``DreamWeb-v0``'s ``judge``; default: the shipped trained judge of ``tasks``).
        depth: Most dream steps from the real page (the planner's ``d``; the guard's 1).
        world_model_temperature: World-model sampling temperature (default ``0``: each candidate's most likely
            next page, so that candidates are compared on the world model's best guess, not on its noise).
        reward_guards: ``DreamWeb-v0``'s reward guards, applied to the dreams (default: its defaults, the objective
            check, but the verdict word for the judge's threshold: candidates rank by ``P(SUCCESS)``, which a
            threshold leaves as it is, and the planner's measurements were made so; ``{"judge_threshold":
            "recorded"}`` applies the judge's). Group judging is not one: the lookahead judges every dream itself,
            in one call.
        max_new_tokens: World-model token budget (default: the model's own).
        judge_max_new_tokens: Judge token budget (default: the model's own).
        tasks: The task ids planned on, which choose the judge when none is named (as ``DreamWeb-v0``'s start
            states do: :func:`~dynaweb_env.models.default_judge`; ``None``: the shipped start states' tasks).

    Raises:
        ValueError: If an argument is out of range or a model spec is malformed (checked now; models load on first
            use).
    """

    def __init__(
        self,
        world_model: Any = None,
        judge: Any = None,
        depth: int = 1,
        world_model_temperature: float = 0.0,
        reward_guards: Any = None,
        max_new_tokens: int | None = None,
        judge_max_new_tokens: int | None = None,
        tasks: Sequence[str] | None = None,
    ):
        from ..world_model.model import DEFAULT_MAX_AXTREE_CHARS
        from .dream_guards import RewardGuards
        from .dream_setup import build_dynamics, generation_budgets

        guards = RewardGuards.parse(reward_guards)
        if reward_guards is None or (isinstance(reward_guards, dict) and "judge_threshold" not in reward_guards):
            guards = dataclasses.replace(guards, judge_threshold=None)
        if guards.group_judging != "off" or guards.gate_termination:
            raise ValueError("the lookahead judges each dream once at its end: no group_judging or gate_termination")
        # Judging is deferred to score(): every dream of the batch is judged in one call, with log-probs.
        deferred = {**guards.to_dict(), "group_judging": "listwise"}
        budgets = generation_budgets(world_model, judge, max_new_tokens, judge_max_new_tokens)
        self.dynamics = build_dynamics(
            world_model, judge, depth, world_model_temperature, *budgets, DEFAULT_MAX_AXTREE_CHARS, None, deferred,
            tasks=tasks,
        )  # fmt: skip
        self.depth = depth
        self.cost = LookaheadCost()
        # Every call of the world model's and the judge's backends is counted; the models still load on first use.
        self.dynamics.wrap_models(self._metered)

    def _metered(self, model: Any, prefix: str) -> Any:
        """The world model or judge (``model``, or built by calling it) with its backend counted into :attr:`cost`."""
        from ..world_model.judge import TrajectoryJudge
        from ..world_model.model import WebWorldModel

        if not isinstance(model, (WebWorldModel, TrajectoryJudge)):
            model = model()
        backend = model.backend.backend if isinstance(model.backend, _Metered) else model.backend
        model.backend = _Metered(backend, self.cost, prefix)  # the world model judging: one backend, counted apart
        return model

    def load(self) -> Lookahead:
        """Load the world model and the judge now (a real page's clock, e.g. MiniWoB++'s, runs while they load)."""
        _ = self.dynamics.world_model, self.dynamics.judge
        return self

    @staticmethod
    def begin(starts: Sequence[StartState]) -> list[DreamEpisode]:
        """One dream per start state."""
        return [DreamEpisode.begin(start) for start in starts]

    def step(self, episodes: Sequence[DreamEpisode], actions: Sequence[str], seed: int | None = None) -> list[dict]:
        """Advance the running dreams by one action each, with one world-model call; ended dreams are left as they
        are (their action is ignored). Returns each dream's step ``info`` (``{}`` for an ended one)."""
        if len(actions) != len(episodes):
            raise ValueError(f"got {len(actions)} actions for {len(episodes)} dreams")
        running = [index for index, episode in enumerate(episodes) if not episode.done]
        infos: list[dict] = [{} for _ in episodes]
        leaving = {i: _leaves_site(actions[i], episodes[i]) for i in running if episodes[i].num_steps == 0}
        if running:
            results = self.dynamics.step([episodes[i] for i in running], [actions[i] for i in running], seed)
            for index, (observation, *_, info) in zip(running, results, strict=True):
                infos[index] = {**info, "last_action_error": observation["last_action_error"]}
                if index in leaving:
                    infos[index]["leaves_site"] = leaving[index] or bool(info.get("task_error"))
        return infos

    def score(
        self, episodes: Sequence[DreamEpisode], first_infos: Sequence[Mapping[str, Any]], seed: int | None = None
    ) -> list[ImaginedOutcome]:
        """Score every dream with one judge call.

        Args:
            episodes: The dreams (ended or not: a dream that reached the depth is judged as it stands).
            first_infos: Each dream's ``info`` of its first step (:meth:`step`), for what its first action did.
            seed: Seeds the judge's call.
        """
        requests, asked = [], []
        outcomes: list[ImaginedOutcome] = []
        for index, (episode, info) in enumerate(zip(episodes, first_infos, strict=True)):
            ended_info = episode.verdict[1] if episode.verdict is not None else {}
            end_reason = str(ended_info.get("end_reason", "")) if episode.done else ""
            if end_reason == "dream_length":
                end_reason = ""
            error = str(ended_info.get("backend_error", "")) or str(info.get("last_action_error", ""))
            leaves = bool(info.get("leaves_site")) or str(info.get("world_model_error", "")).startswith(
                "predicted URL refused"
            )
            outcome = ImaginedOutcome(
                None, None, end_reason not in ("", "backend_error"), end_reason, leaves, error, episode.url,
                episode.num_steps,
            )  # fmt: skip
            outcomes.append(outcome)
            if end_reason == "backend_error":
                continue
            if end_reason in UNJUDGED_ENDS or not episode.steps:
                outcome.success_probability, outcome.verdict = 0.0, 0.0
                continue
            request = self.dynamics.judge_request(episode)
            outcome.progress = request_progress(request)
            requests.append(request)
            asked.append(index)
        if requests:
            try:
                verdicts = self.dynamics.judge.judge(requests, seed=seed)
            except GenerationError as error:
                for index in asked:
                    outcomes[index].error = outcomes[index].error or f"judge: {error}"
                return outcomes
            for index, verdict in zip(asked, verdicts, strict=True):
                if verdict.error:
                    outcomes[index].error = outcomes[index].error or f"judge: {verdict.error}"
                    continue
                outcomes[index].verdict = verdict.reward
                outcomes[index].success_probability = verdict.success_probability
        return outcomes


def _leaves_site(text: str, episode: DreamEpisode) -> bool:
    """Whether ``text``'s action, on the dream's page, is a navigation out of the task: one the real env refuses
    (``goto`` or a link off the site) or one that ends a one-page task (``new_tab``, ``go_back``, ``goto``)."""
    from .dream_episode import leaves_task_page

    action = read_action(text).action
    if action is None:
        return False
    return bool(_navigation_refusal(action, episode) or leaves_task_page(action, episode))


__all__ = ["ImaginedOutcome", "Lookahead", "LookaheadCost", "UNJUDGED_ENDS", "start_from_observation"]
