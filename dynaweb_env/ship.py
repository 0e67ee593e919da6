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
#: The training record ``dynaweb-train-wm`` writes beside an adapter.
TRAINING_RECORD_FILE = "wm_sft_summary.json"
#: The record ``dynaweb-average-adapters`` writes beside an averaged adapter (its sources and their weights).
AVERAGE_RECORD_FILE = "adapter_average.json"
#: What :func:`ship_adapter` copies besides the weights and config (which it writes): the run's provenance
#: (not the tokenizer: the base model has it).
SHIPPED_FILES = (TRAINING_RECORD_FILE, AVERAGE_RECORD_FILE)
#: The highest LoRA rank shipped: rank 8 on every linear layer of SmolLM2-135M is 4.9 MB in float16.
SHIPPED_MAX_RANK = 8


def ship_adapter(source: str | os.PathLike[str], name: str, max_rank: int | None = SHIPPED_MAX_RANK) -> Path:
    """Copy a trained adapter directory into the package as the shipped adapter ``name``.

    Args:
        source: The adapter directory (e.g. the ``output_dir`` of ``dynaweb-train-wm``).
        name: One of :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`.
        max_rank: An adapter of a higher LoRA rank is shipped at this rank (:func:`shrink_lora_rank`), and the cut
            is recorded beside it (``lora_rank_cut`` in :data:`~dynaweb_env.models.WORLD_MODEL_INFO_FILE`);
            ``None`` ships it at its own rank. Measure the shipped model's fidelity after a cut.

    Raises:
        ValueError: If ``name`` is not in :data:`~dynaweb_env.models.SHIPPED_ADAPTERS`, ``source`` is not an
            adapter of an embedded model, it was trained for another output mode than ``name`` is registered
            with, or it needs a cut :func:`shrink_lora_rank` cannot make. Nothing is copied then.
    """
    import torch
    from safetensors.torch import load_file, save_file

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
    config = json.loads((source / ADAPTER_CONFIG_FILE).read_text())
    weights = load_file(source / ADAPTER_WEIGHTS_FILE)
    cut = None
    if max_rank is not None and config["r"] > max_rank:
        # Cut before halving the precision, and before anything is written: a refused cut changes nothing.
        from_rank = config["r"]
        weights, config, kept = shrink_lora_rank(weights, config, max_rank)
        cut = {"from_rank": from_rank, "to_rank": max_rank, **kept}
    adapter.path.mkdir(parents=True, exist_ok=True)
    for file_name in SHIPPED_FILES:
        if (source / file_name).is_file():
            shutil.copyfile(source / file_name, adapter.path / file_name)
        else:  # a record of the adapter shipped before would describe another model
            (adapter.path / file_name).unlink(missing_ok=True)
    (adapter.path / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    # float16 halves the package size; peft casts the weights back to the model's dtype on loading.
    half = {key: value.to(torch.float16) if value.is_floating_point() else value for key, value in weights.items()}
    save_file(half, adapter.path / ADAPTER_WEIGHTS_FILE)
    (adapter.path / ADAPTER_WEIGHTS_FILE).chmod(0o644)
    # The shipped adapter is prompted as its source was trained (read back by model_prompt_style).
    info: dict[str, object] = {"output_mode": adapter.output_mode} if adapter.output_mode else {}
    info["prompt_style"] = model_prompt_style(str(source))
    if cut:
        info["lora_rank_cut"] = cut
    (adapter.path / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")
    return adapter.path


def shrink_lora_rank(weights: dict, config: dict, rank: int) -> tuple[dict, dict, dict[str, float]]:
    """A LoRA adapter's weights and config cut to its best rank-``rank`` approximation.

    Each layer's update ``scaling * B @ A`` is replaced by its truncated SVD (the closest update of that
    rank, Eckart-Young), ``U_k sqrt(S_k)`` as the new ``B`` and ``sqrt(S_k) V_k`` as the new ``A``;
    ``lora_alpha`` becomes ``rank`` so the new scaling is 1. The product is the one peft's
    ``add_weighted_adapter(combination_type="svd")`` builds (peft puts all of ``S`` in ``B``), without
    loading the base model.

    Args:
        weights: The adapter's state dict (``adapter_model.safetensors``), not modified.
        config: Its ``adapter_config.json``, not modified.
        rank: The new rank; an adapter of this rank or lower comes back unchanged.

    Returns:
        ``(weights, config, kept)``: the new weights (in their original dtypes) and config, and the share
        of each update's squared Frobenius norm the cut keeps, averaged over layers (``kept_energy``) and
        at its lowest (``min_kept_energy``). A layer whose update is zero loses nothing (1.0).

    Raises:
        ValueError: If ``rank < 1`` or above a layer's own dimensions, or the adapter has per-layer ranks or
            alphas, DoRA, LoRA biases, LoRA on embeddings, or no LoRA pairs at all.
    """
    import torch

    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("use_dora") or config.get("lora_bias"):
        raise ValueError("per-layer ranks or alphas, DoRA and LoRA biases are not supported")
    if config["r"] <= rank:
        return dict(weights), dict(config), {"kept_energy": 1.0, "min_kept_energy": 1.0}
    pairs = [key for key in weights if ".lora_A." in key]
    unknown = [key for key in weights if "lora_" in key and ".lora_A." not in key and ".lora_B." not in key]
    if unknown or not pairs:
        raise ValueError(f"only LoRA A/B pairs of linear layers can be cut; found {unknown[:3] or 'no pairs'}")
    # rsLoRA scales by alpha / sqrt(r); plain LoRA by alpha / r.
    scaling = config["lora_alpha"] / (config["r"] ** 0.5 if config.get("use_rslora") else config["r"])
    shrunk, kept_energy = dict(weights), []
    for key_a in pairs:
        key_b = key_a.replace(".lora_A.", ".lora_B.")
        update = scaling * weights[key_b].float() @ weights[key_a].float()
        if rank > min(update.shape):
            raise ValueError(f"rank {rank} exceeds the dimensions {tuple(update.shape)} of {key_a}")
        u, s, vh = torch.linalg.svd(update, full_matrices=False)
        total = float((s**2).sum())
        kept_energy.append(float((s[:rank] ** 2).sum()) / total if total > 0 else 1.0)
        sqrt_s = s[:rank].sqrt()
        shrunk[key_b] = (u[:, :rank] * sqrt_s).to(weights[key_b].dtype).contiguous()
        shrunk[key_a] = (sqrt_s[:, None] * vh[:rank]).to(weights[key_a].dtype).contiguous()
    new_config = {**config, "r": rank, "lora_alpha": rank, "use_rslora": False}
    kept = {"kept_energy": round(sum(kept_energy) / len(kept_energy), 4), "min_kept_energy": round(min(kept_energy), 4)}
    return shrunk, new_config, kept
