"""Memory of a training run, estimated before its first update, and the refusal of a run that cannot fit.

A GSPO update on a CPU keeps, for every episode of a micro-batch (``per_device_train_batch_size``
episodes passed through the model at once), the activations of every layer over the whole multi-turn
episode: system prompt, every observation and every policy turn. That, not a leak, is where the memory
of a default update went (``benchmarks/memory_peak.py`` measures it): a 135M policy needs up to ~2.4 MB per
token of an episode without gradient checkpointing and ~0.9 MB with it, so four 2,500-token episodes at
once need ~24 GB, and one episode with checkpointing ~3 GB.

:func:`estimate_training_memory` adds up the parts from the run's configuration (the longest episode its
budgets allow, the policy's shape, the frozen world model and judge), and :func:`check_training_memory`
refuses a run whose estimate exceeds the memory available, naming the flags that bring it down, before
any model is loaded. ``--memory-check false`` skips the check.

The per-token figures are measured on this project's 135M policy (``benchmarks/memory_peak.py
--activations``) and scaled by ``num_hidden_layers x hidden_size`` for other models: an estimate, meant
to err high.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3

#: Bytes of activations kept per episode token and per unit of ``num_hidden_layers x hidden_size`` during one
#: backward pass of the policy (fp32, LoRA on every linear layer), measured on SmolLM2-135M (30 x 576) on a CPU
#: (``benchmarks/memory_peak.py --activations``): with checkpointing, one update on 1 x 1,000 / 1 x 2,000 tokens took
#: 1.60 / 2.53 GiB (~0.9 MB a token); without it, 2,000 tokens took 3.2 GiB at one thread and 5.4 GB at two (the
#: training default), so ~2.4 MB a token is kept for the estimate,
ACTIVATION_BYTES_PER_TOKEN_UNIT = {False: 2.4e6 / (30 * 576), True: 0.9e6 / (30 * 576)}
#: ... on top of ~0.75 GB an update takes whatever its length (per parameter of the policy).
UPDATE_BYTES_PER_PARAMETER = 0.75e9 / 134_515_008
#: Python, torch, transformers and TRL imported, tokenizers, datasets and the env's bookkeeping (measured ~1 GiB).
PROCESS_BASE_BYTES = 1.0 * GIB
#: Characters of an accessibility tree per token (SmolLM2's tokenizer on MiniWoB++ trees: ~3.3).
CHARS_PER_TOKEN = 3.0
#: Tokens of an observation turn beyond its tree (goal, URL, last action, chat markup).
OBSERVATION_OVERHEAD_TOKENS = 80
#: Tokens of the policy's system prompt (the paper's, the longer style).
SYSTEM_PROMPT_TOKENS = 700
#: Bytes a frozen world model or judge takes per parameter on the CPU engine (float32) or a GPU (bf16).
FROZEN_BYTES_PER_PARAMETER = {"cpu": 4, "cuda": 2}
#: One RealWeb-v0 env: Chromium and its BrowserGym page (measured ~640 MB).
BROWSER_BYTES = 0.65 * GIB
#: Fraction of the machine's available memory a run may plan to use (the rest: the OS, page cache, the browser).
HEADROOM = 0.85


class MemoryBudgetError(RuntimeError):
    """A run whose estimated peak memory exceeds what the machine has available (raised before the first update)."""


@dataclass
class MemoryEstimate:
    """Estimated peak resident memory of a training process, by part (bytes).

    Attributes:
        parts: Bytes per part (``process``, ``policy weights``, ``optimizer``, ``activations``, ``world model``, ...).
        episode_tokens: The longest episode the run's budgets allow, in tokens.
        micro_batch: Episodes passed through the model at once (``per_device_train_batch_size``).
        available: Bytes of memory available on the machine when estimated (``None``: unknown).
    """

    parts: dict[str, float] = field(default_factory=dict)
    episode_tokens: int = 0
    micro_batch: int = 1
    available: float | None = None

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def describe(self) -> str:
        """One line: the total and its parts in GiB."""
        parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in self.parts.items() if value >= 0.05 * GIB)
        return f"{self.total / GIB:.1f} GiB ({parts})"


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a causal LM: its depth, width and parameter count."""

    num_hidden_layers: int
    hidden_size: int
    parameters: int

    @classmethod
    def of_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a ``config.json`` mapping (parameters from the shapes when the file does not say)."""
        layers, hidden = int(config["num_hidden_layers"]), int(config["hidden_size"])
        intermediate = int(config.get("intermediate_size") or 4 * hidden)
        vocab = int(config.get("vocab_size") or 50_000)
        per_layer = 4 * hidden * hidden + 3 * hidden * intermediate
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
        return cls(layers, hidden, layers * per_layer + embeddings)


#: SmolLM2-135M, the embedded default (used when a reference's config cannot be read without loading it).
SMOLLM2_135M = ModelShape(num_hidden_layers=30, hidden_size=576, parameters=134_515_008)


def model_shape(reference: str | os.PathLike[str] | None) -> ModelShape:
    """The shape of a model reference (embedded name, shipped adapter, local directory) without loading weights.

    An adapter's shape is its base model's. References whose ``config.json`` is not on disk (hub ids, servers)
    get the embedded default's shape.
    """
    if not reference or str(reference).startswith(("openai:", "vllm:")):
        return SMOLLM2_135M
    try:
        from dynaweb_env.models import resolve_model

        path = Path(resolve_model(str(reference).split("?")[0]))
    except Exception:  # noqa: BLE001 - an unresolvable reference fails later, where it is loaded, with its own error
        return SMOLLM2_135M
    for _ in range(3):  # an adapter (or a checkpoint of one) names its base model
        config_file, adapter_file = path / "config.json", path / "adapter_config.json"
        if config_file.is_file():
            try:
                return ModelShape.of_config(json.loads(config_file.read_text()))
            except (ValueError, KeyError, TypeError):
                return SMOLLM2_135M
        if not adapter_file.is_file():
            return SMOLLM2_135M
        try:
            from dynaweb_env.models import resolve_model

            path = Path(resolve_model(json.loads(adapter_file.read_text())["base_model_name_or_path"]))
        except Exception:  # noqa: BLE001
            return SMOLLM2_135M
    return SMOLLM2_135M


def longest_episode_tokens(args: Any) -> int:
    """The most tokens one training episode can hold under ``args``' budgets.

    The first prompt (system prompt and first observation) plus the completion: every policy turn
    (``max_turn_tokens``) and every observation after the first, capped by ``max_completion_length``.
    """
    tree_chars = args.max_axtree_chars or 24_000
    observation = int(tree_chars / CHARS_PER_TOKEN) + OBSERVATION_OVERHEAD_TOKENS
    steps = args.agent_max_steps
    completion = steps * args.max_turn_tokens + (steps - 1) * observation
    if args.max_completion_length:
        completion = min(completion, args.max_completion_length)
    return SYSTEM_PROMPT_TOKENS + observation + completion


def available_memory() -> float | None:
    """Bytes of memory available to a new process (``MemAvailable``; ``None`` where unknown)."""
    try:
        import psutil

        return float(psutil.virtual_memory().available)
    except ImportError:
        return None


def estimate_training_memory(args: Any) -> MemoryEstimate:
    """Estimate the peak resident memory of ``dynaweb-train`` with configuration ``args`` (a ``GSPOConfig``).

    On a GPU only the host-side parts are counted against host memory; the policy's activations and weights
    live on the device, where this estimate does not look.
    """
    import torch

    on_gpu = torch.cuda.is_available() and not getattr(args, "use_cpu", False)
    policy = model_shape(args.policy)
    tokens = longest_episode_tokens(args)
    micro_batch = max(1, int(args.per_device_train_batch_size))
    checkpointing = bool(args.gradient_checkpointing)
    estimate = MemoryEstimate(episode_tokens=tokens, micro_batch=micro_batch, available=available_memory())
    estimate.parts["process"] = PROCESS_BASE_BYTES
    if not on_gpu:
        weights = policy.parameters * 4.0
        estimate.parts["policy weights"] = weights
        if not args.use_peft:  # gradients and AdamW's two moments of every weight
            estimate.parts["gradients and optimizer"] = 3 * weights
        unit = policy.num_hidden_layers * policy.hidden_size
        estimate.parts["update"] = policy.parameters * UPDATE_BYTES_PER_PARAMETER
        estimate.parts["activations"] = micro_batch * tokens * unit * ACTIVATION_BYTES_PER_TOKEN_UNIT[checkpointing]
    if args.environment in ("dream", "mix"):
        from dynaweb_env.models import DEFAULT_JUDGE

        bytes_per = FROZEN_BYTES_PER_PARAMETER["cuda" if on_gpu else "cpu"]
        world_model = getattr(args, "world_model", None)
        judge = getattr(args, "judge", None)
        if not str(world_model or "").startswith(("openai:", "vllm:")):
            estimate.parts["world model"] = model_shape(world_model).parameters * bytes_per
        # None: DreamWeb-v0's default, a shipped trained judge of its own (every one the same shape)
        own_judge = judge is None or (judge not in ("world_model", "world-model") and judge != world_model)
        if own_judge and not str(judge).startswith("openai:"):
            estimate.parts["judge"] = model_shape(judge or DEFAULT_JUDGE).parameters * bytes_per
    if args.environment in ("real", "mix"):
        browsers = args.num_envs or args.per_device_train_batch_size * args.gradient_accumulation_steps
        estimate.parts["browsers"] = browsers * BROWSER_BYTES
    return estimate


def check_training_memory(args: Any) -> MemoryEstimate:
    """Refuse, before anything is loaded, a run whose estimated peak memory exceeds what is available.

    Returns:
        The estimate (for the run's log).

    Raises:
        MemoryBudgetError: With the estimate, what is available and the flags that bring the estimate down.
    """
    estimate = estimate_training_memory(args)
    if estimate.available is None or estimate.total <= HEADROOM * estimate.available:
        return estimate
    fixes = []
    if not args.gradient_checkpointing:
        fixes.append("--gradient-checkpointing true")
    if args.per_device_train_batch_size > 1:
        group = args.per_device_train_batch_size * args.gradient_accumulation_steps
        fixes.append(f"--per-device-train-batch-size 1 --gradient-accumulation-steps {group}")
    fixes.append(f"--max-completion-length {max(args.max_turn_tokens, 2048)}")
    if args.max_axtree_chars == 0 or args.max_axtree_chars > 1500:
        fixes.append("--max-axtree-chars 1500")
    if args.agent_max_steps > 5:
        fixes.append("--agent-max-steps 5")
    if not args.use_peft:
        fixes.append("--use-peft true")
    raise MemoryBudgetError(
        f"this run needs an estimated {estimate.describe()} at its peak, for episodes of up to "
        f"{estimate.episode_tokens} tokens, {estimate.micro_batch} at once; this machine has "
        f"{estimate.available / GIB:.1f} GiB available. Bring it down with: {' '.join(fixes)} "
        f"(or run on a machine with more memory; --memory-check false skips this check)"
    )


__all__ = [
    "MemoryBudgetError",
    "MemoryEstimate",
    "ModelShape",
    "check_training_memory",
    "estimate_training_memory",
    "longest_episode_tokens",
    "model_shape",
]
