"""A dedicated thread that owns one Playwright instance and runs every call on its browsers.

Playwright's sync objects may only be used on the thread that created them. A ``RealWeb-v0`` env
gives its browser a thread of its own and marshals each reset and step to it, so the env's methods
may be called from any thread, and several envs may run on several threads in one process (thread
pools in SkyRL, GEM's vector env, an OpenEnv server's sessions) without sharing a Playwright.

The caller waits with a time limit. A call that outlives it is the caller's to handle (the env kills
the browser, which frees the thread); a thread that still does not come back is abandoned, and the
env starts a new one.
"""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from .browser import stop_playwright

T = TypeVar("T")

_names = itertools.count()
_live: weakref.WeakSet[BrowserThread] = weakref.WeakSet()


class BrowserThread:
    """Runs functions on one daemon thread, which starts Playwright on first use and stops it on :meth:`close`.

    Args:
        name: The thread's name (a number is appended).
    """

    def __init__(self, name: str = "dynaweb-browser"):
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self._pid = os.getpid()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=f"{name}-{next(_names)}", daemon=True)
        self._thread.start()
        _live.add(self)

    @property
    def alive(self) -> bool:
        """Whether the thread can still take calls (it was not closed, and this is the process that started it)."""
        return self._thread.is_alive() and self._pid == os.getpid() and not self._closing

    def submit(self, function: Callable[[], T]) -> Future[T]:
        """Run ``function()`` on the browser thread; its result or exception arrives in the returned future.

        A call made from the browser thread itself (e.g. from a route handler) runs at once.

        Raises:
            RuntimeError: If the thread was closed.
        """
        if threading.current_thread() is self._thread:
            future: Future[T] = Future()
            try:
                future.set_result(function())
            except Exception as error:  # noqa: BLE001 - handed to the caller, as from the thread
                future.set_exception(error)
            return future
        if not self.alive:
            raise RuntimeError("the browser thread was closed")
        future = Future()
        self._calls.put((function, future))
        return future

    def close(self, timeout: float = 30.0) -> bool:
        """Stop Playwright on the thread and end it; returns whether it ended within ``timeout`` seconds."""
        if self._pid != os.getpid():
            return True  # a forked child does not own its parent's thread
        if self._thread.is_alive() and not self._closing:
            self._closing = True
            self._calls.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        try:
            while (item := self._calls.get()) is not None:
                function, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(function())
                except BaseException as error:  # noqa: BLE001 - handed to the caller, who decides
                    future.set_exception(error)
        finally:
            stop_playwright()


@atexit.register
def _close_live_threads() -> None:
    # Stop every Playwright driver (and its browsers) cleanly rather than leave them to the OS.
    for thread in list(_live):
        thread.close(timeout=5.0)


__all__ = ["BrowserThread"]
