"""Reward guards: options that keep a policy from earning dream rewards the real page would not give.

A dream's reward is only as good as the world model that draws its pages and the judge that reads
them. Measured on replayed dreams (``benchmarks/dream_rewards.py``), both err in ways a policy learns
to exploit: the world model declares a half-done form finished and the judge calls it SUCCESS. Each
guard below is an option of ``DreamWeb-v0`` (``reward_guards={...}``); all but the objective check and the judge's
recorded threshold are off by default, and which to turn on is to be chosen by measurement
(``benchmarks/dream_rewards.py --guards ...``, ``benchmarks/default_rewards.py --env-kwargs ...``).

- **Objective check** (``objective_check``, on by default): a SUCCESS whose trajectory left an explicit requirement
  of the objective undone (a quoted text typed nowhere, a checkbox the objective names unchecked, a button, link,
  tab or menu item it names never acted on, a date or list of values it names not on the page, an icon clicked
  outside the row the objective names, an item clicked whose text the objective does not name, a time range
  submitted outside the window it names: :func:`~dynaweb_env.world_model.requirements.unmet_objective`) earns 0,
  with ``info["objective_unmet"]``. On the held-out pages of ``benchmarks/default_rewards.py`` the trained judge
  paid a Submit on an unfilled form on 6 of 24 tasks; the check withholds those. On every shipped real trajectory
  (``python -m benchmarks.objective_check``) it flags 181 of 273 failures and 8 of 2,534 successes.

- **The judge's success threshold** (``judge_threshold``, the judge's recorded one by default): a verdict pays where
  the judge's ``P(SUCCESS)`` reaches the threshold (``TrajectoryJudge(success_threshold=...)``), not only where
  its verdict word says SUCCESS. ``"recorded"`` is the threshold chosen for a trained judge and recorded beside it
  (:func:`~dynaweb_env.models.model_success_threshold`: 0.4 for ``smollm2-135m-judge-dagger``), applied only with
  the objective check, which it was chosen with: on held-out real and dreamed cases (``python
  benchmarks/judge_threshold.py``) it pays more real successes while the check still refuses the wrong actions.
  ``None`` is the verdict word.
- **Judge self-consistency** (``judge_votes=K``): the judge samples ``K`` verdicts and abstains
  unless all agree; an abstention earns reward 0 and ``info["judge_abstained"] = True``, so a
  trainer can also drop the dream.
- **World-model uncertainty, after MBPO's ensembles** (``world_model_samples=K``): every transition
  is sampled ``K`` times in the same batch; the samples *disagree* when their terminal flags differ
  (``disagreement_on="terminal"``) or, with ``"page"``, also when their next URL or tree differ. A
  dream with a disagreeing step is then, by ``uncertainty``: ``"cut"`` (ended there, truncated,
  reward 0, ``end_reason="uncertain"``), ``"no_reward"`` (played on, reward 0) or ``"discount"``
  (reward times ``uncertainty_discount`` per disagreeing step).
- **Gated early termination** (``gate_termination=True``): the world model's terminal flag ends the
  dream only if the judge, asked at that step, says SUCCESS; otherwise the dream goes on from the
  predicted page (``info["termination_gated"] = True``). A ``stop`` always ends the dream.
- **Page consistency** (``consistency="repair"`` or ``"cut"``, :mod:`~dynaweb_env.world_model.consistency`):
  a predicted page on the same URL that renames a control or fills a field no action typed into is a
  world-model error (no real transition of the shipped data does either). ``"repair"`` undoes those changes
  and the dream goes on; ``"cut"`` ends the dream there (truncated, reward 0, ``end_reason="inconsistent"``).
  Either way ``info["world_model_inconsistencies"]`` lists them.
- **Typed text kept** (``keep_typed_text=True``, :func:`~dynaweb_env.world_model.consistency.typed_text_left_out`):
  the world model's commonest miss is a ``type`` it does not draw: the field stays empty, the judge reads an
  unfilled form and a correct dream earns 0. A real page on the same URL always shows what was typed (0
  misses in the 809 typings of the shipped data), so the text is written in: the typed field shows it, masked
  for a password field, and a field that held text keeps it (or extends it) unless an action targeted it.
  ``info["world_model_omissions"]`` lists what was written in. Applied before the consistency check.
- **Group-relative judging, after ART's RULER** (``group_judging="votes"`` or ``"listwise"``,
  :mod:`~dynaweb_env.world_model.group_judge`): a finished dream is not judged alone. It ends with
  reward 0, ``info["judge_pending"] = True`` and its trajectory in ``info["judge_request"]``; the host
  that knows the groups (``dynaweb-train``'s rollout function) then scores the G dreams of each group
  together with one batched call, ``env.judge_groups(...)``, and uses those scores as rewards. ``"votes"``
  scores each dream by its share of ``judge_votes`` SUCCESS votes (for a trained judge); ``"listwise"``
  shows the judge the whole group at once.
- **Progress reward** (``progress_reward=w``, ``0 <= w < 0.5``; issue 52's per-step progress): a judged dream the
  judge did not pay earns ``w`` times its objective progress
  (:func:`~dynaweb_env.world_model.requirements.objective_progress`: the share of the objective's explicit
  requirements its actions and last page meet: quoted texts typed, named boxes checked, named controls acted on;
  none when its last action pressed the objective's final button early), recorded as
  ``info["objective_progress"]``. On a long form the judge pays only the finished page, so every unfinished dream
  of a GSPO group earns 0 and the group has no signal; progress orders them. It stays below 0.5, where a graded
  reward counts as SUCCESS, so a paid SUCCESS always outranks it. A dream a guard cut, or whose
  judge gave no verdict or abstained, earns no progress. Not with ``group_judging``.
- **Malformed pages redrawn** (``world_model_retries=N``, :class:`~dynaweb_env.world_model.WebWorldModel`'s
  ``invalid_retries``): a world-model output that does not parse cleanly (an edit that names no line, a
  malformed edit) is drawn again up to ``N`` times, all redraws of a batch in one call, and the first clean one
  replaces it. Without it the dream goes on from a half-applied or unchanged page.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from ..world_model.group_judge import GROUP_JUDGING_MODES, judge_groups, request_from_dict
from ..world_model.judge import JudgeRequest, JudgeVerdict, TrajectoryJudge, check_success_threshold
from ..world_model.model import WebWorldModel, WorldModelRequest
from ..world_model.parsing import WorldModelPrediction
from ..world_model.requirements import objective_progress

#: ``RewardGuards.judge_threshold``'s default: the threshold recorded beside a trained judge.
RECORDED_THRESHOLD = "recorded"

if TYPE_CHECKING:
    from .dream_episode import DreamEpisode

#: What a dream with a disagreeing world-model step gets (see the module docstring).
UNCERTAINTY_MODES = ("cut", "no_reward", "discount")
#: What a predicted page that breaks page consistency gets (see the module docstring).
CONSISTENCY_MODES = ("off", "repair", "cut")
#: What the world-model samples are compared on.
DISAGREEMENT_SIGNALS = ("terminal", "page")


@dataclass(frozen=True)
class RewardGuards:
    """The reward guards of a dream env (defaults: all off but ``objective_check``).

    Args:
        judge_votes: Judge verdicts per dream (``1``: one greedy verdict). ``K > 1``: abstain unless all agree.
        judge_vote_temperature: Sampling temperature of the judge's votes (> 0).
        world_model_samples: World-model samples per transition (``1``: no uncertainty estimate).
        disagreement_on: ``"terminal"`` (the terminal flags differ) or ``"page"`` (flags, URL or tree differ).
        uncertainty: What a disagreeing step does to its dream: ``"cut"``, ``"no_reward"`` or ``"discount"``.
        uncertainty_discount: The factor per disagreeing step of ``uncertainty="discount"``, in ``[0, 1]``.
        gate_termination: End a dream on the world model's terminal flag only if the judge agrees.
        consistency: ``"off"``, ``"repair"`` or ``"cut"``: what a predicted page that renames a control or fills
            an untyped field gets.
        keep_typed_text: Write into a predicted page the text a ``type`` put there and the world model left out.
        group_judging: ``"off"``, ``"votes"`` (needs ``judge_votes > 1``) or ``"listwise"``: judge the dreams of a
            group together (the host calls ``judge_groups``); not with ``gate_termination``, which needs a
            verdict of one dream at the step it ends.
        world_model_retries: Redraws of a malformed world-model output (``0``: none).
        objective_check: Withhold a SUCCESS that leaves an explicit requirement of the objective undone (default on).
        progress_reward: What an unpaid judged dream earns per unit of objective progress, in ``[0, 0.5)``
            (``0``: nothing).
        judge_threshold: Pay a verdict whose ``P(SUCCESS)`` reaches this, in ``(0, 1)``; ``None``: the verdict word;
            ``"recorded"`` (default): the threshold recorded beside a trained judge, with ``objective_check`` only
            (:func:`judge_threshold_for`).
    """

    judge_votes: int = 1
    judge_vote_temperature: float = 0.7
    world_model_samples: int = 1
    disagreement_on: str = "terminal"
    uncertainty: str = "cut"
    uncertainty_discount: float = 0.5
    gate_termination: bool = False
    consistency: str = "off"
    keep_typed_text: bool = False
    group_judging: str = "off"
    world_model_retries: int = 0
    objective_check: bool = True
    progress_reward: float = 0.0
    judge_threshold: float | str | None = RECORDED_THRESHOLD

    def __post_init__(self) -> None:
        for name in ("judge_votes", "world_model_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"reward_guards.{name} must be a positive integer, got {value!r}")
        retries = self.world_model_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"reward_guards.world_model_retries must be an integer >= 0, got {retries!r}")
        if not isinstance(self.judge_vote_temperature, (int, float)) or not self.judge_vote_temperature > 0:
            raise ValueError(f"reward_guards.judge_vote_temperature must be > 0, got {self.judge_vote_temperature!r}")
        if self.disagreement_on not in DISAGREEMENT_SIGNALS:
            raise ValueError(
                f"reward_guards.disagreement_on must be one of {DISAGREEMENT_SIGNALS}, got {self.disagreement_on!r}"
            )
        if self.uncertainty not in UNCERTAINTY_MODES:
            raise ValueError(f"reward_guards.uncertainty must be one of {UNCERTAINTY_MODES}, got {self.uncertainty!r}")
        if not isinstance(self.uncertainty_discount, (int, float)) or not 0 <= self.uncertainty_discount <= 1:
            raise ValueError(f"reward_guards.uncertainty_discount must be in [0, 1], got {self.uncertainty_discount!r}")
        if not isinstance(self.gate_termination, bool):
            raise ValueError(f"reward_guards.gate_termination must be a bool, got {self.gate_termination!r}")
        if not isinstance(self.objective_check, bool):
            raise ValueError(f"reward_guards.objective_check must be a bool, got {self.objective_check!r}")
        if not isinstance(self.keep_typed_text, bool):
            raise ValueError(f"reward_guards.keep_typed_text must be a bool, got {self.keep_typed_text!r}")
        if self.consistency not in CONSISTENCY_MODES:
            raise ValueError(f"reward_guards.consistency must be one of {CONSISTENCY_MODES}, got {self.consistency!r}")
        weight = self.progress_reward
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < 0.5:
            raise ValueError(
                f"reward_guards.progress_reward must be in [0, 0.5) (a paid SUCCESS must outrank it), got {weight!r}"
            )
        check_success_threshold(self.judge_threshold, "reward_guards.judge_threshold", also=RECORDED_THRESHOLD)
        self._check_group_judging()

    def _check_group_judging(self) -> None:
        if self.group_judging not in GROUP_JUDGING_MODES:
            raise ValueError(
                f"reward_guards.group_judging must be one of {GROUP_JUDGING_MODES}, got {self.group_judging!r}"
            )
        if self.group_judging == "votes" and self.judge_votes < 2:
            raise ValueError("reward_guards.group_judging='votes' scores dreams by their votes: set judge_votes >= 2")
        if self.group_judging == "listwise" and self.judge_votes > 1:
            raise ValueError("reward_guards.group_judging='listwise' samples one judgement per group: judge_votes=1")
        if self.group_judging != "off" and self.gate_termination:
            raise ValueError("reward_guards.group_judging and gate_termination cannot be combined")
        if self.group_judging != "off" and self.progress_reward:
            raise ValueError("reward_guards.group_judging and progress_reward cannot be combined")

    @classmethod
    def parse(cls, value: RewardGuards | dict[str, Any] | None) -> RewardGuards:
        """A :class:`RewardGuards` from itself, a dict of its fields (``gym.make`` kwargs) or ``None`` (defaults).

        Raises:
            ValueError: For an unknown field or a value out of range.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"reward_guards must be a dict or RewardGuards, got {type(value).__name__}")
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown reward_guards option(s) {unknown}; known: {sorted(known)}")
        return cls(**value)

    @property
    def active(self) -> list[str]:
        """The names of the guards that are on (``[]``: the paper's dream)."""
        on = []
        if self.judge_votes > 1:
            on.append("judge_votes")
        if self.world_model_samples > 1:
            on.append("world_model_samples")
        if self.gate_termination:
            on.append("gate_termination")
        if self.consistency != "off":
            on.append("consistency")
        if self.keep_typed_text:
            on.append("keep_typed_text")
        if self.group_judging != "off":
            on.append("group_judging")
        if self.objective_check:
            on.append("objective_check")
        if self.progress_reward:
            on.append("progress_reward")
        return on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def samples_disagree(self, samples: Sequence[WorldModelPrediction]) -> bool:
        """Whether the world-model samples of one transition disagree, by :attr:`disagreement_on`."""
        if len({sample.terminal for sample in samples}) > 1:
            return True
        if self.disagreement_on == "page":
            return len({(sample.url, sample.axtree.strip()) for sample in samples}) > 1
        return False

    def reward_of(
        self, verdict: JudgeVerdict, uncertain_steps: int, info: dict[str, Any], request: JudgeRequest | None = None
    ) -> float:
        """A judged dream's reward under the guards; its verdict (and votes, uncertain steps) go into ``info``.

        A judge output without a readable verdict (no ``VERDICT`` line, the token limit hit) is no verdict: the
        reward is 0, ``info["judged"]`` is ``False`` and ``info["judge_error"]`` says why. ``request`` (what the
        judge read) is needed for ``progress_reward``.
        """
        # judge_reward: the verdict before any guard, so a record shows what each guard changed.
        info.update(judge_reasoning=verdict.reasoning, judge_error=verdict.error or "", judge_reward=verdict.reward)
        info["judged"] = verdict.error is None
        if verdict.votes:
            info.update(judge_abstained=verdict.abstained, judge_votes=list(verdict.votes))
        if verdict.unmet:
            info["objective_unmet"] = list(verdict.unmet)
        if uncertain_steps:
            info["world_model_uncertain_steps"] = uncertain_steps
        reward = verdict.reward
        unpaid = verdict.error is None and not verdict.abstained and reward < 0.5
        if self.progress_reward and request is not None and unpaid:
            progress = request_progress(request)
            info["objective_progress"] = progress
            reward = max(reward, self.progress_reward * (progress or 0.0))
        return self.uncertain_reward(reward, uncertain_steps)

    def uncertain_reward(self, reward: float, uncertain_steps: int) -> float:
        """The reward of a finished dream with ``uncertain_steps`` disagreeing steps (``cut`` dreams never get here)."""
        if uncertain_steps == 0:
            return reward
        if self.uncertainty == "no_reward":
            return 0.0
        return reward * self.uncertainty_discount**uncertain_steps


