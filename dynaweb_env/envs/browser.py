"""Launching Debian Chromium for BrowserGym, one Playwright instance per thread.

BrowserGym launches two browsers per environment reset (the task's page and a chat window) from a
module-level Playwright instance, and only the first launch honours ``pw_chromium_kwargs``.
Playwright cannot download its own browser on the machines DynaWeb targets, so
:func:`ensure_playwright` starts Playwright itself and wraps ``chromium.launch`` so that *every*
launch uses the system Chromium with the flags below.

Playwright's sync API belongs to the thread (and process) that started it, and BrowserGym's one
process-wide instance, replaced by whichever thread used it last, breaks every host that runs envs
on several threads. So the instance here is *per thread*: BrowserGym's lookup is redirected to
:func:`ensure_playwright`, which starts one for the calling thread on first use (and a new one in a
forked child, which must not reuse its parent's). ``RealWeb-v0`` runs each env's browser on a
dedicated thread of its own (:class:`~dynaweb_env.envs.browser_thread.BrowserThread`).

BrowserGym closes and relaunches both browsers at every reset. The wrapper keeps a closed browser
(all its contexts closed, so no page state survives) and hands it to the next launch with the same
arguments on the same thread, which roughly halves a reset; ``DYNAWEB_REUSE_BROWSERS=0`` turns this
off. It also records the process id of each browser (:func:`browser_pid`) so that a hung or crashed
browser is killed with its whole process tree (:func:`close_browser`, :func:`kill_process_tree`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..compat import browsergym as compat_browsergym
from ..compat import playwright as compat_playwright

#: Default location of Debian's Chromium; ``DYNAWEB_CHROMIUM`` overrides it.
DEFAULT_CHROMIUM_PATH = "/usr/bin/chromium"

#: Flags added to every launch. No sandbox (containers run as root), no GPU (there is none), and
#: no background traffic: the pages are local and nothing outside may be reached.
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
)


class BrowserNotFoundError(RuntimeError):
    """The Chromium executable is missing."""


class BrowserCrashedError(RuntimeError):
    """The browser process died or stopped answering during an episode."""


_lock = threading.Lock()  # guards _tracked, which every thread reads (pids for watchdogs)
_launch_lock = threading.Lock()
#: Most closed browsers kept per thread for reuse (each env uses two: its page and its chat).
MAX_IDLE_BROWSERS = 8


@dataclass
class _TrackedBrowser:
    pid: int | None  # main chromium process
    key: str  # launch arguments: only a browser launched alike is reused
    close: Callable[..., None]  # Playwright's own close


_tracked: dict[int, _TrackedBrowser] = {}  # id(Browser) ->


class _ThreadPlaywright(threading.local):
    """The calling thread's Playwright instance and the closed browsers it keeps for reuse."""

    def __init__(self) -> None:
        self.playwright: Any = None
        self.pid = 0  # process that started it: a forked child must start its own
        self.idle: list[tuple[str, Any]] = []  # (launch key, Browser) closed by BrowserGym, kept for reuse


_local = _ThreadPlaywright()


