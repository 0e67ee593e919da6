"""RealWeb-v0 on several threads in one process (issue #18, item 3).

Each env runs its browser on a thread of its own with its own Playwright, so envs may be driven
from any thread: several at once (thread pools in SkyRL, GEM's vector env, OpenEnv sessions), or
one env from a different thread at each call.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.envs.browser import live_chromium_pids
from dynaweb_env.experts import get_expert


def _episodes(env: gym.Env, count: int, first_seed: int, start: threading.Barrier) -> list[tuple[float, str]]:
    start.wait()  # every thread drives its env at the same time
    results = []
    for seed in range(first_seed, first_seed + count):
        observation, info = env.reset(options={"task": "miniwob.click-button", "task_seed": seed})
        _, action = get_expert("miniwob.click-button").act(observation)
        _, reward, terminated, truncated, info = env.step(action)
        assert terminated and not truncated, info
        results.append((reward, info["error"]))
    return results


def _run_on_threads(num_threads: int, episodes: int) -> None:
    envs = [gym.make("RealWeb-v0", task="miniwob.click-button") for _ in range(num_threads)]
    start = threading.Barrier(num_threads)
    try:
        with ThreadPoolExecutor(num_threads) as pool:
            futures = [pool.submit(_episodes, env, episodes, 100 * i, start) for i, env in enumerate(envs)]
            results = [future.result(timeout=600) for future in futures]
        pids = [env.unwrapped.browser_pids for env in envs]
        assert all(len(p) == 1 for p in pids) and len({p[0] for p in pids}) == num_threads  # a browser each
    finally:
        for env in envs:
            env.close()
    assert results == [[(1.0, "")] * episodes] * num_threads


@pytest.mark.browser
def test_two_envs_on_two_threads(require_browser: None) -> None:
    _run_on_threads(num_threads=2, episodes=2)


@pytest.mark.browser
@pytest.mark.slow
def test_three_envs_on_three_threads_five_episodes_each(require_browser: None) -> None:
    _run_on_threads(num_threads=3, episodes=5)


@pytest.mark.browser
def test_one_env_called_from_a_different_thread_each_time(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button")
    before = set(live_chromium_pids())

    def on_new_thread(function, *args, **kwargs):
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(function, *args, **kwargs).result(timeout=300)

    try:
        observation, _ = on_new_thread(env.reset, options={"task_seed": 7})
        _, action = get_expert("miniwob.click-button").act(observation)
        _, reward, terminated, _, info = on_new_thread(env.step, action)
        assert (reward, terminated, info["error"]) == (1.0, True, "")
        observation, _ = env.reset(options={"task_seed": 8})  # and from the main thread again
        assert observation["goal"].startswith("Click on the")
    finally:
        on_new_thread(env.close)
    assert set(live_chromium_pids()) <= before  # closed from another thread, still no browser left behind


@pytest.mark.browser
def test_a_call_stuck_outside_the_browser_is_abandoned_and_the_env_recovers(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button", step_timeout_s=2.0).unwrapped
    try:
        env.reset(options={"task_seed": 3})
        stuck = env._thread
        release = threading.Event()
        with pytest.raises(TimeoutError, match="no answer from the browser within 2 s"):
            env.run_in_browser(lambda page: release.wait(60))  # busy in Python: killing the browser cannot free it
        assert env._thread is None and env.browser_pids == []
        observation, _ = env.reset(options={"task_seed": 3})  # on a new thread, with a new browser
        assert env._thread is not stuck and observation["goal"].startswith("Click on the")
        release.set()
    finally:
        env.close()
