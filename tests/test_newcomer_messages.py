"""Messages that tell a newcomer what went wrong: a turn budget that cuts every action, an update with no spread."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import AutoTokenizer

from dynaweb_env.models import resolve_model
from dynaweb_trainer.encoding import EpisodeEncoder
from dynaweb_trainer.expert_pool import ExpertPool, load_expert_trajectories
from dynaweb_trainer.metrics import DynaWebProgressCallback


def test_shortest_expert_turn_is_longer_than_a_budget_that_cuts_actions():
    """``--max-turn-tokens 16`` (once the README's way to shorten a run) cuts every shipped expert turn."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"), trust_remote_code=False)
    pool = ExpertPool(load_expert_trajectories(None), max_turns=5)
    shortest = pool.shortest_turn_tokens(EpisodeEncoder(tokenizer))
    assert shortest is not None and 16 < shortest <= 64  # the cpu-small budget (64) fits every expert turn
    assert ExpertPool([], max_turns=5).shortest_turn_tokens(EpisodeEncoder(tokenizer)) is None


class _Bar:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, line: str) -> None:
        self.lines.append(line)


def test_progress_line_says_when_no_group_had_a_reward_spread():
    callback = DynaWebProgressCallback()
    callback.training_bar = _Bar()
    state = SimpleNamespace(is_world_process_zero=True, global_step=1, max_steps=4)
    callback.on_log(None, state, None, logs={"reward": 0.0, "loss": 0.0, "frac_reward_zero_std": 1.0})
    callback.on_log(None, state, None, logs={"reward": 0.5, "loss": 0.1, "frac_reward_zero_std": 0.5})
    flat, spread = callback.training_bar.lines
    assert "no group had a reward spread" in flat and "loss 0" in flat
    assert "spread" not in spread


def test_progress_line_shows_dream_resamples():
    """``--dream-resamples``: the flat groups dreamed again, and those that found a spread, are on the line."""
    callback = DynaWebProgressCallback()
    callback.training_bar = _Bar()
    state = SimpleNamespace(is_world_process_zero=True, global_step=2, max_steps=4)
    logs = {"reward": 0.5, "loss": 0.1, "env/dream_groups_redreamed": 2.0, "env/dream_groups_resampled": 1.0}
    callback.on_log(None, state, None, logs=logs)
    callback.on_log(None, state, None, logs={"reward": 0.5, "loss": 0.1})  # no flat group: nothing re-dreamed
    resampled, plain = callback.training_bar.lines
    assert "flat groups re-dreamed 2 times (1 found a spread)" in resampled
    assert "re-dreamed" not in plain
