"""Ship a trained adapter: copy it into the package as one of :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`.

Command line: ``python -m dynaweb_env.models ship runs/wm-tree smollm2-135m-wm [--max-rank 8]``.

A shipped adapter is stored in float16 and at LoRA rank :data:`SHIPPED_MAX_RANK` at most, so the
package stays a few MB: an adapter trained at a higher rank is cut to its best rank-``r``
approximation (:func:`shrink_lora_rank`, the truncated SVD of each layer's weight update).
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
#: The highest LoRA rank shipped: rank 8 on every linear layer of SmolLM2-135M is 4.9 MB in float16.
SHIPPED_MAX_RANK = 8


def ship_adapter(source: str | os.PathLike[str], name: str, max_rank: int | None = SHIPPED_MAX_RANK) -> Path:
    """Copy a trained adapter directory into the package as the shipped adapter ``name``.

    Args:
        source: The adapter directory (e.g. the ``output_dir`` of ``dynaweb-train-wm``).
        name: One of :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`.
        max_rank: An adapter of a higher LoRA rank is shipped at this rank (:func:`shrink_lora_rank`);
            ``None`` ships it at its own rank. Measure the shipped model's fidelity after a cut.

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
    if source.resolve() == adapter.path.resolve():
        raise ValueError(f"{source} is the shipped adapter {name} itself: copy it elsewhere first")
    adapter.path.mkdir(parents=True, exist_ok=True)
    for file_name in SHIPPED_FILES:
        if (source / file_name).is_file():
            shutil.copyfile(source / file_name, adapter.path / file_name)
    _save_half_precision(source / ADAPTER_WEIGHTS_FILE, adapter.path / ADAPTER_WEIGHTS_FILE)
    if max_rank is not None and json.loads((source / ADAPTER_CONFIG_FILE).read_text())["r"] > max_rank:
        shrink_lora_rank(adapter.path, max_rank)
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


def shrink_lora_rank(adapter_dir: str | os.PathLike[str], rank: int) -> dict[str, float]:
    """Cut a LoRA adapter, in place, to its best rank-``rank`` approximation.

    Each layer's update ``scaling * B @ A`` is replaced by its truncated SVD (the closest update of
    that rank, Eckart-Young), split evenly into the new ``A`` and ``B``; ``lora_alpha`` becomes
    ``rank`` so the new scaling is 1. This is what peft's ``add_weighted_adapter(combination_type="svd")``
    computes, without loading the base model.

    Returns:
        The share of each update's squared Frobenius norm kept, averaged over layers (``kept_energy``)
        and at its lowest (``min_kept_energy``): how much of the update the cut keeps.

    Raises:
        ValueError: If ``rank < 1``, or the adapter uses per-layer ranks or alphas, DoRA, or biases.
    """
    import torch
    from safetensors.torch import load_file, save_file

    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    adapter_dir = Path(adapter_dir)
    config_path, weights_path = adapter_dir / ADAPTER_CONFIG_FILE, adapter_dir / ADAPTER_WEIGHTS_FILE
    config = json.loads(config_path.read_text())
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("use_dora") or config.get("lora_bias"):
        raise ValueError(f"{adapter_dir}: per-layer ranks or alphas, DoRA and LoRA biases are not supported")
    if config["r"] <= rank:
        return {"kept_energy": 1.0, "min_kept_energy": 1.0}
    # rsLoRA scales by alpha / sqrt(r); plain LoRA by alpha / r.
    scaling = config["lora_alpha"] / (config["r"] ** 0.5 if config.get("use_rslora") else config["r"])
    weights = load_file(weights_path)
    shrunk, kept = {}, []
    for key_a in [key for key in weights if ".lora_A." in key]:
        key_b = key_a.replace(".lora_A.", ".lora_B.")
        lora_a, lora_b = weights[key_a].float(), weights[key_b].float()
        update = scaling * lora_b @ lora_a
        u, s, vh = torch.linalg.svd(update, full_matrices=False)
        kept.append(float((s[:rank] ** 2).sum() / (s**2).sum().clamp_min(1e-30)))
        root = s[:rank].sqrt()
        shrunk[key_b] = (u[:, :rank] * root).to(weights[key_b].dtype).contiguous()
        shrunk[key_a] = (root[:, None] * vh[:rank]).to(weights[key_a].dtype).contiguous()
    rest = {key: value for key, value in weights.items() if key not in shrunk}
    save_file({**rest, **shrunk}, weights_path)
    weights_path.chmod(0o644)
    config.update(r=rank, lora_alpha=rank, use_rslora=False)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return {"kept_energy": round(sum(kept) / len(kept), 4), "min_kept_energy": round(min(kept), 4)}