def request_progress(request: JudgeRequest) -> float | None:
    """The objective progress of what a judge reads (:func:`~dynaweb_env.world_model.requirements.objective_progress`
    of its actions, their targets and its last page; ``None``: the objective makes nothing explicit)."""
    actions = [step.action for step in request.steps]
    targets = [step.target for step in request.steps]
    return objective_progress(request.goal, actions, targets, request.final_axtree, request.last_action_axtree)


def predict_with_disagreement(
    world_model: WebWorldModel | None, guards: RewardGuards, requests: Sequence[WorldModelRequest], seed: int | None
) -> tuple[list[WorldModelPrediction], list[bool]]:
    """Each request's prediction, and whether its ``guards.world_model_samples`` samples disagreed (one call;
    none, and no ``world_model`` needed, without requests)."""
    if not requests or world_model is None:
        return [], []
    if guards.world_model_samples == 1:
        return world_model.predict(requests, seed=seed), [False] * len(requests)
    samples = world_model.predict_samples(requests, guards.world_model_samples, seed=seed)
    return [group[0] for group in samples], [guards.samples_disagree(group) for group in samples]


def gate_termination(
    episodes: Sequence[DreamEpisode],
    gated: dict[int, float],
    terminated: list[bool],
    truncated: list[bool],
    infos: list[dict[str, Any]],
    dream_length: int,
    rewards: list[float] | None = None,
) -> None:
    """Gated early termination: a page the world model declared final ends the dream only if judged SUCCESS.

    Otherwise the dream goes on from that page with reward 0 for the step (or, at ``dream_length``, ends
    truncated with the reward the guards gave that verdict: 0, or its ``progress_reward``). ``gated`` maps each
    episode the world model ended (the gate is on) to the judge's verdict on it; ``terminated``, ``truncated``,
    ``infos``, ``rewards`` and the episodes are updated in place.
    """
    for index, verdict in gated.items():
        if not terminated[index] or verdict >= 0.5:
            continue  # the judge failed (already truncated) or agreed: the dream ends as the world model said
        info, episode = infos[index], episodes[index]
        info["termination_gated"] = True
        terminated[index] = False
        if episode.num_steps >= dream_length:
            truncated[index], info["end_reason"] = True, "dream_length"
            episode.verdict = (rewards[index] if rewards else 0.0, dict(info))  # what finish() gives again
            continue
        episode.done, episode.verdict, info["judged"] = False, None, False
        if rewards:
            rewards[index] = 0.0  # a dream that goes on is paid when it ends
        for key in ("end_reason", "judge_reasoning", "judge_error", "judge_abstained", "judge_votes"):
            info.pop(key, None)
        info.pop("objective_progress", None)


