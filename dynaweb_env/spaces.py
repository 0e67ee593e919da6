"""Observation space shared by every DynaWeb environment.

Both :class:`~dynaweb_env.envs.dream.DreamWebEnv` and :class:`~dynaweb_env.envs.real.RealWebEnv`
expose exactly :func:`web_observation_space`, so a policy cannot tell a dream from the real web by
the shape of what it sees.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

#: Keys of every observation, in order.
OBSERVATION_KEYS: tuple[str, ...] = ("goal", "url", "axtree", "last_action", "last_action_error")

#: Longest text accepted per field (characters). Real accessibility trees of large pages run to
#: tens of thousands of characters; the limit only guards against unbounded growth.
MAX_TEXT_LENGTH = 200_000

#: Longest action string (a whole policy response included) the action space admits.
MAX_ACTION_LENGTH = 4096

# Characters `sample()` draws from: printable ASCII is enough to exercise a policy; `contains()`
# accepts any Unicode string regardless.
_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class WebText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that accepts *any* Unicode string up to ``max_length``.

    Web pages contain arbitrary Unicode (accents, emoji, CJK), which ``spaces.Text`` rejects unless
    every character is in its charset. ``WebText`` keeps ``Text``'s sampling (from a printable-ASCII
    charset) but checks membership by type and length only.

    Example:
        >>> space = WebText(max_length=10)
        >>> space.contains("café ☕")
        True
        >>> space.contains("x" * 11)
        False
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        # Sampling the full 200k length would make `check_env` slow; cap random samples.
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, min(self.max_length, 256) + 1))
            chars = self.np_random.choice(list(self.character_set), size=length)
            return "".join(chars)
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"WebText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, WebText) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable rng, like other spaces


def web_observation_space() -> spaces.Dict:
    """The observation space of every DynaWeb env: a ``Dict`` of :class:`WebText` fields.

    ``goal``: the task query. ``url``: the current page URL. ``axtree``: the page's accessibility
    tree in BrowserGym's flattened text form. ``last_action``: the previous action string ("" at
    reset). ``last_action_error``: why the last action failed ("" if it did not).
    """
    return spaces.Dict({key: WebText() for key in OBSERVATION_KEYS})


def web_action_space() -> WebText:
    """The action space: one action string in the paper's grammar (see :mod:`dynaweb_env.actions`).

    Any string is a member, since malformed actions are part of the game: they cost a step and set
    ``last_action_error`` instead of raising.
    """
    return WebText(max_length=MAX_ACTION_LENGTH)


def fit_observation(observation: dict[str, str]) -> dict[str, str]:
    """``observation`` with every field cut to :data:`MAX_TEXT_LENGTH`, so that it lies in the observation space.

    The tree is cut at a line boundary with a note saying how much was cut (as every tree cut is);
    other fields are cut at the limit.
    """
    from .observation import truncate_axtree  # observation imports this module

    fitted = {key: value[:MAX_TEXT_LENGTH] for key, value in observation.items()}
    fitted["axtree"] = truncate_axtree(observation["axtree"], MAX_TEXT_LENGTH)
    return fitted


__all__ = [
    "OBSERVATION_KEYS",
    "MAX_ACTION_LENGTH",
    "MAX_TEXT_LENGTH",
    "WebText",
    "fit_observation",
    "web_observation_space",
    "web_action_space",
]
