"""A dream on ``tiny-random`` at its default budgets takes seconds, not minutes (issue #49, item 7).

A model with random weights never writes its end-of-text token, so every call spends its whole budget:
at the real models' defaults (768 world-model tokens, 256 judge tokens) one tiny-random dream step took
over two minutes here. ``tiny-random`` now names its own default budget; real models keep theirs.
"""

from __future__ import annotations

import gymnasium as gym

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.envs.dream_episode import generation_budgets
from dynaweb_env.models import DEFAULT_JUDGE, EMBEDDED_MODELS
from dynaweb_env.world_model.judge import DEFAULT_JUDGE_MAX_NEW_TOKENS
from dynaweb_env.world_model.model import DEFAULT_MAX_NEW_TOKENS


def test_budgets_default_to_the_model_s_own() -> None:
    tiny = EMBEDDED_MODELS["tiny-random"].max_new_tokens
    assert tiny is not None and tiny < DEFAULT_JUDGE_MAX_NEW_TOKENS
    assert generation_budgets(None, None, None, None) == (DEFAULT_MAX_NEW_TOKENS, DEFAULT_JUDGE_MAX_NEW_TOKENS)
    assert generation_budgets("smollm2-135m", DEFAULT_JUDGE, None, None) == (768, 256)  # real models: unchanged
    assert generation_budgets("tiny-random", None, None, None) == (tiny, DEFAULT_JUDGE_MAX_NEW_TOKENS)
    assert generation_budgets("ct2:tiny-random", "world_model", None, None) == (tiny, tiny)
    assert generation_budgets("tiny-random", "tiny-random", 40, 30) == (40, 30)  # a budget given is kept


def test_a_tiny_random_dream_uses_its_small_budget() -> None:
    env = gym.make("DreamWeb-v0", world_model="tiny-random", judge="world_model", dream_length=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step("scroll [down]")
    world_model = env.unwrapped.dynamics.world_model
    assert world_model.sampling.max_new_tokens == EMBEDDED_MODELS["tiny-random"].max_new_tokens
    _, _, _, truncated, info = env.step("scroll [up]")
    assert truncated and env.unwrapped.dynamics.judge.sampling.max_new_tokens == world_model.sampling.max_new_tokens