def score_groups(
    judge: TrajectoryJudge, guards: RewardGuards, groups: Sequence[Sequence[dict[str, Any]]], seed: int | None
) -> list[list[tuple[float, dict[str, Any]]]]:
    """Group-relative rewards: the final ``info`` of each group's dreams in, ``(reward, info update)`` out.

    Dreams whose info has no ``judge_pending`` (cut, failed, never acted: already rewarded 0) are left out of
    their group's judgement and keep reward 0. A dream's score is then treated as a verdict would be: the
    world-model uncertainty guard applies to it (``discount``, ``no_reward``). One backend call for all groups.

    Raises:
        GenerationError: If the judge's backend fails (the caller decides: ``dynaweb-train`` keeps reward 0).
    """
    pending = [[info for info in group if info.get("judge_pending")] for group in groups]
    requests = [[request_from_dict(info["judge_request"]) for info in group] for group in pending]
    scored = iter(judge_groups(judge, requests, guards.group_judging, seed=seed))
    outcomes = []
    for group, waiting in zip(groups, pending, strict=True):
        scores = next(scored)
        by_id = {id(info): index for index, info in enumerate(waiting)}
        results = []
        for info in group:
            if id(info) not in by_id:
                results.append((0.0, {}))
                continue
            index = by_id[id(info)]
            score = scores.scores[index]
            update = {
                "judge_pending": False,
                "judged": scores.error is None,  # an unreadable group judgement is no verdict
                "group_score": score,
                "group_rank": scores.ranks[index],
                "group_size": len(waiting),
                "judge_error": scores.error or "",
                "judge_reasoning": f"group-relative ({guards.group_judging}): score {score:.2f}, "
                f"rank {scores.ranks[index]} of {len(waiting)}",
            }
            results.append((guards.uncertain_reward(score, info.get("world_model_uncertain_steps", 0)), update))
        outcomes.append(results)
    return outcomes


