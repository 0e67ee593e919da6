"""What DynaWeb reaches inside transformers' ``Trainer`` and ``HfArgumentParser``."""

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


def word_negated_flags(parser: Any) -> Any:
    """Give each ``--no_X`` flag ``HfArgumentParser`` adds for a boolean field defaulting to true a help of its own.

    ``HfArgumentParser`` (and TRL's ``TrlParser``) copy the field's help onto ``--no_X``, so ``--help`` shows
    ``--no_headless`` with the help of ``--headless``. This rewrites it to say what the flag does. The
    argparse actions are read through ``parser._actions`` (argparse has no public list of them).

    Returns:
        ``parser``, changed in place.

    Raises:
        UntestedVersionError: If the installed transformers is outside :data:`TRANSFORMERS_TESTED`.
    """
    require_version("transformers", TRANSFORMERS_TESTED, "adds --no_X flags with the field's help (HfArgumentParser)")
    for action in parser._actions:
        negated = [flag for flag in action.option_strings if flag.startswith("--no_")]
        if negated and action.const is False:
            positive = "--" + negated[0].removeprefix("--no_")
            action.help = f"Turn {positive} off (the same as {positive} false)."
    return parser


__all__ = ["TRANSFORMERS_TESTED", "require_cache_layer_api", "save_checkpoint", "word_negated_flags"]
