"""``dynaweb-train`` ends cleanly (issue #49, item 7): a rejected config names its file and line, and Ctrl-C
during training saves what it can, says so, and exits 130 without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynaweb_trainer.cli import train_main
from dynaweb_trainer.model_loading import last_checkpoint


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
