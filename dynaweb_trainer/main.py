"""``dynaweb``: every DynaWeb command line as one command with subcommands, as TRL's ``trl`` has.

    dynaweb --help                                  # the subcommands, one line each
    dynaweb sft --output_dir runs/sft               # = dynaweb-sft ...
    dynaweb train --env dream --expert-frac 0.5     # = dynaweb-train ...
    dynaweb train-judge --output_dir runs/judge     # = dynaweb-train-wm --examples judge ...
    dynaweb sft --output_dir runs/sft --resume      # every training command resumes with --resume

Each subcommand runs the entry point of its ``dynaweb-<name>`` console script (which stays as an alias) with the
arguments that follow it, so both give the same results. ``--resume`` (continue from the last complete checkpoint
in ``output_dir``) works for every command that writes checkpoints; on the SFT commands it stands for TRL's
``--resume_from_checkpoint last``, which keeps working too.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PROG = "dynaweb"


@dataclass(frozen=True)
class Subcommand:
    """One ``dynaweb`` subcommand.

    Args:
        target: ``"module:function"``, the console-script entry point it runs (no arguments; reads ``sys.argv``).
        summary: The one line ``dynaweb --help`` shows.
        alias: The console script that runs the same entry point (``sys.argv[0]`` when it runs).
        preset: Arguments placed before the user's (theirs come later, so theirs win where both set a flag).
        resume_flag: ``--resume`` stands for ``--resume_from_checkpoint last`` (TRL's SFT flag).
    """

    target: str
    summary: str
    alias: str
    preset: tuple[str, ...] = ()
    resume_flag: bool = False


#: The subcommands, in the order ``dynaweb --help`` lists them.
SUBCOMMANDS: dict[str, Subcommand] = {
    "train": Subcommand(
        "dynaweb_trainer.cli:train_main", "GSPO training of the policy in dreams, on real pages, or both",
        "dynaweb-train",
    ),
    "sft": Subcommand(
        "dynaweb_trainer.sft:cli", "supervised fine-tuning of the policy on expert demonstrations (RL's start)",
        "dynaweb-sft", resume_flag=True,
    ),
    "eval": Subcommand(
        "dynaweb_trainer.evaluate:cli", "success rate of a policy on real MiniWoB++ pages in Chromium", "dynaweb-eval"
    ),
    "collect": Subcommand(
        "dynaweb_trainer.collect:cli", "record a policy's trajectories on real pages as JSONL", "dynaweb-collect"
    ),
    "build-data": Subcommand(
        "dynaweb_trainer.build_data:cli", "rebuild the MiniWoB++ dataset for world models and judges",
        "dynaweb-build-data",
    ),
    "train-wm": Subcommand(
        "dynaweb_trainer.world_model_sft:cli", "supervised fine-tuning of the world model on real transitions",
        "dynaweb-train-wm", resume_flag=True,
    ),
    "train-judge": Subcommand(
        "dynaweb_trainer.world_model_sft:cli",
        "supervised fine-tuning of the trajectory judge on real outcomes (train-wm --examples judge)",
        "dynaweb-train-wm", preset=("--examples", "judge"), resume_flag=True,
    ),
    "eval-wm": Subcommand(
        "dynaweb_trainer.evaluate_world_model:cli", "world-model fidelity on held-out real transitions",
        "dynaweb-eval-wm",
    ),
    "dream": Subcommand(
        "dynaweb_trainer.dream_demo:main", "print a policy acting in one dream, step by step", "dynaweb-dream"
    ),
    "dream-judge-data": Subcommand(
        "dynaweb_trainer.dreamed_judge_data:cli", "judge training data on dreamed pages, labelled by real outcomes",
        "dynaweb-dream-judge-data",
    ),
    "serve": Subcommand(
        "dynaweb_env.integrations.openenv:main", "serve DreamWeb-v0 or RealWeb-v0 as an OpenEnv server",
        "dynaweb-serve",
    ),
    "average-adapters": Subcommand(
        "dynaweb_trainer.adapter_average:cli", "average LoRA adapters of one base model into one adapter",
        "dynaweb-average-adapters",
    ),
}  # fmt: skip

#: Where ``train-judge`` writes when neither ``--output_dir`` nor ``--config`` says otherwise.
JUDGE_OUTPUT_DIR = "runs/judge"

#: The extra that installs each optional library a subcommand may need.
_EXTRAS = {
    "trl": "train", "datasets": "train", "accelerate": "train", "matplotlib": "train",
    "browsergym": "browser", "playwright": "browser", "miniwob": "browser", "psutil": "browser",
    "ctranslate2": "engine", "openenv": "openenv", "uvicorn": "openenv", "vllm": "vllm",
}  # fmt: skip


def usage() -> str:
    """The text of ``dynaweb --help``."""
    width = max(map(len, SUBCOMMANDS))
    lines = [
        f"usage: {PROG} <command> [arguments]",
        "",
        "DynaWeb: model-based RL of LLM web agents in a learned web world model.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {command.summary}" for name, command in SUBCOMMANDS.items()),
        "",
        f"Run '{PROG} <command> --help' for a command's arguments. Each command is also a script of its own",
        "(dynaweb-train, dynaweb-sft, ...). --resume continues train, sft, train-wm and train-judge from their",
        "last complete checkpoint; eval, collect, build-data and dream-judge-data resume on their own when rerun.",
    ]
    return "\n".join(lines)


def command_arguments(name: str, argv: Sequence[str]) -> list[str]:
    """The arguments subcommand ``name``'s entry point gets for ``argv``: its preset, then ``argv`` translated.

    Raises:
        ValueError: If ``argv`` sets what the subcommand presets (``--examples`` for ``train-judge``).
    """
    command = SUBCOMMANDS[name]
    argv = list(argv)
    preset = list(command.preset)
    for flag in preset[::2]:
        if any(argument == flag or argument.startswith(flag + "=") for argument in argv):
            raise ValueError(f"{PROG} {name} sets {flag} itself; use {PROG} train-wm to choose {flag}")
    flags = {argument.split("=")[0].replace("_", "-") for argument in argv}
    if name == "train-judge" and not flags & {"--output-dir", "--config"}:
        preset += ["--output_dir", JUDGE_OUTPUT_DIR]
    if command.resume_flag:
        argv = [part for argument in argv for part in (
            ("--resume_from_checkpoint", "last") if argument == "--resume" else (argument,)
        )]  # fmt: skip
    return preset + argv


def _load(name: str) -> Callable[[], object]:
    module_name, function = SUBCOMMANDS[name].target.split(":")
    return getattr(importlib.import_module(module_name), function)


def run(name: str, argv: Sequence[str]) -> object:
    """Run subcommand ``name`` with ``argv``, as its console script would; returns what its entry point returns.

    A missing optional library (an extra not installed) is reported with the extra to install (exit status 2).
    """
    try:
        arguments = command_arguments(name, argv)
    except ValueError as error:
        print(f"{PROG} {name}: error: {error}", file=sys.stderr)
        return 2
    try:
        entry_point = _load(name)
    except ImportError as error:
        missing = (error.name or "").split(".")[0]
        extra = _EXTRAS.get(missing)
        hint = f": pip install 'dynaweb[{extra}]'" if extra else ""
        print(f"{PROG} {name}: needs {missing or 'a library that is not installed'}{hint} ({error})", file=sys.stderr)
        return 2
    if SUBCOMMANDS[name].resume_flag and any(argument in ("-h", "--help") for argument in arguments):
        print("(--resume also works here: it stands for --resume_from_checkpoint last)\n")
    saved = sys.argv
    sys.argv = [SUBCOMMANDS[name].alias, *arguments]
    try:
        return entry_point()
    finally:
        sys.argv = saved


def main(argv: Sequence[str] | None = None) -> object:
    """Entry point of ``dynaweb``: dispatch to the subcommand named by the first argument.

    Returns:
        The subcommand's result, which the console script turns into the exit status (as for its alias).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from importlib.metadata import version

        print(f"{PROG} {version('dynaweb')}")
        return 0
    name = argv[0]
    if name not in SUBCOMMANDS:
        close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        print(f"{PROG}: error: unknown command {name!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    return run(name, argv[1:])


def _alias(name: str) -> Callable[[], None]:
    def alias() -> None:
        raise SystemExit(run(name, sys.argv[1:]))

    alias.__doc__ = f"The ``{SUBCOMMANDS[name].alias}`` console script: ``{PROG} {name}``."
    return alias


#: Console scripts of the old names whose arguments the dispatcher translates (``--resume``).
sft_cli = _alias("sft")
train_wm_cli = _alias("train-wm")


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


__all__ = ["SUBCOMMANDS", "Subcommand", "cli", "command_arguments", "main", "run", "usage"]
