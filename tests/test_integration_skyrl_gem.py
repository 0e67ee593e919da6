"""SkyRL-gym and GEM: one real DreamWeb-v0 episode through each library's own ``make``."""

from __future__ import annotations

import pytest

ENV_KWARGS = {"world_model": "tiny-random", "judge": "world_model", "max_new_tokens": 8, "judge_max_new_tokens": 4}


def test_skyrl_make_plays_a_dream_and_judges_it_at_max_turns():
    skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the skyrl extra: pip install 'dynaweb[skyrl]'")
    import dynaweb_env.integrations.skyrl  # noqa: F401  (registers "dynaweb")

    extras = {"max_turns": 2, "extra_info": {"task": "miniwob.click-button", "task_seed": 0}, "seed": 0}
    env = skyrl_gym.make("dynaweb", env_config={**ENV_KWARGS, "dream_length": 5}, extras=extras)
    messages, info = env.init([])
    assert [m["role"] for m in messages] == ["system", "user"] and "OBJECTIVE:" in messages[1]["content"]
    assert info["task_id"] == "miniwob.click-button"
    first = env.step("REASON: the button.\nACTION: click [13]")
    assert first["done"] is False and first["reward"] == 0.0 and first["metadata"]["judged"] is False
    assert "PREVIOUS ACTION: click [13]" in first["observations"][0]["content"]
    last = env.step("click [13]")  # SkyRL's turn cap comes before dream_length: judged now
    assert last["done"] is True and last["observations"] == []
    assert last["metadata"]["end_reason"] == "finish"
    # The random model judged and wrote no verdict: reported as such, in the metadata and in SkyRL's metrics.
    assert last["metadata"]["judged"] is False and last["metadata"]["judge_error"]
    assert env.get_metrics() == {"steps": 2, "reward": 0.0, "judged": 0.0, "judge_error": 1.0}
    env.close()
    with pytest.raises(ValueError, match="max_turns"):
        skyrl_gym.make("dynaweb", env_config=ENV_KWARGS, extras={"max_turns": 0})
    # A user prompt gets the first page appended to its last user turn.
    messages, _ = skyrl_gym.make("dynaweb", env_config=ENV_KWARGS, extras=extras).init(
        [{"role": "user", "content": "Play."}]
    )
    assert len(messages) == 1 and messages[0]["content"].startswith("Play.\n\nOBJECTIVE:")


def test_gem_make_plays_a_dream_and_make_vec_batches_its_threads():
    gem = pytest.importorskip("gem", reason="needs the gem extra: pip install 'dynaweb[gem]'")
    import dynaweb_env.integrations.gem  # noqa: F401  (registers the ids)
    from dynaweb_env.llm.batching import BatchingBackend

    env = gem.make("dynaweb:DreamWeb-v0", max_turns=2, task="miniwob.click-button", **ENV_KWARGS)
    observation, info = env.reset(seed=0)
    assert "You are an AI assistant performing tasks on a web browser" in observation and "OBJECTIVE:" in observation
    action = env.sample_random_action()
    assert action.startswith("click [")
    observation, reward, terminated, truncated, info = env.step(action)
    assert not (terminated or truncated) and info["judged"] is False
    observation, reward, terminated, truncated, info = env.step("click [13]")
    assert truncated and info["end_reason"] == "finish" and "episode has ended" in observation
    assert info["judged"] is False and info["judge_error"]  # the random judge gave no verdict
    env.close()

    # GEM's async vector env steps each env on its own thread: their world-model calls are merged.
    envs = gem.make_vec(["dynaweb:DreamWeb-v0"] * 3, async_mode=True, max_turns=3, **ENV_KWARGS)
    envs.reset(seed=0)
    batcher = envs.envs[0]._episode.env.unwrapped.dynamics.world_model.backend
    assert isinstance(batcher, BatchingBackend)
    batcher.batch_sizes.clear()
    for _ in range(2):
        envs.step(["scroll [down]"] * 3)
    assert sum(batcher.batch_sizes) == 6 and max(batcher.batch_sizes) > 1
