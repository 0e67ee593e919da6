"""Policy rollouts on the CTranslate2 engine while torch trains, as TRL does with vLLM (``--use-engine``).

TRL's vLLM integration generates in the engine, trains in torch, pushes the weights to the engine after
every optimizer step (``vllm_generation.sync_weights()``, called by ``GRPOTrainer`` whenever
``global_step`` moved) and corrects the engine/trainer mismatch with an importance-sampling weight
computed from the engine's sampling log-probs (``vllm_importance_sampling_correction``). This module
plugs the CPU engine into exactly those hooks:

- :class:`EngineWeightSync` stands in for ``trainer.vllm_generation``: its ``sync_weights`` merges the
  LoRA adapter into the live model (``merge_adapter`` / ``unmerge_adapter``, as TRL's vLLM sync does),
  converts it in memory (:func:`~dynaweb_env.llm.ct2_convert.convert_model`, int8) and reloads the
  engine. Each sync's seconds are logged as ``engine/sync_seconds``.
- The policy is converted with the rollout temperature folded into its output layer, so the engine's
  log-probs are ``log_softmax(logits / T)`` of the sampled tokens: the quantity TRL recomputes as
  ``old_per_token_logps``. With ``use_vllm`` set on the trainer (and no vLLM built), TRL applies its
  importance-sampling correction to them unchanged (``vllm_importance_sampling_mode`` and its clip
  bounds apply); expert slots carry NaN log-probs, which TRL turns into a ratio of 1.

Example:
    dynaweb-train --env dream --use-engine        # rollouts on the engine, weights synced each step
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dynaweb_env.compat import trl as compat_trl
from dynaweb_env.llm.ct2_backend import CT2Backend
from dynaweb_env.llm.ct2_convert import convert_model


@contextlib.contextmanager
def merged_weights(model: Any) -> Iterator[Any]:
    """The plain causal LM of ``model`` with its LoRA adapter merged in, unmerged again on exit.

    A model without an adapter is yielded as is. Merging in place (peft's ``merge_adapter``) avoids a
    copy of the weights, as TRL's vLLM weight sync does.
    """
    if not hasattr(model, "merge_adapter"):
        yield model
        return
    model.merge_adapter()
    try:
        yield model.get_base_model()
    finally:
        model.unmerge_adapter()


class EngineWeightSync:
    """The trainer's policy on the CTranslate2 engine, re-converted after every optimizer step.

    Args:
        trainer: The ``GRPOTrainer`` (a :class:`~dynaweb_trainer.trainer.DynaWebTrainer`).
        quantization: Engine weight type (``int8`` default; ``float32`` for the closest match to torch).
        max_batch_size: Most sequences the engine decodes together.

    Attributes:
        backend: The :class:`~dynaweb_env.llm.ct2_backend.CT2Backend` rollouts generate with (``None``
            until the first sync).
        sync_seconds: Wall time of each sync (merge, convert, reload).
    """

    def __init__(self, trainer: Any, quantization: str = "int8", max_batch_size: int = 64):
        self.trainer = trainer
        self.quantization = quantization
        self.max_batch_size = max_batch_size
        self.backend: CT2Backend | None = None
        self.sync_seconds: list[float] = []
        self._workdir = Path(tempfile.mkdtemp(prefix="dynaweb-engine-policy-"))
        self._version = 0

    def sync_weights(self) -> None:
        """Convert the live policy (adapter merged) and load it into the engine."""
        import torch

        start = time.perf_counter()
        trainer = self.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        target = self._workdir / f"v{self._version}"
        with torch.no_grad(), merged_weights(model) as plain:
            convert_model(
                plain,
                trainer.processing_class,
                target,
                quantization=self.quantization,
                logits_temperature=trainer.args.temperature,
                source=f"{trainer.args.policy} at step {trainer.state.global_step}",
            )
        if self.backend is None:
            self.backend = CT2Backend(
                target,
                trainer.processing_class,
                quantization=self.quantization,
                max_batch_size=self.max_batch_size,
                model_name=f"ct2:{trainer.args.policy}",
            )
        else:
            self.backend.reload(target)
        if self._version:  # the previous version is loaded no more
            shutil.rmtree(self._workdir / f"v{self._version - 1}", ignore_errors=True)
        self._version += 1
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        compat_trl.log_metric(trainer, "engine/sync_seconds", seconds)

    def close(self) -> None:
        """Remove the converted weights."""
        self.backend = None
        shutil.rmtree(self._workdir, ignore_errors=True)


def attach_engine(trainer: Any, quantization: str = "int8") -> EngineWeightSync:
    """Make ``trainer`` roll out on the engine with TRL's vLLM hooks (see the module docstring).

    The trainer must not have built vLLM itself (``use_vllm=False`` in its arguments).

    Raises:
        ValueError: If the trainer already generates with vLLM.
    """
    if getattr(trainer, "use_vllm", False):
        raise ValueError("--use-engine replaces vLLM on a CPU; do not combine it with --use_vllm")
    sync = EngineWeightSync(trainer, quantization)
    trainer.engine_sync = sync
    # TRL calls sync.sync_weights() whenever global_step moved, first at once (converting the initial weights),
    # and applies its importance-sampling correction; no vLLM is built.
    compat_trl.install_weight_sync(trainer, sync)
    return sync


def engine_backend(trainer: Any) -> CT2Backend | None:
    """The engine backend of a trainer :func:`attach_engine` was applied to (``None`` otherwise)."""
    sync = getattr(trainer, "engine_sync", None)
    if sync is None:
        return None
    if sync.backend is None:  # rollouts called before TRL's first sync (e.g. directly in a test)
        sync.sync_weights()
        compat_trl.mark_weights_synced(trainer)
    return sync.backend


__all__ = ["EngineWeightSync", "attach_engine", "engine_backend", "merged_weights"]
