"""``dynaweb``, the one command with subcommands: each subcommand's ``--help`` through the real entry point, the
console scripts it keeps as aliases, ``train-judge``'s preset and the one ``--resume`` flag."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynaweb_trainer.main import JUDGE_OUTPUT_DIR, SUBCOMMANDS, command_arguments, main, usage


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_help_exits_zero(name, capsys):
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "--" in out  # its own parser's help, with its flags


def test_help_lists_every_subcommand_with_one_line(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == list(SUBCOMMANDS)
    assert out == usage() + "\n"


def test_no_command_and_unknown_commands_exit_2(capsys):
    assert main([]) == 2
    assert main(["trian"]) == 2
    assert "did you mean 'train'" in capsys.readouterr().err


def test_the_installed_dynaweb_script_runs():
    executable = shutil.which("dynaweb", path=str(Path(sys.executable).parent)) or shutil.which("dynaweb")
    if executable is None:
        pytest.skip("the dynaweb console script is not installed (pip install -e .)")
    result = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "train-judge" in result.stdout


def test_each_old_console_script_runs_its_subcommands_entry_point():
    entry_points = importlib.metadata.distribution("dynaweb").entry_points
    scripts = {entry.name: entry.value for entry in entry_points if entry.group == "console_scripts"}
    assert scripts["dynaweb"] == "dynaweb_trainer.main:cli"
    aliases = {command.alias for command in SUBCOMMANDS.values()}
    assert aliases == set(scripts) - {"dynaweb"}
    for name, command in SUBCOMMANDS.items():
        target = scripts[command.alias]
        if command.resume_flag:  # the alias goes through the dispatcher, which translates --resume
            assert target.startswith("dynaweb_trainer.main:"), name
        elif not command.preset:
            assert target == command.target, name


def test_train_judge_presets_the_judge_examples_and_its_own_output_dir():
    from dynaweb_trainer.world_model_sft import parse_config

    config = parse_config(command_arguments("train-judge", ["--max_steps", "2"]))
    assert config.examples == "judge" and config.output_dir == JUDGE_OUTPUT_DIR and config.max_steps == 2
    config = parse_config(command_arguments("train-judge", ["--output_dir", "/tmp/elsewhere"]))
    assert config.output_dir == "/tmp/elsewhere"
    assert parse_config(command_arguments("train-wm", [])).examples == "world_model"
    with pytest.raises(ValueError, match="train-wm"):
        command_arguments("train-judge", ["--examples", "both"])


def test_train_judge_refusing_its_preset_flag_exits_2(capsys):
    assert main(["train-judge", "--examples=both"]) == 2
    assert "--examples" in capsys.readouterr().err


def test_resume_is_one_flag_for_every_training_command(tmp_path):
    from dynaweb_trainer.cli import parse_train_args
    from dynaweb_trainer.sft import parse_config as parse_sft
    from dynaweb_trainer.world_model_sft import parse_config as parse_wm

    assert parse_sft(command_arguments("sft", ["--resume"])).resume_from_checkpoint == "last"
    assert parse_wm(command_arguments("train-wm", ["--resume"])).resume_from_checkpoint == "last"
    assert parse_wm(command_arguments("train-judge", ["--resume"])).resume_from_checkpoint == "last"
    assert parse_train_args(command_arguments("train", ["--resume"])).resume
    # TRL's own flag keeps working where TRL has it.
    checkpoint = str(tmp_path / "checkpoint-3")
    assert parse_sft(command_arguments("sft", ["--resume_from_checkpoint", checkpoint])).resume_from_checkpoint == (
        checkpoint
    )
