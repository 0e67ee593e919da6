"""The shipped world model and judge behind a real OpenAI-compatible server process (``transformers serve``).

The test exports both shipped adapters merged into SmolLM2-135M (:mod:`dynaweb_env.serving`), starts
transformers' own server on 127.0.0.1 (``pip install 'dynaweb[serve]'``), then runs a dream
(``dynaweb-dream``, DreamWeb-v0) and a GSPO update (``dynaweb-train --env dream``) against it, and
stops the server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from local_server import free_port

from dynaweb_env.serving import export_merged_model, served_model_spec

ROOT = Path(__file__).resolve().parents[1]
#: Seconds a request may take: generous, for a CPU shared with other jobs.
TIMEOUT = 1800


class Server:
    """``transformers serve`` on 127.0.0.1 in its own process group, with its log in a file."""

    def __init__(self, log: Path):
        self.log = log
        self.base_url = ""
        self.process: subprocess.Popen | None = None

    def start(self, ready_within: float = 900.0) -> None:
        executable = shutil.which("transformers")
        if executable is None:
            pytest.skip("no `transformers` command line: pip install 'dynaweb[serve]'")
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        command = [executable, "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*command, "--log-level", "info"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"transformers serve exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.stop()
        pytest.fail(f"transformers serve was not ready within {ready_within:g} s")

    def requests(self) -> int:
        """Chat completions the server answered (its access log)."""
        return self.log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Server, str, str]]:
    """The server, and the specs of the shipped world model and judge on it."""
    pytest.importorskip("fastapi", reason="transformers serve needs its serving extra: pip install 'dynaweb[serve]'")
    pytest.importorskip("uvicorn", reason="transformers serve needs its serving extra: pip install 'dynaweb[serve]'")
    root = tmp_path_factory.mktemp("served")
    world_model = export_merged_model("smollm2-135m-wm", root / "wm")
    judge = export_merged_model("smollm2-135m-judge", root / "judge")
    server = Server(root / "server.log")
    server.start()
    try:
        # The server loads each model on its first request, by the name the spec sends: the directory.
        yield (
            server,
            served_model_spec(world_model, server.base_url, timeout=TIMEOUT, vllm_extensions=False),
            served_model_spec(judge, server.base_url, timeout=TIMEOUT, vllm_extensions=False),
        )
    finally:
        server.stop()
    assert server.process.returncode is not None


def _run(*command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_dream_against_served_world_model_and_judge(served):
    server, world_model, judge = served
    assert "prompt_style=paper" in world_model and "output_mode=tree" in world_model  # as the adapter records
    before = server.requests()
    result = _run(
        "dynaweb_trainer.dream_demo", "--policy", "expert", "--task", "miniwob.click-button",
        "--world-model", world_model, "--judge", judge, "--dream-length", "2", "--world-model-max-new-tokens", "256",
    )  # fmt: skip
    assert "WORLD MODEL CHANGES:" in result.stdout, result.stdout[-2000:]  # a served world-model step was printed
    assert "judge" in result.stdout.lower()
    assert server.requests() >= before + 2  # at least one world-model step and the judge's verdict


@pytest.mark.slow
def test_train_dream_against_served_world_model_and_judge(served, tmp_path):
    server, world_model, judge = served
    output_dir = tmp_path / "run"
    _run(
        "dynaweb_trainer.cli", "--env", "dream", "--expert-frac", "0.5", "--policy", "tiny-random",
        "--world-model", world_model, "--judge", judge, "--num-generations", "2", "--per-device-train-batch-size", "2",
        "--max-steps", "1", "--dream-length", "1", "--agent-max-steps", "1", "--max-turn-tokens", "8",
        "--world-model-max-new-tokens", "128", "--judge-max-new-tokens", "32", "--max-axtree-chars", "600",
        "--seed", "3", "--output-dir", str(output_dir), "--disable-tqdm", "true",
    )  # fmt: skip
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["global_step"] == 1 and summary["last_checkpoint"].endswith("checkpoint-1")
    dreams = [json.loads(line) for line in (output_dir / "episodes.jsonl").read_text().splitlines()]
    dreams = [record for record in dreams if record["source"] == "dream"]
    assert dreams and all(record["metadata"].get("world_model_errors", 0) == 0 for record in dreams)
    # The untrained tiny-random policy's one-turn dreams end before a valid action reaches the world model, so
    # this run proves the trainer builds and steps its dream envs on the served specs end to end (no backend
    # error); the dream test above is the one that proves requests reach the server and are answered.
    assert server.process.poll() is None  # the server outlived the run
