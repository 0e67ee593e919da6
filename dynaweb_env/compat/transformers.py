"""What DynaWeb reaches inside transformers' ``Trainer``."""

from __future__ import annotations

from typing import Any

from . import require_version

#: The transformers releases these reaches were tested with (the core dependency's range; measured with 5.24).
TRANSFORMERS_TESTED = ">=5.0,<6"


def save_checkpoint(trainer: Any) -> None:
    """Write ``trainer``'s ``checkpoint-<global_step>`` now, as its own save schedule would (model, optimizer, state).

    Raises:
        UntestedVersionError: If the installed transformers is outside :data:`TRANSFORMERS_TESTED`.
    """
    require_version("transformers", TRANSFORMERS_TESTED, "saves a checkpoint on interrupt (Trainer._save_checkpoint)")
    trainer._save_checkpoint(trainer.model, trial=None)


def require_cache_layer_api() -> None:
    """Check the transformers version before subclassing its cache layers (``DynamicLayer``'s internals).

    Raises:
        UntestedVersionError: If the installed transformers is outside :data:`TRANSFORMERS_TESTED`.
    """
    require_version("transformers", TRANSFORMERS_TESTED, "subclasses its KV-cache layers (DynamicLayer)")


__all__ = ["TRANSFORMERS_TESTED", "require_cache_layer_api", "save_checkpoint"]
