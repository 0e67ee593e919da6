"""The same seed gives the same dream through every library's own API as through ``gym.make``.

One episode (click-button's recorded page, one click, which ends the dream at ``dream_length=1``; the default
trained judge judges it), played through ``gym.make("DreamWeb-v0")``, TRL's ``environment_factory``, SkyRL-gym,
GEM and the OpenEnv server. The world model (a tiny random one, so a step takes a second) samples its page from
the step's seed, so the predicted changes show whether each host seeded the episode alike; the reward and
``judged`` are the trained judge's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from local_server import free_port

import dynaweb_env  # noqa: F401  (registers the envs)

#: The default judge (the trained one), a tiny random world model.
ENV_KWARGS = {"world_model": "tiny-random", "max_new_tokens": 24, "judge_max_new_tokens": 8, "dream_length": 1}
START = {"task": "miniwob.click-button", "task_seed": 0, "step_index": 0}
SEED = 5
ACTION = "click [13]"

pytestmark = pytest.mark.slow


def _outcome(reward: float, info: dict) -> tuple:
    return float(reward), bool(info["judged"]), info["judge_error"], info["end_reason"]


def _gym(seed: int = SEED) -> tuple[tuple, str]:
    env = gym.make("DreamWeb-v0", **ENV_KWARGS)
    env.reset(seed=seed, options=START)
    _, reward, _, _, info = env.step(ACTION)
    return _outcome(reward, info), info["changes"]


def _trl() -> tuple[tuple, str]:
    from dynaweb_env.integrations.trl import dreamweb_environment_factory

    tools = dreamweb_environment_factory(**ENV_KWARGS)()
    tools.reset(prompt=[], seed=SEED, **START)
    tools.click("13")
    changes = tools._episode.info["changes"]
    return _outcome(tools.get_reward(), tools._episode.info), changes


def _skyrl() -> tuple[tuple, str]:
    skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the skyrl extra")
    import dynaweb_env.integrations.skyrl  # noqa: F401  (registers "dynaweb")

    env = skyrl_gym.make("dynaweb", env_config=ENV_KWARGS, extras={"max_turns": 3, "seed": SEED, **START})
    env.init([])
    output = env.step(ACTION)
    metadata = output["metadata"]
    assert env.get_metrics()["judged"] == float(metadata["judged"]) and output["done"]
    return _outcome(output["reward"], metadata), metadata["changes"]


def _gem() -> tuple[tuple, str]:
    gem = pytest.importorskip("gem", reason="needs the gem extra")
    import dynaweb_env.integrations.gem  # noqa: F401  (registers the ids)

    env = gem.make("dynaweb:DreamWeb-v0", **START, **ENV_KWARGS)
    env.reset(seed=SEED)
    _, reward, _, _, info = env.step(ACTION)
    return _outcome(reward, info), info["changes"]


def _openenv() -> tuple[tuple, str]:
    pytest.importorskip("openenv", reason="needs the openenv extra")
    import httpx

    from dynaweb_env.integrations.openenv import DynaWebClient, WebAction

    port = free_port()
    command = [sys.executable, "-m", "dynaweb_env.integrations.openenv", "--port", str(port), "--max-sessions", "1"]
    command += ["--env-kwargs", json.dumps(ENV_KWARGS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                pytest.fail(f"dynaweb-serve exited: {process.stdout.read()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "dynaweb-serve did not come up in 180 s"
            time.sleep(0.5)
        with DynaWebClient(base_url=url).sync() as client:
            client.reset(seed=SEED, **START)
            result = client.step(WebAction(action=ACTION))
            observation = result.observation
            assert result.done and observation.judged == observation.info["judged"]
            return _outcome(result.reward, observation.info), observation.info["changes"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_same_seed_gives_the_same_reward_through_every_library():
    reference, changes = _gym()
    assert reference[1] and reference[2] == "" and reference[3] == "dream_length"  # the trained judge's verdict
    assert _gym(SEED + 1)[1] != changes  # the seed matters: a host that seeded otherwise would show
    for name, play in (("trl", _trl), ("skyrl", _skyrl), ("gem", _gem), ("openenv", _openenv)):
        assert play() == (reference, changes), name
