"""Ship a trained adapter: copy it into the package as one of :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`.

Command line: ``python -m dynaweb_env.models ship runs/wm-tree smollm2-135m-wm``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from . import models
from .models import (
    ADAPTER_CONFIG_FILE,
    WORLD_MODEL_INFO_FILE,
    adapter_base,
    model_prompt_style,
    world_model_output_mode,
)

#: The adapter weights file peft writes and reads.
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
#: What :func:`ship_adapter` copies besides the weights: the config and the run's provenance (not the
#: tokenizer: the base model has it).
SHIPPED_FILES = (ADAPTER_CONFIG_FILE, "wm_sft_summary.json")


def ship_adapter(source: str | os.PathLike[str], name: str) -> Path:
    """Copy a trained adapter directory into the package as the shipped adapter ``name``.

    Raises:
        ValueError: If ``name`` is not in :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`, ``source`` is not an
            adapter of an embedded model, or it was trained for another output mode than ``name`` is registered
            with.
    """
    if name not in models.SHIPPED_ADAPTERS:
        raise ValueError(f"unknown shipped adapter {name!r}; known: {', '.join(models.SHIPPED_ADAPTERS)}")
    source, adapter = Path(source), models.SHIPPED_ADAPTERS[name]
    base = adapter_base(source)
    if base not in models.EMBEDDED_MODELS:
        raise ValueError(f"{source} must be a LoRA adapter of an embedded model (its base is {base!r})")
    trained_mode = world_model_output_mode(str(source))
    if adapter.output_mode and trained_mode not in (None, adapter.output_mode):
        raise ValueError(f"{source} was trained for output_mode={trained_mode!r}, {name} is {adapter.output_mode!r}")
    adapter.path.mkdir(parents=True, exist_ok=True)
    for file_name in SHIPPED_FILES:
        if (source / file_name).is_file():
            shutil.copyfile(source / file_name, adapter.path / file_name)
    _save_half_precision(source / ADAPTER_WEIGHTS_FILE, adapter.path / ADAPTER_WEIGHTS_FILE)
    # The shipped adapter is prompted as its source was trained (read back by model_prompt_style).
    info = {"output_mode": adapter.output_mode} if adapter.output_mode else {}
    info["prompt_style"] = model_prompt_style(str(source))
    (adapter.path / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")
    return adapter.path


def _save_half_precision(source: Path, target: Path) -> None:
    # float16 halves the package size; peft casts the weights back to the model's dtype on loading.
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(source)
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()}, target)
    target.chmod(0o644)
