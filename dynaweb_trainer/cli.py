"""``dynaweb-train``: GSPO training of a web agent in dreams, in the real browser, or both.

Run (the defaults train the embedded SmolLM2-135M policy with LoRA against the shipped trained world model
on the shipped MiniWoB++ start states and expert trajectories, in minutes on a CPU)::

    dynaweb-train --env dream --expert-frac 0.5            # = make demo
    dynaweb-train --env real --max-steps 5                 # MiniWoB++ in Chromium
    dynaweb-train --env mix --real-frac 0.3
    dynaweb-train --preset paper --policy /ckpt/nnetnav-8b --world-model openai:wm@http://wm:8000/v1
    dynaweb-train --config run.yaml --learning-rate 1e-5   # YAML keys = GSPOConfig fields; flags win
    dynaweb-train --resume                                 # continue from output_dir's last checkpoint

Configuration is layered: the preset (``--preset``, default ``cpu-small``; see
``dynaweb_trainer/presets/``), then ``--config FILE`` (a YAML mapping of
:class:`~dynaweb_trainer.config.GSPOConfig` fields; its ``env:`` key may be the environment
name, or, as in TRL, a mapping of environment variables), then command-line flags. Every
``GSPOConfig``/``GRPOConfig``/``TrainingArguments`` field is a flag (``--help`` lists them).

Progress shows as a bar with one line per log (reward, success rate, expert share, dream length,
world-model format errors, policy tokens/s); metrics also go to ``--report-to`` (tensorboard,
wandb, ...). Checkpoints are written every ``--save-steps`` and at the end; ``summary.json`` in
``output_dir`` holds the run's summary.

Scaling out (README "Scaling out" lists what was run, and what it measured):

- **Several processes**: ``accelerate launch --num_processes 8 -m dynaweb_trainer.cli --preset paper``
  on GPUs (add ``--config_file fsdp.yaml`` to accelerate for FSDP; Table 3 used FSDP with parameter and
  optimizer offloading). On a machine without a GPU,
  ``accelerate launch --config_file dynaweb_trainer/accelerate_configs/multi-cpu.yaml -m dynaweb_trainer.cli``
  runs 2 ranks over gloo. Each process runs its share of the task queries with its own vector envs
  (episodes in ``episodes.rank<N>.jsonl``); ``summary.json`` records a digest of every rank's weights.
- **World model / judge on a server**: any OpenAI-compatible endpoint (vLLM, SGLang, ``transformers
  serve``): ``--world-model 'openai:<model>@http://host:8000/v1?timeout=600&prompt_style=paper&output_mode=tree'``
  (and ``--judge``); the spec states how the served model was trained, which a server cannot tell
  (:mod:`dynaweb_env.serving` exports a shipped world model for a server and writes the spec).
- **Policy rollouts with vLLM** (needs vLLM and a CUDA GPU): ``--use-vllm --vllm-mode colocate`` (or
  ``server`` with ``trl vllm-serve --model <policy>``); :class:`~dynaweb_trainer.trainer_policy.VLLMPolicy`
  sends each turn's batch to TRL's vLLM engine, whose weights TRL syncs after every step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .checkpoint_state import checkpoint_on_interrupt, exit_interrupted
from .config import GSPOConfig, available_presets, preset_path

DEFAULT_PRESET = "cpu-small"


#: Where each key of the config files read so far was written: key -> "file, line N".
_KEY_SOURCES: dict[str, str] = {}


def _read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of a YAML config file; ``ValueError`` naming the file and line for bad YAML or a non-mapping."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        values = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ValueError(f"config file {path}{where}: not valid YAML: {problem}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"config file {path}: cannot read it: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"config file {path}, line 1: must be a YAML mapping of GSPOConfig fields")
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            _KEY_SOURCES[str(key.value)] = f"{path}, line {key.start_mark.line + 1}"
    if "use_lora" in values:  # the field's name before it took TRL's ModelConfig name (the flag keeps both)
        values.setdefault("use_peft", values.pop("use_lora"))
    return values


def _apply_env_key(values: dict[str, Any]) -> None:
    # TRL reserves `env:` in config files for environment variables; DynaWeb also accepts the
    # environment name there (`env: dream`), since `--env` is its flag.
    env = values.pop("env", None)
    if isinstance(env, dict):
        for key, value in env.items():
            os.environ[str(key)] = str(value)
    elif env is not None:
        values["environment"] = env


def _names(argv: Sequence[str], config: dict, field_name: str) -> bool:
    """Whether the user's flags or ``--config`` file set ``field_name`` (as ``--a_b``, ``--a-b`` or ``--a-b=...``)."""
    flags = {f"--{field_name}", f"--{field_name.replace('_', '-')}"}
    return field_name in config or any(arg.split("=", 1)[0] in flags for arg in argv)


