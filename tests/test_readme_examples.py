"""The README's examples that use another library run as written (issue #48, item 7).

Each example is the code block that follows an ``<!-- example: NAME -->`` comment in ``README.md``: the
README's own text is what runs, and a marked example that goes missing fails
:func:`test_every_library_example_is_marked`. Python examples run in a fresh interpreter (the
libraries register ids and load models per process), followed by a few checks of what they left behind.

Two tiers:

- fast (default): the example's text unchanged, with ``DreamWeb-v0``'s *defaults* made tiny through
  Gymnasium's registry (``gym.registry["DreamWeb-v0"].kwargs``, which ``gym.make`` and ``make_vec``
  merge under the caller's arguments): :data:`TINY_DREAM` (the random 2-layer model as world model and
  judge, a few tokens each). ``dynaweb-serve`` gets the same through ``--env-kwargs``; the TRL example
  also trains the tiny model for one step (:data:`FAST_SUBSTITUTIONS`).
- slow: the examples exactly as written, on the shipped world model and judge (TRL: one step, not 10),
  and a verifiers ``OpenEnvTaskset`` episode against ``dynaweb-serve`` from verifiers' own virtual env.

Substitutions are literal replacements that must match: an example edited so that one no longer
applies fails the test instead of silently running something else.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from local_server import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: Every marked example of the README, and the language of its block.
EXPECTED = {
    "gymnasium": "python",
    "reward-guards": "python",
    "openenv": "python",
    "trl": "python",
    "skyrl": "python",
    "gem": "python",
    "verifiers": "toml",
}
#: ``DreamWeb-v0`` defaults of the fast tier: a random tiny model plays world model and judge.
TINY_DREAM = {"world_model": "tiny-random", "judge": "tiny-random", "max_new_tokens": 8, "judge_max_new_tokens": 4}
#: Replacements in an example's text for the fast tier: (old, new), each old must occur.
FAST_SUBSTITUTIONS = {
    # Built, not trained: the failure was at config time on a CPU; the slow tier trains a step.
    "trl": [('prepare_model("smollm2-135m")', 'prepare_model("tiny-random")'), ("trainer.train()", "pass")],
}
#: Replacements for the slow tier ("as written", but one training step, not 10).
SLOW_SUBSTITUTIONS = {"trl": [("max_steps=10", "max_steps=1")]}
#: Checks run after each Python example, in its namespace: the example did what it says.
CHECKS = {
    "gymnasium": """
        assert set(obs) >= {"goal", "url", "axtree", "last_action", "last_action_error"} and obs["goal"]
        assert isinstance(reward, float) and obs["last_action"] == "click [13]"
        assert real.unwrapped.spec.id == "RealWeb-v0" and vec.num_envs == 8
        vec.reset(seed=0)
        real.close(); vec.close(); env.close()
    """,
    "reward-guards": """
        env = gym.make("DreamWeb-v0", reward_guards={"consistency": "cut"})
        assert env.unwrapped.dynamics.guards.consistency == "cut"
        env.reset(seed=0)
        assert isinstance(env.step("click [13]")[1], float)
    """,
    "openenv": """
        # judged: the dream's verdict; a judge that wrote none (the tiny random one) says why.
        assert result.done and isinstance(result.reward, float)
        assert result.observation.judged or result.observation.info.get("judge_error")
        assert result.observation.last_action == "click [13]"
    """,
    "trl": """
        assert trainer.args.use_cpu == (not torch.cuda.is_available()) and trainer.args.bf16 == on_gpu
        assert trainer.state.global_step == 0 and len(trainer.train_dataset) == 64
    """,
    "skyrl": """
        assert messages[0]["role"] == "system" and "[13] button 'no'" in messages[-1]["content"]
        assert isinstance(out["reward"], float) and "judged" in out["metadata"]
    """,
    "gem": """
        assert "[13]" in str(observation) and isinstance(reward, float) and "judged" in info
        assert envs.num_envs == 4
        env.close()
    """,
}


#: Checks of the slow tier where they differ.
SLOW_CHECKS = {
    "trl": """
        assert trainer.state.global_step == 1 and "train_loss" in trainer.state.log_history[-1]
    """,
}


@dataclass(frozen=True)
class Example:
    name: str
    language: str
    code: str


def readme_examples() -> dict[str, Example]:
    """The marked examples of ``README.md`` by name; a name marked twice raises."""
    found: dict[str, Example] = {}
    pattern = re.compile(r"<!-- example: ([\w-]+)[^>]*-->\s*\n```(\w+)\n(.*?)\n```", re.S)
    for name, language, code in pattern.findall(README.read_text()):
        if name in found:
            raise AssertionError(f"README.md marks two examples {name!r}")
        found[name] = Example(name, language, code)
    return found


def substituted(code: str, replacements: list[tuple[str, str]]) -> str:
    for old, new in replacements:
        assert old in code, f"the example no longer holds {old!r}: update the test's substitutions"
        code = code.replace(old, new)
    return code


@dataclass
class Served:
    port: int
    process: subprocess.Popen


@pytest.fixture()
def dynaweb_serve(request, tmp_path) -> Iterator[callable]:
    """Start ``dynaweb-serve`` (argv as the README writes it, on a free port); stopped after the test."""
    started: list[Served] = []

    def start(argv: list[str], env_kwargs: dict | None = None) -> Served:
        port = free_port()
        argv = [str(port) if arg == "8000" else arg for arg in argv]
        assert argv[0] == "dynaweb-serve" and str(port) in argv, argv
        command = [sys.executable, "-m", "dynaweb_env.integrations.openenv", *argv[1:]]
        if env_kwargs:
            command += ["--env-kwargs", json.dumps(env_kwargs)]
        log = open(tmp_path / f"serve-{port}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(Served(port, process))
        _wait_for(f"http://127.0.0.1:{port}/health", process, tmp_path / f"serve-{port}.log")
        return started[-1]

    yield start
    for served in started:
        served.process.terminate()
        served.process.wait(timeout=60)


def _wait_for(url: str, process: subprocess.Popen, log: Path, within: float = 600.0) -> None:
    import httpx

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{process.args} exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{url} did not come up in {within:.0f} s")


def run_python_example(example: Example, tmp_path: Path, tiny: bool, code: str | None = None) -> str:
    """Run the example, then its :data:`CHECKS`, in a fresh interpreter in ``tmp_path``; returns its output."""
    prelude = ""
    if tiny:
        prelude = f"import gymnasium, dynaweb_env\ngymnasium.registry['DreamWeb-v0'].kwargs.update({TINY_DREAM!r})\n"
    checks = CHECKS[example.name] if tiny else SLOW_CHECKS.get(example.name, CHECKS[example.name])
    script = prelude + (code or example.code) + "\n" + textwrap.dedent(checks)
    path = tmp_path / f"readme_example_{example.name.replace('-', '_')}.py"  # not named like a module it imports
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, path.name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3000
    )
    assert done.returncode == 0, (
        f"the README's {example.name!r} example failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return done.stdout


def test_every_library_example_is_marked():
    examples = readme_examples()
    assert {name: example.language for name, example in examples.items()} == EXPECTED
    assert set(CHECKS) | {"verifiers"} == set(EXPECTED)


def _example_code(name: str, tiny: bool, tmp_path: Path, dynaweb_serve) -> tuple[Example, str]:
    example = readme_examples()[name]
    code = substituted(example.code, (FAST_SUBSTITUTIONS if tiny else SLOW_SUBSTITUTIONS).get(name, []))
    if name == "openenv":
        command = re.search(r"# shell: (dynaweb-serve .*)", code)
        assert command, "the OpenEnv example no longer says how to start the server"
        served = dynaweb_serve(command.group(1).split(), TINY_DREAM if tiny else None)
        code = substituted(code, [("127.0.0.1:8000", f"127.0.0.1:{served.port}")])
    return example, code


@pytest.mark.parametrize("name", ["gymnasium", "reward-guards", "openenv", "trl", "skyrl", "gem"])
def test_example_runs_with_tiny_defaults(name, request, tmp_path, dynaweb_serve):
    if name == "gymnasium":
        request.getfixturevalue("require_browser")  # it builds a RealWeb-v0
    example, code = _example_code(name, True, tmp_path, dynaweb_serve)
    run_python_example(example, tmp_path, tiny=True, code=code)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gymnasium", "openenv", "trl", "skyrl", "gem"])
def test_example_runs_as_written(name, request, tmp_path, dynaweb_serve):
    if name == "gymnasium":
        request.getfixturevalue("require_browser")
    example, code = _example_code(name, False, tmp_path, dynaweb_serve)
    run_python_example(example, tmp_path, tiny=False, code=code)


# --- verifiers: its own virtual env, its OpenEnvTaskset against dynaweb-serve --------------------------

#: verifiers' virtual env (README: ``python -m venv ~/.venvs/verifiers``); ``DYNAWEB_VERIFIERS_VENV`` overrides.
VERIFIERS_VENV = Path(os.environ.get("DYNAWEB_VERIFIERS_VENV", Path.home() / ".venvs" / "verifiers"))
#: What the stand-in policy answers every turn: a valid action (the bridge is under test, not a policy).
POLICY_REPLY = "click [13]"


class _ScriptedPolicy(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that streams :data:`POLICY_REPLY`, ended by ``data: [DONE]``."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.requests.append(body)
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body.get("model", "")}
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": POLICY_REPLY}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        ]
        payload = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture()
def scripted_policy() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedPolicy)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_verifiers_openenv_taskset_episode_against_dynaweb_serve(tmp_path, dynaweb_serve, scripted_policy):
    vf_eval = VERIFIERS_VENV / "bin" / "vf-eval"
    if not vf_eval.exists() or not (VERIFIERS_VENV / "bin" / "uv").exists():
        pytest.skip(
            f"no verifiers virtual env at {VERIFIERS_VENV} (set DYNAWEB_VERIFIERS_VENV): "
            f"python -m venv {VERIFIERS_VENV} && {VERIFIERS_VENV}/bin/pip install 'verifiers[openenv]==0.4.*' uv"
        )
    served = dynaweb_serve(
        ["dynaweb-serve", "--env", "DreamWeb-v0", "--port", "8000"], {**TINY_DREAM, "dream_length": 3}
    )
    policy_port = scripted_policy.server_address[1]
    config = substituted(
        readme_examples()["verifiers"].code,
        [
            ('"http://127.0.0.1:8001/v1"', f'"http://127.0.0.1:{policy_port}/v1"'),
            ('"http://127.0.0.1:8000"', f'"http://127.0.0.1:{served.port}"'),
        ],
    )
    (tmp_path / "dynaweb.toml").write_text(config)
    env = {**os.environ, "PATH": f"{VERIFIERS_VENV / 'bin'}{os.pathsep}{os.environ['PATH']}", "OPENAI_API_KEY": "EMPTY"}
    done = subprocess.run(
        [str(vf_eval), "@", "dynaweb.toml", "--no-rich"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [traces] = list(tmp_path.glob("outputs/*/traces.jsonl"))
    [episode] = [json.loads(line) for line in traces.read_text().splitlines()]
    assert episode["ok"] and not episode["errors"], episode["errors"]
    [trace] = episode["traces"]
    assert not trace["errors"] and "openenv_reward" in trace["rewards"]
    # The policy was asked each turn; its bare reply reached the page as the action schema's required field.
    pages = [json.loads(request["messages"][-1]["content"]) for request in scripted_policy.requests]
    assert pages[0]["action_schema"]["required"] == ["action"]
    assert pages[0]["observation"]["goal"] == 'Click on the "no" button.'
    assert [page["observation"]["last_action"] for page in pages[1:]] == [POLICY_REPLY] * (len(pages) - 1)
    assert len(pages) == 3  # dream_length 3: the third click ends the dream, judged


# --- the import error names the real cause (verifiers moved a dependency of OpenEnv) -------------------

_BROKEN_DEPENDENCY = """
import sys

