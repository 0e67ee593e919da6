"""Loading models and finding checkpoints: the one place every trainer and CLI does it.

A model reference is one of

- an embedded name (``smollm2-135m``, ``tiny-random``; :mod:`dynaweb_env.models`),
- a full checkpoint directory (has ``config.json``),
- a LoRA adapter directory (has ``adapter_config.json``): loaded on its base model
  (``base_model_name_or_path``, an embedded name or a local directory),
- a training output directory: its newest *complete* ``checkpoint-*`` (see :func:`last_checkpoint`).

A checkpoint is complete when the model's weights are in it and its ``trainer_state.json`` parses.
The Trainer writes ``trainer_state.json`` last, after the weights, and whole or not at all (a temporary
file, fsync'd, then renamed: :mod:`~dynaweb_trainer.checkpoint_state`), so a run killed while writing
``checkpoint-N`` leaves a directory without it, which resuming skips. A checkpoint whose state is there but
does not parse (cut short before that rule, or damaged since) is skipped too, with a warning, and
``--resume`` falls back to the complete checkpoint before it.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

#: What a checkpoint directory holds once the Trainer has finished writing it.
TRAINER_STATE_FILE = "trainer_state.json"
#: Any of these is the model's weights (a full model, or a LoRA adapter).
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
    "adapter_model.safetensors", "adapter_model.bin",
)  # fmt: skip
_CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")


class PolicyLoadError(FileNotFoundError):
    """A model reference names nothing loadable; the message says what was looked for."""


def trainer_state_problem(directory: str | os.PathLike[str]) -> str | None:
    """Why ``directory``'s ``trainer_state.json`` cannot be resumed from (``None`` when it parses as an object)."""
    path = Path(directory) / TRAINER_STATE_FILE
    if not path.is_file():
        return f"no {TRAINER_STATE_FILE}"
    try:
        state = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"{TRAINER_STATE_FILE} does not parse ({type(error).__name__}: {str(error)[:120]})"
    if not isinstance(state, dict):
        return f"{TRAINER_STATE_FILE} is not a JSON object"
    return None


def is_complete_checkpoint(directory: str | os.PathLike[str], resumable: bool = True) -> bool:
    """Whether ``directory`` holds a finished checkpoint.

    Args:
        directory: A ``checkpoint-N`` directory.
        resumable: Require what resuming needs (the weights and a ``trainer_state.json``, written last, that
            parses: see :func:`trainer_state_problem`); ``False`` requires only a loadable model (a config and
            the weights).
    """
    directory = Path(directory)
    has_weights = any((directory / name).is_file() for name in WEIGHT_FILES)
    if resumable:
        return has_weights and trainer_state_problem(directory) is None
    has_config = (directory / "config.json").is_file() or (directory / "adapter_config.json").is_file()
    return has_weights and has_config