def parse_train_args(argv: Sequence[str] | None = None) -> GSPOConfig:
    """Parse ``dynaweb-train`` arguments: preset, then ``--config`` YAML, then flags (TRL's parser).

    Raises:
        ValueError: For an unknown preset or config key.
    """
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags

    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=DEFAULT_PRESET)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    values = _read_yaml(preset_path(known.preset))
    _apply_env_key(values)
    overrides = {}
    if known.config:
        overrides = _read_yaml(known.config)
        _apply_env_key(overrides)
        values.update(overrides)

    parser = word_negated_flags(TrlParser([GSPOConfig], prog="dynaweb-train", description=__doc__.split("\n\n")[0]))
    parser.add_argument(
        "--preset", default=DEFAULT_PRESET, help=f"Named preset: {', '.join(available_presets())} (default cpu-small)."
    )
    parser.add_argument("--config", default=None, help="YAML file of GSPOConfig fields (overrides the preset).")
    unknown = parser.set_defaults_with_config(**values)
    if unknown:
        keys = [str(key)[2:] if str(key).startswith("--") else str(key) for key in unknown[::2]]
        named = "; ".join(f"{_KEY_SOURCES.get(key, 'config')}: {key!r}" for key in keys)
        raise ValueError(f"unknown config key (not a GSPOConfig field): {named}")
    config, _extra = parser.parse_args_into_dataclasses(args=argv)
    if config.world_model is not None and not _names(argv, overrides, "world_model"):
        from dynaweb_env.models import world_model_output_mode

        if config.world_model_output_mode not in (None, world_model_output_mode(config.world_model)):
            config.world_model = None  # the preset's world model is of another mode: that mode's shipped one
    return config


def resume_checkpoint(args: GSPOConfig) -> str | None:
    """The checkpoint to resume from: ``resume_from_checkpoint``, or with ``--resume`` the last one in
    ``output_dir`` (``None``, with a note, when there is none yet)."""
    from .model_loading import last_checkpoint

    if args.resume_from_checkpoint:
        return args.resume_from_checkpoint
    if not args.resume:
        return None
    checkpoint = last_checkpoint(args.output_dir)
    if checkpoint is None:
        print(f"dynaweb-train: no checkpoint in {args.output_dir} yet; starting from scratch", file=sys.stderr)
    return checkpoint


def train_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-train``; returns the exit status."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is the supported path here
    try:
        args = parse_train_args(argv)
    except ValueError as error:
        print(f"dynaweb-train: {error}", file=sys.stderr)
        return 2
    from .metrics import SaveAtEndCallback, StopAfterStepCallback
    from .model_loading import checkpoint_step
    from .task_queries import TooFewQueriesError
    from .trainer import DynaWebTrainer

    if args.use_vllm:
        from .trainer_policy import require_vllm

        try:
            require_vllm()
        except ImportError as error:
            print(f"dynaweb-train: {error}", file=sys.stderr)
            return 2
    if args.memory_check:
        from .memory import MemoryBudgetError, check_training_memory

        try:
            estimate = check_training_memory(args)
        except MemoryBudgetError as error:
            print(f"dynaweb-train: {error}", file=sys.stderr)
            return 2
        print(f"dynaweb-train: estimated peak memory {estimate.describe()}", flush=True)
    checkpoint = resume_checkpoint(args)
    stop = args.stop_after_step
    if stop is not None and checkpoint is not None and checkpoint_step(checkpoint) >= stop:
        print(f"dynaweb-train: {checkpoint} is at or past --stop-after-step {stop}; nothing to do", flush=True)
        return 0
    print(
        f"dynaweb-train: env={args.environment} policy={args.policy} world_model={args.world_model or 'shipped'} "
        f"expert_frac={args.expert_frac} G={args.num_generations} max_steps={args.max_steps} "
        f"output_dir={args.output_dir}" + (f" resume={checkpoint}" if checkpoint else ""),
        flush=True,
    )
    callbacks = [SaveAtEndCallback()] + ([StopAfterStepCallback(stop)] if stop is not None else [])
    try:
        try:
            trainer = DynaWebTrainer(args, callbacks=callbacks)
        except TooFewQueriesError as error:
            print(f"dynaweb-train: {error}", file=sys.stderr)
            return 2
        try:
            with checkpoint_on_interrupt(trainer, args.output_dir):  # Ctrl-C: the last finished update is saved
                trainer.train(resume_from_checkpoint=checkpoint)
        finally:
            trainer.rollout_func.close()
    except KeyboardInterrupt as interrupt:
        return exit_interrupted("dynaweb-train", interrupt, args.output_dir)
    if stop is not None and trainer.state.global_step < trainer.state.max_steps:  # no final model, no summary.json
        print(
            f"dynaweb-train: stopped after update {trainer.state.global_step} of {trainer.state.max_steps} "
            f"(--stop-after-step); rerun with --resume to go on",
            flush=True,
        )
        return 0
    trainer.save_model(args.output_dir)
    summary = trainer.summary()
    if not trainer.accelerator.is_main_process:  # one summary per run, not per process
        return 0
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_dir) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("dynaweb-train: summary")
    for key, value in summary.items():
        print(f"  {key:26s} {value:.3f}" if isinstance(value, float) else f"  {key:26s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(train_main())
