"""Data-parallel ``dynaweb-train`` in two processes on the CPU (``accelerate launch``, gloo).

Proves, on a real two-rank run (tiny random policy, world model and judge; dreams and expert
interleaving on): the ranks train on different task queries, end with identical weights, write one
checkpoint and one summary, and ``--resume`` continues the run under the same launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from local_server import free_port

from dynaweb_env.data.io import iter_trajectories

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE_CONFIG = ROOT / "dynaweb_trainer" / "accelerate_configs" / "multi-cpu.yaml"
#: The fast tests' tiny settings (tests/test_train_cli.py), with dreams and expert interleaving on.
TINY = [
    "--policy", "tiny-random", "--world-model", "tiny-random", "--judge", "tiny-random", "--num-generations", "2",
    "--per-device-train-batch-size", "4", "--max-turn-tokens", "8", "--agent-max-steps", "2",
    "--dream-length", "2", "--world-model-max-new-tokens", "16", "--judge-max-new-tokens", "16",
    "--max-axtree-chars", "600", "--learning-rate", "1e-3", "--lr-scheduler-type", "constant",
    "--logging-steps", "1", "--seed", "1",
    "--env", "dream", "--expert-frac", "0.5", "--save-steps", "1", "--disable-tqdm", "true",
]  # fmt: skip


def launch_train(output_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """``accelerate launch`` with the shipped multi-CPU config, 2 ranks, of ``dynaweb-train``."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIG),
        "--main_process_port", str(free_port()), "-m", "dynaweb_trainer.cli",
        *TINY, "--output-dir", str(output_dir), *flags,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # Minutes on an idle CPU; a resume took 25+ min on this 2-core machine shared with four other jobs.
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def starts_by_step(path: Path) -> dict[int, set[str]]:
    """Per update, the task queries (dream start states) a rank's episodes came from."""
    starts: dict[int, set[str]] = defaultdict(set)
    for record in iter_trajectories(path):
        state = record.metadata["options"]["start_state"]
        starts[record.metadata["global_step"]].add(f"{state['trajectory_id']}@{state['step_index']}")
    return starts


@pytest.mark.slow
def test_two_process_cpu_training_checkpoints_and_resume(tmp_path):
    output_dir = tmp_path / "run"
    launch_train(output_dir, "--max-steps", "2")
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["global_step"] == 2
    digests = summary["rank_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1], digests

    ranks = [starts_by_step(output_dir / f"episodes.rank{rank}.jsonl") for rank in (0, 1)]
    assert sorted(ranks[0]) == sorted(ranks[1]) == [0, 1]
    for step in (0, 1):  # each rank ran its own share of the batch: no task query on both
        assert ranks[0][step] and ranks[1][step] and not ranks[0][step] & ranks[1][step], (step, ranks)
    logs = [output_dir / f"episodes.rank{rank}.jsonl" for rank in (0, 1)]
    sources = {record.source for log in logs for record in iter_trajectories(log)}
    assert sources == {"dream", "expert"}
    assert {path.name for path in output_dir.glob("checkpoint-*")} == {"checkpoint-1", "checkpoint-2"}

    result = launch_train(output_dir, "--max-steps", "3", "--resume")
    assert "resume=" in result.stdout and "checkpoint-2" in result.stdout
    resumed = json.loads((output_dir / "summary.json").read_text())
    assert resumed["global_step"] == 3 and resumed["last_checkpoint"].endswith("checkpoint-3")
    assert resumed["rank_weight_digests"][0] == resumed["rank_weight_digests"][1]
    assert resumed["rank_weight_digests"][0] != digests[0]  # the third update moved the weights (constant lr)
    assert resumed["policy_episodes"] > summary["policy_episodes"]  # counters restored from the checkpoint, then grew
    for rank in (0, 1):  # each rank's episode log: the first two updates kept, the third appended
        assert sorted(starts_by_step(output_dir / f"episodes.rank{rank}.jsonl")) == [0, 1, 2]