def last_checkpoint(output_dir: str | os.PathLike[str] | None, resumable: bool = True) -> str | None:
    """The newest complete ``checkpoint-*`` directory of ``output_dir`` (``None`` if there is none).

    Incomplete ones (a run killed while writing them) are skipped, so ``--resume`` falls back to the
    checkpoint before; one whose ``trainer_state.json`` is there but does not parse is skipped with a warning
    naming it. ``resumable=False`` asks only for a loadable model (see :func:`is_complete_checkpoint`).
    """
    if not output_dir or not Path(output_dir).is_dir():
        return None
    steps = []
    for child in Path(output_dir).iterdir():
        match = _CHECKPOINT_NAME.match(child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    for _, child in sorted(steps, reverse=True):
        if is_complete_checkpoint(child, resumable):
            return str(child)
        problem = trainer_state_problem(child) if resumable else None
        if problem is not None and (child / TRAINER_STATE_FILE).is_file():
            warnings.warn(f"skipping checkpoint {child}: {problem}; falling back to an earlier one", stacklevel=2)
    return None


def checkpoint_step(checkpoint: str | os.PathLike[str] | None) -> int:
    """The global step of a ``checkpoint-N`` directory (``0`` for ``None``)."""
    if checkpoint is None:
        return 0
    match = _CHECKPOINT_NAME.match(Path(checkpoint).name)
    return int(match.group(1)) if match else 0


def resolve_checkpoint_dir(path: str | os.PathLike[str]) -> tuple[Path, str]:
    """Find what a local model directory holds.

    Args:
        path: A checkpoint directory, or a training output directory with ``checkpoint-*`` inside.

    Returns:
        ``(directory, kind)`` with kind ``"adapter"`` (``adapter_config.json``) or ``"model"`` (``config.json``).

    Raises:
        PolicyLoadError: If the path does not exist or holds neither.
    """
    directory = Path(path).expanduser()
    if not directory.exists():
        raise PolicyLoadError(f"policy path not found: {directory}")
    if not directory.is_dir():
        raise PolicyLoadError(f"policy path {directory} is a file; pass a checkpoint or adapter directory")
    if (directory / "adapter_config.json").is_file():
        return directory, "adapter"
    if (directory / "config.json").is_file():
        return directory, "model"
    last = last_checkpoint(directory, resumable=False)
    if last is not None:
        return resolve_checkpoint_dir(last)
    raise PolicyLoadError(
        f"{directory} holds no model: expected adapter_config.json (a LoRA adapter), config.json (a full "
        "checkpoint) or complete checkpoint-* directories"
    )


def default_dtype(device: str | None) -> Any:
    """bf16 on a GPU that supports it, else fp32 (CPU kernels are fastest and exact in fp32)."""
    import torch

    on_gpu = device is None and torch.cuda.is_available() or str(device).startswith("cuda")
    return torch.bfloat16 if on_gpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32


def adapter_base_path(adapter_dir: Path) -> tuple[str, Any]:
    """``(base reference, resolved base path)`` of a LoRA adapter directory.

    Raises:
        PolicyLoadError: If the adapter config or its base model is missing.
    """
    from dynaweb_env.models import resolve_model

    config_file = adapter_dir / "adapter_config.json"
    if not config_file.is_file():
        raise PolicyLoadError(f"adapter not found: {config_file} does not exist")
    try:
        base_reference = json.loads(config_file.read_text())["base_model_name_or_path"]
    except (json.JSONDecodeError, KeyError) as error:
        raise PolicyLoadError(f"{config_file} has no readable base_model_name_or_path ({error})") from None
    try:
        base_path = resolve_model(base_reference)
    except ValueError as error:
        raise PolicyLoadError(f"base model of adapter {adapter_dir} not found: {error}") from None
    if not Path(base_path).is_dir():
        raise PolicyLoadError(
            f"base model {base_reference!r} of adapter {adapter_dir} is not a local directory or embedded model"
        )
    return str(base_reference), base_path


def load_model_and_tokenizer(
    reference: str | os.PathLike[str],
    *,
    device: str | None = None,
    trainable: bool = False,
    tokenizer: Any = None,
) -> tuple[Any, Any, dict[str, Any]]:
    """Load a causal LM and its tokenizer from any model reference (see the module docstring).

    Args:
        reference: Embedded name, checkpoint, adapter or output directory, or hub id.
        device: Where to put the model (default: where ``from_pretrained`` puts it for training;
            for inference pass ``"cpu"``/``"cuda"``).
        trainable: For an adapter: keep it a trainable ``PeftModel`` (RL continues the SFT adapter);
            otherwise it is merged into the base weights for fast decoding and the model is in eval mode.
        tokenizer: Use this tokenizer instead of loading one.

    Returns:
        ``(model, tokenizer, details)``; details say what was resolved (``path``, ``base_model``).

    Raises:
        PolicyLoadError: If a local path (or an adapter's base model) does not exist.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dynaweb_env.models import EMBEDDED_MODELS, resolve_model

    text = str(reference)
    local = Path(text).expanduser()
    if text not in EMBEDDED_MODELS and local.exists():
        path, kind = resolve_checkpoint_dir(local)
    else:
        resolved = resolve_model(text)
        path, kind = (resolved, "model") if not isinstance(resolved, Path) else resolve_checkpoint_dir(resolved)
    dtype = default_dtype(device)
    details: dict[str, Any] = {"path": str(path)}
    if kind == "model":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False)
        tokenizer_source = path
    else:
        from peft import PeftModel

        base_reference, base_path = adapter_base_path(Path(path))
        details["base_model"] = base_reference
        # transformers would look the base up on the hub by name; embedded names resolve locally.
        model = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype, trust_remote_code=False)
        model = PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
        if not trainable:
            model = model.merge_and_unload()
        tokenizer_source = path if (Path(path) / "tokenizer_config.json").is_file() else base_path
    if device is not None:
        model = model.to(device)
    if not trainable:
        model = model.eval()
    return model, tokenizer or AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=False), details


__all__ = [
    "PolicyLoadError",
    "TRAINER_STATE_FILE",
    "adapter_base_path",
    "checkpoint_step",
    "default_dtype",
    "is_complete_checkpoint",
    "last_checkpoint",
    "load_model_and_tokenizer",
    "resolve_checkpoint_dir",
    "trainer_state_problem",
]
