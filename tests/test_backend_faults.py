"""Backend faults are contained: a real HTTP server on 127.0.0.1 answers 500s, garbage, a JSON list,
non-numeric logprobs, or nothing at all, and neither the OpenAI backend nor a dream step lets a raw
exception out, leaves a dream half-advanced, or waits without bound."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from local_server import serve_on_a_thread

from dynaweb_env.axtree import axtree_element_ids
from dynaweb_env.envs import END_REASONS
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.envs.dream_vector import DreamWebVectorEnv
from dynaweb_env.llm import make_backend, parse_backend_spec
from dynaweb_env.llm.base import (
    BackendResponseError,
    BackendUnavailableError,
    Generation,
    GenerationError,
    SamplingParams,
)
from dynaweb_env.llm.openai_backend import DEFAULT_TIMEOUT, OpenAIBackend
from dynaweb_env.world_model import WebWorldModel

CONVERSATION = [{"role": "user", "content": "hi"}]
PARAMS = SamplingParams(max_new_tokens=8, temperature=0)
WM_OUTPUT = (
    "[Web state changes]\nThe button got the focus.\n"
    "[Next page accessibility tree]\nRootWebArea 'Done'\n\t[99] button 'OK', focused"
)
JUDGE_OUTPUT = "REASONING: the task is done.\nVERDICT: SUCCESS"


def _completion(content: str, logprob: object = -0.5) -> dict:
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    choice["logprobs"] = {"content": [{"token": "x", "logprob": logprob}]}
    return {"id": "x", "object": "chat.completion", "choices": [choice]}


class _ScriptedServer(ThreadingHTTPServer):
    """Answers every POST by the mode of its first path segment: ``/<mode>/v1/chat/completions``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends the "hang" mode's wait when the test is over

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{mode}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: _ScriptedServer

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.path.strip("/").split("/")[0]
        with self.server.lock:
            self.server.hits[mode] = self.server.hits.get(mode, 0) + 1
        replies = {
            "wm": lambda: self._send(200, json.dumps(_completion(WM_OUTPUT)).encode()),
            "judge": lambda: self._send(200, json.dumps(_completion(JUDGE_OUTPUT)).encode()),
            "e500": lambda: self._send(500, b'{"error": "boom"}'),
            "e400": lambda: self._send(400, b'{"error": "bad field"}'),
            "garbage": lambda: self._send(200, b"{not json"),
            "list": lambda: self._send(200, b"[1, 2, 3]"),
            "nochoices": lambda: self._send(200, b'{"choices": []}'),
            "badlogprob": lambda: self._send(200, json.dumps(_completion("hi", logprob="high")).encode()),
            "nantext": lambda: self._send(200, json.dumps(_completion(["not", "text"])).encode()),
        }
        if mode == "hang":
            self.server.release.wait(30)
            return
        replies[mode]()


@pytest.fixture(scope="module")
def server():
    yield from serve_on_a_thread(_ScriptedServer())


def _backend(server: _ScriptedServer, mode: str, **kwargs) -> OpenAIBackend:
    options = {"max_retries": 2, "retry_backoff": 0.01, "timeout": 5.0, **kwargs}
    return OpenAIBackend(server.url(mode), "m", vllm_extensions=False, **options)


# --- the backend: every fault is a typed GenerationError, retried only where a retry can help ----------------


@pytest.mark.parametrize(
    ("mode", "error", "match", "attempts"),
    [
        ("e500", BackendResponseError, "HTTP 500 after 3 attempt", 3),
        ("e400", BackendResponseError, "HTTP 400", 1),
        ("garbage", BackendResponseError, "not JSON", 1),
        ("list", BackendResponseError, "no completion object", 1),
        ("nochoices", BackendResponseError, "no completion object", 1),
        ("badlogprob", BackendResponseError, "logprob 'high' is not a number", 1),
        ("nantext", BackendResponseError, "text must be a string", 1),
    ],
)
def test_bad_answers_raise_a_typed_error(server, mode, error, match, attempts):
    backend = _backend(server, mode)
    before = server.hits.get(mode, 0)
    with pytest.raises(error, match=match) as caught:
        backend.generate([CONVERSATION], PARAMS)
    assert isinstance(caught.value, GenerationError)
    assert server.hits[mode] - before == attempts
    if mode.startswith("e"):
        assert caught.value.status == int(mode[1:])
    backend.close()


def test_a_hung_server_costs_one_timeout_and_no_retry(server):
    backend = _backend(server, "hang", timeout=0.5)
    before = server.hits.get("hang", 0)
    with pytest.raises(BackendUnavailableError, match="did not answer within 0.5 s"):
        backend.generate([CONVERSATION], PARAMS)
    assert server.hits["hang"] - before == 1  # a slow server would be as slow again: no retry
    backend.close()


def test_timeouts_and_retries_come_from_the_spec_string(server):
    spec = f"openai:m@{server.url('wm')}?timeout=7.5&retries=0"
    assert parse_backend_spec(spec) == {"backend": "openai", "model": "m", "base_url": server.url("wm"),
                                        "timeout": 7.5, "max_retries": 0}  # fmt: skip
    backend = make_backend(spec, cache=False)
    assert backend.timeout == 7.5 and backend.max_retries == 0
    assert backend.generate([CONVERSATION], PARAMS)[0].text == WM_OUTPUT
    backend.close()
    default = make_backend(f"openai:m@{server.url('wm')}", cache=False)
    assert default.timeout == DEFAULT_TIMEOUT <= 300 and default.max_retries == 2  # bounded, not 20 minutes
    default.close()
    for bad in ("?timeout=soon", "?timeout=0", "?retries=-1", "?retry=1", "?timeout=inf"):
        with pytest.raises(ValueError):
            parse_backend_spec(f"openai:m@{server.url('wm')}{bad}")


