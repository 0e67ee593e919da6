"""Warnings of other libraries that a DynaWeb user cannot act on, silenced in one place.

Some warnings come from one library about how another one (or DynaWeb's pinned combination of them) calls it:
transformers 5 deprecates ``gradient_checkpointing`` in favour of ``activation_checkpointing``, but TRL's own
``GRPOConfig`` and ``SFTConfig`` default to the old name, so every run warns whatever its flags. A user can do
nothing about those, and a newcomer reads them as a fault. Each one is listed in :data:`LIBRARY_WARNINGS` with the
library module that warns, the category, the start of the message and why no flag of a DynaWeb command can avoid
it; :func:`silence_library_warnings` adds one filter per entry, matched by module, category and message, never a
whole category or library.

The filters are appended after Python's own (``warnings.filterwarnings(..., append=True)``), so a ``-W`` option or
``PYTHONWARNINGS`` still shows them: ``PYTHONWARNINGS=default::FutureWarning dynaweb-train ...``. Importing
:mod:`dynaweb_trainer` installs them (every DynaWeb command starts there); ``tests/test_compat.py`` checks that
each entry still matches what the installed library warns, so an entry whose library stopped warning is noticed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class LibraryWarning:
    """One warning of another library that DynaWeb silences.

    Args:
        module: Regular expression of the module that issues the warning (``warnings.filterwarnings``' ``module``).
        category: The warning's class.
        message: Regular expression that the start of the message matches.
        why: Why a DynaWeb user cannot act on it.
    """

    module: str
    category: type[Warning]
    message: str
    why: str


#: The warnings :func:`silence_library_warnings` silences.
LIBRARY_WARNINGS: tuple[LibraryWarning, ...] = (
    LibraryWarning(
        module=r"transformers\.training_args",
        category=FutureWarning,
        message=r"`gradient_checkpointing(_kwargs)?` is deprecated",
        why="TRL's GRPOConfig and SFTConfig default gradient_checkpointing to True under its old name, so every "
        "config of a DynaWeb command warns, whatever its flags",
    ),
    LibraryWarning(
        module=r"transformers\.modeling_utils",
        category=FutureWarning,
        message=r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)` is "
        r"deprecated",
        why="TRL (trl.models.utils, around each rollout's generation) and peft call the old names of a model's "
        "checkpointing methods and property",
    ),
    LibraryWarning(
        module=r"torch\.utils\.data\.dataloader",
        category=UserWarning,
        message=r"'pin_memory' argument is set as true but no accelerator is found",
        why="transformers' TrainingArguments pin the data loader's memory by default; without a GPU torch ignores "
        "it and says so: nothing changes whichever way it is set",
    ),
)


def silence_library_warnings() -> None:
    """Add an ``ignore`` filter for each of :data:`LIBRARY_WARNINGS`, after Python's own filters (idempotent)."""
    for entry in LIBRARY_WARNINGS:
        warnings.filterwarnings(
            "ignore", message=entry.message, category=entry.category, module=entry.module, append=True
        )


__all__ = ["LIBRARY_WARNINGS", "LibraryWarning", "silence_library_warnings"]
