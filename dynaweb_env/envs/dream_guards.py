"""Reward guards: options that keep a policy from earning dream rewards the real page would not give.

A dream's reward is only as good as the world model that draws its pages and the judge that reads
them. Measured on replayed dreams (``benchmarks/dream_rewards.py``), both err in ways a policy learns
to exploit: the world model declares a half-done form finished and the judge calls it SUCCESS. Each
guard below is an option of ``DreamWeb-v0`` (``reward_guards={...}``); all are off by default, and
which to turn on is to be chosen by measurement (``benchmarks/dream_rewards.py --guards ...``).

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
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from ..world_model.judge import JudgeVerdict, TrajectoryJudge
from ..world_model.model import WebWorldModel, WorldModelRequest
from ..world_model.parsing import WorldModelPrediction

if TYPE_CHECKING:
    from .dream_episode import DreamEpisode

#: What a dream with a disagreeing world-model step gets (see the module docstring).
UNCERTAINTY_MODES = ("cut", "no_reward", "discount")
#: What the world-model samples are compared on.
DISAGREEMENT_SIGNALS = ("terminal", "page")


@dataclass(frozen=True)
class RewardGuards:
    """The reward guards of a dream env (defaults: all off, the paper's dream).

    Args:
        judge_votes: Judge verdicts per dream (``1``: one greedy verdict). ``K > 1``: abstain unless all agree.
        judge_vote_temperature: Sampling temperature of the judge's votes (> 0).
        world_model_samples: World-model samples per transition (``1``: no uncertainty estimate).
        disagreement_on: ``"terminal"`` (the terminal flags differ) or ``"page"`` (flags, URL or tree differ).
        uncertainty: What a disagreeing step does to its dream: ``"cut"``, ``"no_reward"`` or ``"discount"``.
        uncertainty_discount: The factor per disagreeing step of ``uncertainty="discount"``, in ``[0, 1]``.
        gate_termination: End a dream on the world model's terminal flag only if the judge agrees.
    """

    judge_votes: int = 1
    judge_vote_temperature: float = 0.7
    world_model_samples: int = 1
    disagreement_on: str = "terminal"
    uncertainty: str = "cut"
    uncertainty_discount: float = 0.5
    gate_termination: bool = False

    def __post_init__(self) -> None:
        for name in ("judge_votes", "world_model_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"reward_guards.{name} must be a positive integer, got {value!r}")
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

    def reward_of(self, verdict: JudgeVerdict, uncertain_steps: int, info: dict[str, Any]) -> float:
        """A judged dream's reward under the guards; its verdict (and votes, uncertain steps) go into ``info``."""
        info.update(judge_reasoning=verdict.reasoning, judge_error=verdict.error or "")
        if verdict.votes:
            info.update(judge_abstained=verdict.abstained, judge_votes=list(verdict.votes))
        if uncertain_steps:
            info["world_model_uncertain_steps"] = uncertain_steps
        return self.uncertain_reward(verdict.reward, uncertain_steps)

    def uncertain_reward(self, reward: float, uncertain_steps: int) -> float:
        """The reward of a finished dream with ``uncertain_steps`` disagreeing steps (``cut`` dreams never get here)."""
        if uncertain_steps == 0:
            return reward
        if self.uncertainty == "no_reward":
            return 0.0
        return reward * self.uncertainty_discount**uncertain_steps


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
) -> None:
    """Gated early termination: a page the world model declared final ends the dream only if judged SUCCESS.

    Otherwise the dream goes on from that page (or, at ``dream_length``, ends truncated with reward 0).
    ``gated`` maps each episode the world model ended (the gate is on) to the judge's verdict on it;
    ``terminated``, ``truncated``, ``infos`` and the episodes are updated in place.
    """
    for index, verdict in gated.items():
        if not terminated[index] or verdict >= 0.5:
            continue  # the judge failed (already truncated) or agreed: the dream ends as the world model said
        info, episode = infos[index], episodes[index]
        info["termination_gated"] = True
        terminated[index] = False
        if episode.num_steps >= dream_length:
            truncated[index], info["end_reason"] = True, "dream_length"
            episode.verdict = (0.0, dict(info))  # what finish() gives again
            continue
        episode.done, episode.verdict, info["judged"] = False, None, False
        for key in ("end_reason", "judge_reasoning", "judge_error", "judge_abstained", "judge_votes"):
            info.pop(key, None)


def with_votes(judge: TrajectoryJudge, guards: RewardGuards) -> TrajectoryJudge:
    """A ready judge as given, or (``guards.judge_votes > 1``) a copy voting that many times."""
    if guards.judge_votes == 1:
        return judge
    voting = copy.copy(judge)
    voting.votes, voting.vote_temperature = guards.judge_votes, guards.judge_vote_temperature
    return voting


__all__ = [
    "DISAGREEMENT_SIGNALS",
    "UNCERTAINTY_MODES",
    "RewardGuards",
    "gate_termination",
    "predict_with_disagreement",
    "with_votes",
]