def test_the_openai_backend_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, dynaweb_env.llm.openai_backend; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# --- the dream env: a failure is reported in info, truncates the episode, and changes nothing -----------------


def _dream(
    server: _ScriptedServer, wm_mode: str, judge_mode: str = "judge", timeout: float = 0.5, **kwargs
) -> DreamWebEnv:
    # 0.5 s keeps the hung-server cases short; a healthy answer passes a longer limit (see below).
    return DreamWebEnv(
        world_model=f"openai:m@{server.url(wm_mode)}?timeout={timeout}&retries=1",
        judge=f"openai:m@{server.url(judge_mode)}?timeout={timeout}&retries=1",
        tasks=["miniwob.click-button"],
        include_intermediate=False,
        **kwargs,
    )


def _click(observation: dict[str, str]) -> str:
    return f"click [{axtree_element_ids(observation['axtree'])[-1]}]"


@pytest.mark.parametrize("mode", ["e500", "garbage", "list", "badlogprob", "hang"])
def test_world_model_failure_truncates_the_dream_and_changes_nothing(server, mode):
    env = _dream(server, mode)
    observation, _ = env.reset(seed=0)
    after, reward, terminated, truncated, info = env.step(_click(observation))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["end_reason"] == "backend_error" and info["backend_error"].startswith("world model: ")
    assert info["end_reason"] in END_REASONS
    assert info["dream_step"] == 0 and after == observation  # the step did not happen
    assert env._episode.num_steps == 0 and env._episode.steps == []
    with pytest.raises(gym.error.ResetNeeded):
        env.step(_click(observation))
    env.reset(seed=1)  # the env is usable again


def test_judge_failure_keeps_the_transition_and_truncates(server):
    env = _dream(server, "wm", "e500")
    observation, _ = env.reset(seed=0)
    moved, reward, terminated, truncated, info = env.step(_click(observation))
    assert not (terminated or truncated) and "[99] button 'OK'" in moved["axtree"]
    _, reward, terminated, truncated, info = env.step("stop [done]")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["backend_error"].startswith("judge: ") and info["judge_error"] == info["backend_error"]
    assert info["end_reason"] == "backend_error" and env._episode.num_steps == 2


def test_a_healthy_server_still_gives_a_verdict(server):
    # A generous limit: on a loaded 2-core machine even the scripted server can take over 0.5 s to answer.
    env = _dream(server, "wm", "judge", timeout=30.0)
    observation, _ = env.reset(seed=0)
    env.step(_click(observation))
    _, reward, terminated, truncated, info = env.step("stop [done]")
    assert (reward, terminated, truncated) == (1.0, True, False) and "backend_error" not in info


class _Exploding:
    """A backend that fails with a programming error (not a GenerationError), then recovers."""

    model_name = "exploding"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conversations, params):
        self.calls += 1
        if self.calls == 1:
            raise KeyError("a bug, not a backend failure")
        return [Generation(WM_OUTPUT) for _ in conversations]


def test_a_raise_leaves_the_dream_untouched_so_a_retry_counts_once():
    backend = _Exploding()
    env = DreamWebEnv(world_model=WebWorldModel(backend), judge=backend, tasks=["miniwob.click-button"])
    observation, _ = env.reset(seed=0)
    with pytest.raises(KeyError):
        env.step(_click(observation))
    assert env._episode.num_steps == 0 and env._episode.steps == [] and env._episode.observation() == observation
    _, _, _, _, info = env.step(_click(observation))
    assert info["dream_step"] == 1 and env._episode.num_steps == 1 and len(env._episode.steps) == 1


def test_vector_env_contains_a_failure_per_sub_env(server):
    env = DreamWebVectorEnv(
        num_envs=2,
        world_model=f"openai:m@{server.url('e500')}?timeout=0.5&retries=0",
        judge=f"openai:m@{server.url('judge')}",
        tasks=["miniwob.click-button"],
        include_intermediate=False,
    )
    observations, _ = env.reset(seed=0)
    first = {key: values[0] for key, values in observations.items()}
    # Sub-env 0 asks the (failing) world model; sub-env 1's malformed action needs no model call.
    _, rewards, terminations, truncations, infos = env.step([_click(first), "dance [1]"])
    assert truncations.tolist() == [True, False] and not terminations.any() and rewards.tolist() == [0.0, 0.0]
    assert infos["backend_error"][0].startswith("world model: ") and infos["_backend_error"].tolist() == [True, False]
    assert infos["dream_step"].tolist() == [0, 1]
    # Next step: sub-env 0 restarts (autoreset), sub-env 1 goes on.
    _, _, _, truncations, infos = env.step(["dance [1]", "dance [2]"])
    assert not truncations.any() and infos["_task_id"][0] and infos["dream_step"][1] == 2
    env.close()


def test_a_raise_in_a_vector_step_changes_no_sub_env():
    backend = _Exploding()
    env = DreamWebVectorEnv(
        num_envs=2, world_model=WebWorldModel(backend), judge=backend, tasks=["miniwob.click-button"]
    )
    observations, _ = env.reset(seed=0)
    actions = [_click({key: values[i] for key, values in observations.items()}) for i in range(2)]
    with pytest.raises(KeyError):
        env.step(actions)
    assert [episode.num_steps for episode in env._episodes] == [0, 0]
    _, _, _, _, infos = env.step(actions)
    assert infos["dream_step"].tolist() == [1, 1] and backend.calls == 2