def find_chromium() -> str:
    """The path of the Chromium executable to launch.

    ``$DYNAWEB_CHROMIUM`` wins, then ``/usr/bin/chromium``, then ``chromium`` /
    ``chromium-browser`` on ``PATH``.

    Raises:
        BrowserNotFoundError: If none exists, with the command that installs it.
    """
    candidates = [os.environ.get("DYNAWEB_CHROMIUM", ""), DEFAULT_CHROMIUM_PATH]
    candidates += [shutil.which(name) or "" for name in ("chromium", "chromium-browser")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise BrowserNotFoundError(
        "Chromium not found (looked at $DYNAWEB_CHROMIUM, /usr/bin/chromium and PATH). "
        "Run `make setup` or `apt-get install chromium`, or set DYNAWEB_CHROMIUM to a Chromium executable."
    )


def miniwob_base_url() -> str:
    """The ``file://`` URL of the MiniWoB++ pages shipped in the ``miniwob`` package (ends with ``/``)."""
    try:
        import miniwob
    except ImportError as error:
        raise ImportError("MiniWoB++ pages need the `miniwob` package: pip install 'dynaweb[browser]'") from error
    html_dir = Path(miniwob.__file__).resolve().parent / "html" / "miniwob"
    if not html_dir.is_dir():
        raise FileNotFoundError(f"the miniwob package has no html pages at {html_dir}")
    return html_dir.as_uri() + "/"


def setup_miniwob_url() -> str:
    """Point ``MINIWOB_URL`` at the packaged MiniWoB++ pages unless the user set it; returns its value."""
    if not os.environ.get("MINIWOB_URL"):
        os.environ["MINIWOB_URL"] = miniwob_base_url()
    return os.environ["MINIWOB_URL"]


def ensure_playwright() -> Any:
    """The Playwright instance of the calling thread, started on first use (BrowserGym's lookups get it too).

    Every ``chromium.launch`` made through it, BrowserGym's chat window included, runs
    :func:`find_chromium`'s executable with :data:`CHROMIUM_FLAGS` added. Call
    :func:`stop_playwright` on the same thread when done with it.
    """
    if _local.playwright is None or _local.pid != os.getpid():
        executable = find_chromium()
        from playwright.sync_api import sync_playwright

        # BrowserGym looks up one process-wide instance; Playwright's sync objects belong to their thread.
        compat_browsergym.use_thread_playwright(ensure_playwright)
        # An instance inherited through fork belongs to the parent: drop it without stopping it.
        _local.idle = []
        compat_playwright.cheap_stack_capture()
        playwright = sync_playwright().start()
        _wrap_launch(playwright.chromium, executable)
        _local.playwright, _local.pid = playwright, os.getpid()
        if threading.current_thread() is threading.main_thread():
            atexit.register(_stop_at_exit, playwright)
    return _local.playwright


def stop_playwright() -> None:
    """Close the calling thread's idle browsers and stop its Playwright instance (if it has one)."""
    playwright, _local.playwright = _local.playwright, None
    if playwright is None or _local.pid != os.getpid():
        return
    close_idle_browsers()
    try:
        playwright.stop()
    except Exception:  # noqa: BLE001 - a driver that already died has nothing left to stop
        pass


def _stop_at_exit(playwright: Any) -> None:
    if _local.playwright is playwright:
        stop_playwright()


def _wrap_launch(browser_type: Any, executable: str) -> None:
    original_launch = browser_type.launch

    def launch(**kwargs: Any) -> Any:
        kwargs.setdefault("executable_path", executable)
        extra = [flag for flag in CHROMIUM_FLAGS if flag not in (kwargs.get("args") or [])]
        kwargs["args"] = list(kwargs.get("args") or []) + extra
        key = repr(sorted(kwargs.items(), key=lambda item: item[0]))
        reused = _take_idle(key)
        if reused is not None:
            return reused
        # One launch at a time in the whole process (threads included), so the one new root is this browser.
        with _launch_lock:
            before = set(_chromium_roots())
            browser = original_launch(**kwargs)
            new_roots = [pid for pid in _chromium_roots() if pid not in before]
        with _lock:
            _tracked[id(browser)] = _TrackedBrowser(new_roots[0] if new_roots else None, key, browser.close)
        browser.close = lambda **close_kwargs: _release(browser, **close_kwargs)
        return browser

    browser_type.launch = launch


def _take_idle(key: str) -> Any:
    for index, (idle_key, browser) in enumerate(_local.idle):
        if idle_key != key:
            continue
        del _local.idle[index]
        if browser.is_connected() and _process_alive(browser_pid(browser)):
            return browser
        close_browser(browser)
        return _take_idle(key)
    return None


def _release(browser: Any, **close_kwargs: Any) -> None:
    # BrowserGym closes and relaunches both of its browsers at every reset (~1 s each here). Keeping
    # them for the next launch, with every context closed, gives the same isolation for less.
    tracked = _tracked.get(id(browser))
    if tracked is None or not browser_reuse_enabled() or len(_local.idle) >= MAX_IDLE_BROWSERS:
        close_browser(browser, **close_kwargs)
        return
    try:
        for context in list(browser.contexts):
            context.close()
    except Exception:  # noqa: BLE001 - a browser that cannot close its contexts is not worth keeping
        close_browser(browser)
        return
    if browser.is_connected():
        _local.idle.append((tracked.key, browser))
    else:
        close_browser(browser)


def browser_reuse_enabled() -> bool:
    """Whether closed browsers are kept for the next launch (``DYNAWEB_REUSE_BROWSERS=0`` turns it off)."""
    return os.environ.get("DYNAWEB_REUSE_BROWSERS", "1") not in ("0", "false", "no")


def close_browser(browser: Any, **close_kwargs: Any) -> None:
    """Really close a browser launched through :func:`ensure_playwright`, killing its processes if needed."""
    if browser is None:
        return
    _local.idle[:] = [(key, idle) for key, idle in _local.idle if idle is not browser]
    with _lock:
        tracked = _tracked.pop(id(browser), None)
    close = tracked.close if tracked is not None else browser.close
    try:
        close(**close_kwargs)
    except Exception:  # noqa: BLE001 - a dead or hung browser is killed below
        pass
    if tracked is not None:
        kill_process_tree(tracked.pid)


def close_idle_browsers() -> None:
    """Really close every browser the calling thread keeps for reuse."""
    for _, browser in list(_local.idle):
        close_browser(browser)


def _process_alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _chromium_roots() -> list[int]:
    """Pids of this process's descendant chromium processes whose parent is not chromium."""
    roots = []
    try:
        for child in psutil.Process().children(recursive=True):
            try:
                if "chrom" in child.name() and "chrom" not in (child.parent().name() if child.parent() else ""):
                    roots.append(child.pid)
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return roots


def browser_pid(browser: Any) -> int | None:
    """The pid of the main process of a browser launched through :func:`ensure_playwright` (or ``None``)."""
    with _lock:
        tracked = _tracked.get(id(browser)) if browser is not None else None
    return tracked.pid if tracked is not None else None


def kill_process_tree(pid: int | None) -> None:
    """SIGKILL a process and all its descendants; missing processes are ignored."""
    if pid is None:
        return
    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    # Wait until each is gone or a zombie: orphans are reparented to an init that may never reap them.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_process_alive(process.pid) for process in processes):
        time.sleep(0.05)


def live_chromium_pids(root_pid: int | None = None) -> list[int]:
    """Pids of living chromium processes among the descendants of ``root_pid`` (default: this process)."""
    try:
        children = psutil.Process(root_pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []
    alive = []
    for child in children:
        try:
            if "chrom" in child.name() and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.pid)
        except psutil.Error:
            continue
    return alive


__all__ = [
    "CHROMIUM_FLAGS",
    "MAX_IDLE_BROWSERS",
    "DEFAULT_CHROMIUM_PATH",
    "BrowserCrashedError",
    "BrowserNotFoundError",
    "browser_pid",
    "ensure_playwright",
    "find_chromium",
    "browser_reuse_enabled",
    "close_browser",
    "close_idle_browsers",
    "kill_process_tree",
    "live_chromium_pids",
    "miniwob_base_url",
    "setup_miniwob_url",
    "stop_playwright",
]