class BrokenFastMCP:  # what verifiers' mcp==2.0.0 did to OpenEnv's fastmcp: installed, fails on import
    def find_spec(self, name, path=None, target=None):
        if name == "fastmcp" or name.startswith("fastmcp."):
            raise ImportError("FastMCP client support is not installed.")

sys.meta_path.insert(0, BrokenFastMCP())
for name in [name for name in sys.modules if name.split(".")[0] in ("openenv", "fastmcp")]:
    del sys.modules[name]
import dynaweb_env.integrations.openenv
"""


def test_openenv_import_error_quotes_the_broken_dependency():
    done = subprocess.run([sys.executable, "-c", _BROKEN_DEPENDENCY], cwd=ROOT, capture_output=True, text=True)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("ImportError: dynaweb_env.integrations.openenv needs OpenEnv")
    assert "installed but importing it failed" in last and "FastMCP client support is not installed." in last
    assert "The above exception was the direct cause" in done.stderr  # the original traceback is chained


def test_library_import_error_tells_missing_from_broken():
    from dynaweb_env.integrations._common import library_import_error

    missing = library_import_error("m", "OpenEnv", "openenv", "openenv", ModuleNotFoundError("x", name="openenv"))
    assert str(missing) == "m needs OpenEnv, which is not installed: pip install 'dynaweb[openenv]'"
    broken = library_import_error("m", "OpenEnv", "openenv", "openenv", ModuleNotFoundError("no mcp", name="mcp"))
    assert "installed but importing it failed with ModuleNotFoundError: no mcp" in str(broken)