def with_retries(world_model: WebWorldModel, guards: RewardGuards) -> WebWorldModel:
    """A ready world model as given, or (``guards.world_model_retries > 0``) a copy redrawing that many times."""
    if guards.world_model_retries == 0:
        return world_model
    redrawing = copy.copy(world_model)
    redrawing.invalid_retries = guards.world_model_retries
    return redrawing


def judge_threshold_for(guards: RewardGuards, judge_spec: Any) -> float | None:
    """The success threshold a judge built from ``judge_spec`` applies under ``guards``: ``judge_threshold`` when a
    number or ``None``; for ``"recorded"``, the one recorded beside the judge
    (:func:`~dynaweb_env.models.model_success_threshold`) when ``objective_check`` is on, else ``None``."""
    if guards.judge_threshold != RECORDED_THRESHOLD:
        return guards.judge_threshold  # type: ignore[return-value]
    from ..models import model_success_threshold

    return model_success_threshold(judge_spec) if guards.objective_check else None


def with_votes(judge: TrajectoryJudge, guards: RewardGuards) -> TrajectoryJudge:
    """A ready judge as given, or a copy voting ``guards.judge_votes`` times (when > 1), checking the objective as
    ``guards.objective_check`` says and (unless ``"recorded"``: the judge's own) at ``guards.judge_threshold``."""
    threshold = judge.success_threshold if guards.judge_threshold == RECORDED_THRESHOLD else guards.judge_threshold
    same = judge.objective_check == guards.objective_check and judge.success_threshold == threshold
    if guards.judge_votes == 1 and same:
        return judge
    voting = copy.copy(judge)
    if guards.judge_votes > 1:
        voting.votes, voting.vote_temperature = guards.judge_votes, guards.judge_vote_temperature
    voting.objective_check = guards.objective_check
    voting.success_threshold = threshold  # type: ignore[assignment]
    return voting


__all__ = [
    "DISAGREEMENT_SIGNALS",
    "UNCERTAINTY_MODES",
    "RECORDED_THRESHOLD",
    "RewardGuards",
    "judge_threshold_for",
    "gate_termination",
    "predict_with_disagreement",
    "request_progress",
    "score_groups",
    "with_retries",
    "with_votes",
]
