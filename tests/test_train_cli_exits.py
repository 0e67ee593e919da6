"""The training commands end cleanly: ``dynaweb-train`` names a rejected config's file and line, and Ctrl-C (or SIGTERM)
during ``dynaweb-train``, ``dynaweb sft`` or ``dynaweb train-wm`` saves the last finished update as a checkpoint that
``--resume`` goes on from, says so in one line, and exits 130 without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dynaweb_trainer.cli import train_main
from dynaweb_trainer.model_loading import checkpoint_step, last_checkpoint


@pytest.mark.parametrize(
    "text, expected",
    [
        ("learning_rate: 1.0e-5\nlerning_rate: 2\n", "run.yaml, line 2: 'lerning_rate'"),
        ("learning_rate: 1.0e-5\ntasks: [a, b\n", "run.yaml, line 3, column 1: not valid YAML"),
        ("learning_rate: 1e-5\n  bad: indent\n", "run.yaml, line 2, column 6: not valid YAML"),
        ("- just\n- a list\n", "run.yaml, line 1: must be a YAML mapping"),
        ("\xff\n", "run.yaml: cannot read it"),
    ],
)
def test_a_rejected_config_names_its_file_and_line(tmp_path: Path, capsys, text: str, expected: str) -> None:
    config = tmp_path / "run.yaml"
    config.write_bytes(text.encode("latin-1"))
    assert train_main(["--config", str(config), "--output-dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert expected in error and "Traceback" not in error, error


def test_a_dataset_that_cannot_fill_a_generation_round_is_refused_before_loading(tmp_path: Path, capsys) -> None:
    """TRL drops a generation round it cannot fill: 2 task queries for rounds of 16 episodes in groups of 2 (8
    queries) would train nothing and exit 0. It is refused up front, naming the flags."""
    argv = ["--env", "real", "--tasks", "miniwob.click-button", "--real-task-seeds", "2", "--num-generations", "2",
            "--per-device-train-batch-size", "4", "--gradient-accumulation-steps", "4", "--max-steps", "1",
            "--memory-check", "false", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert train_main(argv) == 2
    error = capsys.readouterr().err
    assert "2 task queries" in error and "draws 8 different ones" in error and "--real-task-seeds" in error, error
    assert "Traceback" not in error and not (tmp_path / "out").exists()


#: A tiny run that would take long enough to be interrupted mid-way.
TINY = [
    "--policy", "tiny-random", "--world-model", "tiny-random", "--judge", "tiny-random", "--num-generations", "2",
    "--per-device-train-batch-size", "4", "--max-turn-tokens", "8", "--agent-max-steps", "2", "--dream-length", "2",
    "--world-model-max-new-tokens", "8", "--judge-max-new-tokens", "8", "--max-axtree-chars", "600",
    "--logging-steps", "1", "--max-steps", "200", "--save-steps", "1000", "--seed", "1",
]  # fmt: skip


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path: Path) -> None:
    output_dir = tmp_path / "run"
    command = [sys.executable, "-m", "dynaweb_trainer.cli", *TINY, "--output-dir", str(output_dir)]
    environment = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    output = []
    try:
        deadline = time.monotonic() + 600
        for line in process.stdout:  # one progress line per finished update
            output.append(line)
            if line.startswith("step 1/200"):
                break
            assert time.monotonic() < deadline, "no update finished in 600 s"
        assert process.poll() is None, "".join(output)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = "".join(output) + rest
    assert process.returncode == 130, text[-3000:]
    assert "Traceback" not in text and "dynaweb-train: interrupted after update" in text, text[-3000:]
    checkpoint = last_checkpoint(str(output_dir))
    assert checkpoint is not None and f"saved {checkpoint}" in text, text[-3000:]
    assert (Path(checkpoint) / "trainer_state.json").is_file() and not (output_dir / "summary.json").exists()


#: ``dynaweb sft`` / ``dynaweb train-wm`` on the embedded tiny model: many short updates, none saved on schedule.
SFT_TINY = [
    "--model_name_or_path", "tiny-random", "--max_steps", "100000", "--save_steps", "100000",
    "--gradient_accumulation_steps", "1", "--logging_steps", "1", "--bf16", "false", "--dataset_split", "all",
]  # fmt: skip


def _dynaweb(*arguments: str) -> list[str]:
    return [sys.executable, "-c", "from dynaweb_trainer.main import cli; cli()", *arguments]


@pytest.mark.slow
@pytest.mark.parametrize("subcommand, stop", [("sft", signal.SIGINT), ("train-wm", signal.SIGTERM)])
def test_ctrl_c_on_an_sft_command_saves_a_checkpoint_that_resumes(tmp_path: Path, subcommand: str, stop) -> None:
    """Ctrl-C, or ``kill`` (SIGTERM, how a background run is stopped: it ignores SIGINT), saves and resumes."""
    output_dir = tmp_path / subcommand
    command = _dynaweb(subcommand, *SFT_TINY, "--output_dir", str(output_dir))
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    output: list[str] = []
    logged = threading.Event()

    def read() -> None:
        for line in process.stdout:
            output.append(line)
            if "'loss'" in line:  # transformers logs every finished update (logging_steps 1)
                logged.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 600
        while not logged.wait(timeout=1):  # until an update has finished
            assert process.poll() is None and time.monotonic() < deadline, "".join(output)[-3000:]
        process.send_signal(stop)
        process.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = "".join(output)
    prog = {"sft": "dynaweb-sft", "train-wm": "dynaweb-train-wm"}[subcommand]
    assert process.returncode == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    checkpoint = last_checkpoint(str(output_dir))
    assert checkpoint is not None, text[-3000:]
    step = checkpoint_step(checkpoint)
    last_line = text.strip().splitlines()[-1]
    assert last_line == (
        f"{prog}: interrupted after update {step}; saved {checkpoint}; rerun with --resume to go on"
    ), text[-3000:]
    assert not (output_dir / "adapter_model.safetensors").exists()  # no final model from a stopped run
    # The checkpoint is whole: the run goes on from it.
    resumed = subprocess.run(
        _dynaweb(subcommand, *SFT_TINY, "--max_steps", str(step + 1), "--output_dir", str(output_dir), "--resume"),
        capture_output=True, text=True, env=environment, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finished = json.loads(next(output_dir.glob("*summary.json")).read_text())
    assert (finished["resumed_from"], finished["steps"]) == (checkpoint, step + 1)
