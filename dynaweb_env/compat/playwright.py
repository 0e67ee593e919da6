"""What DynaWeb changes inside Playwright (the version browsergym-core pins)."""

from __future__ import annotations

import inspect
from typing import Any

from . import require_version

#: The Playwright releases these patches were tested with (browsergym-core 0.14.3 pins 1.44).
PLAYWRIGHT_TESTED = ">=1.44,<1.45"


class _ContextFreeInspect:
    """Stands in for the ``inspect`` module inside Playwright: ``stack()`` without source lines."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 0) -> list[inspect.FrameInfo]:
        return inspect.stack(0)


def cheap_stack_capture() -> None:
    """Make Playwright's per-call stack capture skip reading source lines (idempotent).

    Playwright 1.44 calls ``inspect.stack()`` on every API call only to name the call in traces; reading
    source lines for each frame cost ~1 s per MiniWoB reset here. Later Playwright releases call
    ``inspect.stack(0)``; this does the same for the pinned one, in its private ``_impl`` modules.

    Raises:
        UntestedVersionError: If the installed Playwright is outside :data:`PLAYWRIGHT_TESTED`.
    """
    require_version("playwright", PLAYWRIGHT_TESTED, "skips reading source lines in Playwright's call tracing")
    from playwright._impl import _connection, _network, _sync_base

    for module in (_connection, _network, _sync_base):
        if getattr(module, "inspect", None) is inspect:
            module.inspect = _ContextFreeInspect()


def stack_capture_is_cheap() -> bool:
    """Whether :func:`cheap_stack_capture` is in effect in every module it patches."""
    from playwright._impl import _connection, _network, _sync_base

    return all(isinstance(getattr(module, "inspect", None), _ContextFreeInspect) for module in (
        _connection, _network, _sync_base
    ))  # fmt: skip


__all__ = ["PLAYWRIGHT_TESTED", "cheap_stack_capture", "stack_capture_is_cheap"]
