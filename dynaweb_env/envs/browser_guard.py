"""Keeping a BrowserGym env's agent inside its task: the URL policy on every request, and tab limits.

:class:`BrowserGuard` puts every request a page makes through the task's
:class:`~dynaweb_env.navigation.NavigationPolicy`, inside Chromium and from the task's first request on:
documents of the page and of its frames, images, scripts, styles, XHR and ``fetch``. Its Playwright
route is installed on the task's browser context before the task's setup opens the start page, so a
start page that frames ``file:///etc/passwd`` or loads ``http://127.0.0.1/...`` gets nothing from either.
What a route cannot see is closed in the context itself: service workers are blocked, and every
connection Chromium would make to a host the policy does not admit (WebSockets, which Playwright 1.44
cannot route, included) goes to a proxy that refuses all connections; only the task's own hosts
bypass it (:func:`~dynaweb_env.navigation.proxy_bypass_rules`). Loopback and private addresses go
through that proxy too (Playwright adds Chromium's ``<-loopback>`` rule), so they are reached only
when the task's own host is one.

It also checks ``goto`` and link clicks before they run, answers every other navigation that leaves
the task (scripts, forms, redirects, pop-ups) with "204 No Content", so the task's page keeps its state,
closes pop-ups whose navigation was refused, and sends back tabs that still show a refused address
(schemes no request is made for, such as ``data:``). Its methods run on the env's browser thread.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from typing import Any

from ..action_rules import tab_refusal
from ..actions import CLICK_ACTIONS, Action
from ..compat import browsergym as compat_browsergym
from ..navigation import NavigationPolicy, proxy_bypass_rules

# The URL a click on an element would open: its own or its enclosing link's href.
_LINK_TARGET_JS = "e => { const a = e.closest('a[href]'); return a ? a.href : null; }"

#: Most refused resource and frame requests kept per episode (:attr:`BrowserGuard.blocked`, for debugging).
MAX_BLOCKED_KEPT = 100

_proxy_lock = threading.Lock()
_refusing_socket: socket.socket | None = None


def refusing_proxy() -> str:
    """The address of a proxy that refuses every connection: a port of this process bound but never listening.

    Binding it keeps the port from any other program for the life of the process, and a connection to a
    bound port that does not listen is refused at once (``net::ERR_PROXY_CONNECTION_FAILED``), never hung.
    """
    global _refusing_socket
    with _proxy_lock:
        if _refusing_socket is None:
            _refusing_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            _refusing_socket.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{_refusing_socket.getsockname()[1]}"


def task_start_url(task: Any) -> str:
    """The start page a BrowserGym task will open (MiniWoB++: ``task.url``), or "" if the task does not say."""
    for name in ("url", "start_url"):
        value = getattr(task, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


class BrowserGuard:
    """The URL policy and tab limit of one BrowserGym env, for every episode it runs.

    Build it once per BrowserGym env, before the env's first reset: it hooks the env's task creation,
    so each reset's browser context is made with the guard in place (see the module docstring).

    Args:
        browser_env: BrowserGym's env, not yet reset.
        allowed_domains: Where its agent may go besides the start page (see
            :meth:`NavigationPolicy.for_start_url`; ``None``: the start page's host or directory). Read at
            every reset.
        max_tabs: Most tabs open at once.
    """

    def __init__(self, browser_env: Any, allowed_domains: Sequence[str] | None, max_tabs: int):
        self.browser_env = browser_env
        self.allowed_domains = allowed_domains
        self.max_tabs = max_tabs
        #: The current task's policy; ``None`` only before a task whose start page is unknown opens it.
        self.policy: NavigationPolicy | None = None
        self._home: NavigationPolicy | None = None  # the start page's own place: see _set_start
        self._start_url = ""
        self.refused: list[str] = []  # addresses the agent's tabs were refused during the current step
        self.blocked: list[str] = []  # a page's frame and resource requests refused this episode (the first 100)
        self._pages_before: list[Any] = []  # the tabs open when the current step began
        self._context_kwargs = dict(getattr(browser_env, "pw_context_kwargs", None) or {})
        create_task = browser_env.task_entrypoint

        def guarded_task(*args: Any, **kwargs: Any) -> Any:
            task = create_task(*args, **kwargs)
            self._prepare(task)
            return task

        browser_env.task_entrypoint = guarded_task

    def _prepare(self, task: Any) -> None:
        """Before BrowserGym makes the task's browser context: the task's policy, the context's settings, and
        a setup that installs the request guard before the task opens its first page."""
        self._set_start(task_start_url(task))
        self.blocked.clear()
        self._pages_before = []
        context_kwargs = {**self._context_kwargs, "service_workers": "block"}
        if self.policy is not None:
            # Without a known start page its host is unknown, and sending it to the proxy would break the task.
            bypass = proxy_bypass_rules(self.policy.domains + self._home.domains)
            context_kwargs["proxy"] = {"server": refusing_proxy(), "bypass": bypass}
        self.browser_env.pw_context_kwargs = context_kwargs
        setup = task.setup

        def guarded_setup(page: Any, *args: Any, **kwargs: Any) -> Any:
            page.context.route("**/*", self.guard_request)
            return setup(page, *args, **kwargs)

        task.setup = guarded_setup

    def start_episode(self, start_url: str) -> None:
        """After a reset: the policy of the page the task opened, and no refusals yet."""
        self._set_start(start_url)
        self.begin_step()

    def _set_start(self, start_url: str) -> None:
        self.refused.clear()
        if not start_url:
            self.policy = self._home = None
            return
        self._start_url = start_url
        self.policy = NavigationPolicy.for_start_url(start_url, self.allowed_domains)
        # The task's own place (host, or directory and the one above): its page and what the page loads from
        # there are always the task's, also when ``allowed_domains`` names other places for the agent.
        self._home = NavigationPolicy.for_start_url(start_url)

    def _allows(self, url: str, main_frame: bool) -> bool:
        if self.policy is None or self._home is None:
            return False
        if main_frame:
            return url == self._start_url or self.policy.allows(url)
        return self.policy.allows_resource(url) or self._home.allows_resource(url)

    def begin_step(self) -> None:
        """Forget the previous step's refusals and remember which tabs are open."""
        self.refused.clear()
        self._pages_before = list(self.browser_env.context.pages)

    def check_tabs(self, action: Action) -> str:
        """Why a tab action may not run (no such tab, the last tab, too many tabs), or ""."""
        return tab_refusal(action, len(self.browser_env.context.pages), self.max_tabs)

    def check_navigation(self, action: Action) -> str:
        """Why ``action`` may not run (it would leave the task), or ""."""
        page = self.browser_env.page
        if action.name == "goto":
            return self.policy.refusal(action.args[0], base_url=page.url)
        if action.name in CLICK_ACTIONS:
            from browsergym.core.action.utils import get_elem_by_bid

            try:
                element = get_elem_by_bid(page, action.args[0])
                href = element.evaluate(_LINK_TARGET_JS, timeout=1000)
            except Exception:  # noqa: BLE001 - a missing element is reported by the click itself
                return ""
            # A page's own ``javascript:`` link runs its own code; where that code navigates is guarded.
            if href and not href.lower().startswith("javascript:"):
                return self.policy.refusal(href)
        return ""

    def guard_request(self, route: Any, request: Any) -> None:
        """Playwright route handler: every request of every frame of the task's pages, checked against the policy.

        A refused navigation of a tab already open is answered "204 No Content" (Chromium stays on the
        current document, so the page keeps its state; a frame stays empty) and, for a tab, reported as
        the step's error. Every other refused request (a resource, a pop-up's first page) is aborted.
        """
        # Never raises: an exception here would surface in whatever action is running.
        try:
            navigation = request.is_navigation_request()
            try:
                main_frame = navigation and request.frame.parent_frame is None
            except Exception:  # noqa: BLE001 - Playwright has no frame yet for a page a link is opening
                main_frame = navigation
            if self.policy is None and main_frame:  # a task that did not name its start page: its first page does
                self._set_start(request.url)
            if self._allows(request.url, main_frame):
                route.fallback()
                return
            if main_frame:
                self.refused.append(request.url)
            elif len(self.blocked) < MAX_BLOCKED_KEPT:
                self.blocked.append(request.url)
            if navigation and (not main_frame or not self._opens_a_new_page(request)):
                route.fulfill(status=204, body="")
            else:
                route.abort("blockedbyclient")
        except Exception:  # noqa: BLE001 - a page closed mid-request has nothing left to guard
            try:
                route.abort("blockedbyclient")
            except Exception:  # noqa: BLE001 - already handled, or its page is gone
                pass

    def _opens_a_new_page(self, request: Any) -> bool:
        try:
            return request.frame.page not in self._pages_before
        except Exception:  # noqa: BLE001 - Playwright has no frame yet for a page a link is opening
            return True

    def send_back_refused_pages(self) -> bool:
        """Close pop-ups a refused navigation opened and send back tabs showing a refused address.

        The request guard never sees some schemes (``data:``, ``blob:``, browser pages); they are caught
        here. Returns whether any tab was changed.
        """
        changed = False
        for page in list(self.browser_env.context.pages):
            url = page.url
            refused_popup = url.startswith("chrome-error:") and self.refused and page not in self._pages_before
            if not refused_popup and (not url or url.startswith("chrome-error:") or self._allows(url, True)):
                continue
            if not refused_popup:
                self.refused.append(url)
            changed = True
            try:
                if page is self.browser_env.page and len(self.browser_env.context.pages) == 1:
                    page.go_back(timeout=5000)
                    if not self._allows(page.url, True):
                        page.goto("about:blank", timeout=5000)
                else:
                    page.close()
            except Exception:  # noqa: BLE001 - the refusal is reported either way
                pass
        if changed:
            compat_browsergym.check_active_page(self.browser_env)
        return changed

    @property
    def error(self) -> str:
        """The refusal to report for the step ("" if nothing was refused)."""
        if not self.refused:
            return ""
        return self.policy.refusal(self.refused[0]) or f"navigation to {self.refused[0][:200]} refused"


__all__ = ["BrowserGuard", "refusing_proxy", "task_start_url"]
