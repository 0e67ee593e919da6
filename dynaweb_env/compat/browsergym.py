"""What DynaWeb reads or replaces inside BrowserGym's env (``browsergym.core``).

BrowserGym's public API is ``gym.make`` and ``env.step``/``reset``. ``RealWeb-v0`` also needs to bound what an
observation extracts, to observe and validate again after sending a tab back, to check the active page, to
own the Playwright instance per thread, to keep the chat in memory and to set the element timeout of its
action functions; each of those is a function here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import require_version

#: The BrowserGym release these reaches were tested with (pinned in the ``browser`` extra).
BROWSERGYM_TESTED = "==0.14.3"
#: The element timeout BrowserGym writes into its action functions' code (replaced by :func:`set_element_timeout`).
BROWSERGYM_ELEMENT_TIMEOUT = "timeout=500"


def _require(purpose: str) -> None:
    require_version("browsergym-core", BROWSERGYM_TESTED, purpose)


def use_thread_playwright(ensure_playwright: Callable[[], Any]) -> None:
    """Make BrowserGym's env and chat get their Playwright from ``ensure_playwright`` (idempotent).

    BrowserGym looks the instance up through a private module-level function returning one process-wide
    instance; Playwright's sync objects belong to the thread that made them, so each thread needs its own.
    """
    _require("gives each thread its own Playwright")
    import browsergym.core.chat as browsergym_chat
    import browsergym.core.env as browsergym_env

    for module in (browsergym_env, browsergym_chat):
        if module._get_global_playwright is not ensure_playwright:
            module._get_global_playwright = ensure_playwright


def set_chat_factory(factory: Callable[..., Any]) -> None:
    """Make BrowserGym's env build its chat with ``factory`` (called with ``Chat``'s own arguments)."""
    _require("replaces the chat window of its env")
    import browsergym.core.env as browsergym_env

    browsergym_env.Chat = factory


def wrap_observation(env: Any, wrap: Callable[[Callable[[], dict]], Callable[[], dict]]) -> None:
    """Replace ``env``'s observation extraction by ``wrap(original_extraction)``.

    Args:
        env: An unwrapped ``browsergym.core.env.BrowserEnv``.
        wrap: Takes BrowserGym's own extraction (no arguments, returns the observation dict) and returns the one
            the env uses from now on.
    """
    _require("bounds what an observation extracts")
    env._get_obs = wrap(env._get_obs)


def observe(env: Any) -> dict:
    """``env``'s observation of its current page, extracted as ``step`` would (outside a step)."""
    _require("observes a page outside a step")
    return env._get_obs()


def validate_task(env: Any) -> tuple[float, bool, str, dict]:
    """``(reward, done, message, task_info)``: ``env``'s task judging its current page, outside a step."""
    _require("judges a page outside a step")
    return env._task_validate()


def check_active_page(env: Any) -> None:
    """Make ``env`` act on the page that is really active (BrowserGym's own check after a step)."""
    _require("checks which page is active")
    env._active_page_check()


def legacy_goal(goal_object: Any) -> str:
    """The task goal as BrowserGym's observation gives it (text), from its goal object (chat messages)."""
    _require("builds an observation of an oversized page")
    from browsergym.core.env import _try_to_extract_legacy_goal

    return _try_to_extract_legacy_goal(goal_object)


def set_element_timeout(action_code: str, timeout_ms: int) -> str:
    """BrowserGym's action code with every element operation's timeout set to ``timeout_ms``.

    BrowserGym's action functions pass a literal ``timeout=500`` (:data:`BROWSERGYM_ELEMENT_TIMEOUT`) to every
    element operation, and ``to_python_code`` copies their source into the code it returns.
    """
    _require("sets the element timeout of its action functions")
    return action_code.replace(BROWSERGYM_ELEMENT_TIMEOUT, f"timeout={int(timeout_ms)}")


__all__ = [
    "BROWSERGYM_ELEMENT_TIMEOUT",
    "BROWSERGYM_TESTED",
    "check_active_page",
    "legacy_goal",
    "observe",
    "set_chat_factory",
    "set_element_timeout",
    "use_thread_playwright",
    "validate_task",
    "wrap_observation",
]
