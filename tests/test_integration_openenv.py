"""OpenEnv: a real ``dynaweb-serve`` server on 127.0.0.1 and OpenEnv's own clients, DreamWeb-v0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("openenv.core", reason="needs the openenv extra: pip install 'dynaweb[openenv]'")

from local_server import free_port
from openenv.core import GenericEnvClient  # noqa: E402

from dynaweb_env.integrations.openenv import DynaWebClient, DynaWebEnvironment, WebAction, main  # noqa: E402

ENV_KWARGS = {"world_model": "tiny-random", "judge": "world_model", "max_new_tokens": 8, "judge_max_new_tokens": 4,
              "dream_length": 3}  # fmt: skip


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    command = [sys.executable, "-m", "dynaweb_env.integrations.openenv", "--port", str(port), "--max-sessions", "2"]
    command += ["--env-kwargs", json.dumps(ENV_KWARGS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"dynaweb-serve exited: {process.stdout.read()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("dynaweb-serve did not come up in 120 s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_typed_client_plays_a_dream_to_a_judged_end(server_url):
    with DynaWebClient(base_url=server_url).sync() as client:
        result = client.reset(seed=0, task="miniwob.click-button", task_seed=0)
        assert "[13] button" in result.observation.axtree and result.observation.goal
        assert result.done is False and result.reward is None
        steps = 0
        while not result.done:
            result = client.step(WebAction(action="click [13]"))
            steps += 1
        assert steps == 3 and result.observation.truncated and result.reward == 0.0
        assert result.observation.info["end_reason"] == "dream_length"
        # The random judge wrote no verdict: reported as such, not as a verdict of 0.
        assert not result.observation.judged and result.observation.judge_error
        state = client.state()
        assert state.done and not state.judged and state.judge_error and state.step_count == 3
        assert state.task_id == "miniwob.click-button"


def test_generic_client_and_finish_on_demand(server_url):
    with GenericEnvClient(base_url=server_url, message_timeout_s=300).sync() as client:
        client.reset(seed=1, task="miniwob.click-button", task_seed=0)
        result = client.step({"action": "click [13]"})
        assert result.done is False and result.observation["judged"] is False
        result = client.step({"finish": True})  # a host's turn cap: end and judge now
        assert result.done is True and result.observation["judged"] is False and result.observation["judge_error"]
        assert result.observation["info"]["end_reason"] == "finish"


def test_http_step_says_to_use_the_websocket(server_url):
    """OpenEnv's HTTP endpoints build a new env per request: /step answers 409 and names the way that works."""
    response = httpx.post(f"{server_url}/step", json={"action": {"action": "click [13]"}}, timeout=60)
    assert response.status_code == 409, response.text
    assert "WebSocket" in response.json()["detail"] and "DynaWebClient" in response.json()["detail"]


def test_environment_direct_and_bad_arguments():
    env = DynaWebEnvironment("DreamWeb-v0", **ENV_KWARGS)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(WebAction(action="click [13]"))
    observation = env.reset(seed=0, task="miniwob.click-button", task_seed=0, unknown_column="ignored")
    assert observation.done is False and observation.reward is None and observation.axtree
    observation = env.step(WebAction(action="clik [13]"))  # malformed: an error on the page, no model call
    assert "invalid action" in observation.last_action_error and not observation.done
    env.close()
    with pytest.raises(ValueError, match="env_id"):
        DynaWebEnvironment("CartPole-v1")
    with pytest.raises(SystemExit):
        main(["--env-kwargs", "[1, 2]"])
