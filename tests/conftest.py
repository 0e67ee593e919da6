"""Shared pytest fixtures. Keep this file small: fixtures used by one test file belong in that file."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest


def _require_browser() -> None:
    """Skip (with the install command) when Chromium or the MiniWoB++ pages are missing."""
    from dynaweb_env.envs.browser import BrowserNotFoundError, find_chromium

    pytest.importorskip("browsergym.miniwob", reason="needs the browser extra: pip install 'dynaweb[browser]'")
    try:
        find_chromium()
    except BrowserNotFoundError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def real_web_env() -> Iterator[gym.Env]:
    """One ``RealWeb-v0`` on MiniWoB++ shared by the browser tests (a browser costs seconds to start).

    Tests reset it to the task they need (``options={"task": ..., "task_seed": ...}``) and must leave
    it usable (a test that crashes its browser resets it afterwards).
    """
    _require_browser()
    import dynaweb_env  # noqa: F401  (registers the envs)

    env = gym.make("RealWeb-v0", task="miniwob.click-button", render_mode="ansi")
    yield env
    env.close()


@pytest.fixture()
def require_browser() -> None:
    """Skip the test when Chromium or the MiniWoB++ pages are missing."""
    _require_browser()
