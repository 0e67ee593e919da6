"""Keeping a BrowserGym env's agent inside its task: navigation policy and tab limits, enforced in the browser.

:class:`BrowserGuard` checks ``goto`` and link clicks before they run, answers every other
navigation that leaves the task (scripts, forms, redirects, pop-ups) inside Chromium with "204 No
Content", so the task's page keeps its state, closes pop-ups whose navigation was refused, and sends
back tabs that still show a refused address (schemes the request guard never sees, such as
``data:``). Its methods run on the env's browser thread.
"""

from __future__ import annotations

from typing import Any

from ..actions import Action
from ..navigation import NavigationPolicy

# The URL a click on an element would open: its own or its enclosing link's href.
_LINK_TARGET_JS = "e => { const a = e.closest('a[href]'); return a ? a.href : null; }"


class BrowserGuard:
    """The navigation policy and tab limit of one BrowserGym env, for one episode.

    Args:
        browser_env: BrowserGym's env, just reset.
        policy: Where its agent may navigate.
        max_tabs: Most tabs open at once.
    """

    def __init__(self, browser_env: Any, policy: NavigationPolicy, max_tabs: int):
        self.browser_env = browser_env
        self.policy = policy
        self.max_tabs = max_tabs
        self.refused: list[str] = []  # addresses refused during the current step
        self._pages_before: list[Any] = []  # the tabs open when the current step began
        browser_env.context.route("**/*", self.guard_request)

    def begin_step(self) -> None:
        """Forget the previous step's refusals and remember which tabs are open."""
        self.refused.clear()
        self._pages_before = list(self.browser_env.context.pages)

    def check_tabs(self, action: Action) -> str:
        """Why a tab action may not run (no such tab, the last tab, too many tabs), or ""."""
        tabs = len(self.browser_env.context.pages)
        if action.name == "new_tab" and tabs >= self.max_tabs:
            return f"new_tab refused: {tabs} tabs are open, the most this environment allows; close_tab first"
        if action.name == "close_tab" and tabs <= 1:
            return "close_tab refused: the last open tab cannot be closed"
        if action.name == "tab_focus" and int(action.args[0]) >= tabs:
            indexes = "0" if tabs == 1 else f"0 to {tabs - 1}"
            return f"tab_focus: there is no tab {action.args[0]}; the open tabs are {indexes}"
        return ""

    def check_navigation(self, action: Action) -> str:
        """Why ``action`` may not run (it would leave the task), or ""."""
        page = self.browser_env.page
        if action.name == "goto":
            return self.policy.refusal(action.args[0], base_url=page.url)
        if action.name == "click":
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
        """Playwright route handler: stop navigations out of the task that the pre-checks cannot foresee.

        Scripts, forms, redirects and pop-ups. A "204 No Content" answer makes Chromium stay on the
        current document, so the task's page keeps its state; a pop-up's request is aborted and the
        pop-up closed after the step.
        """
        # Never raises: an exception here would surface in whatever action is running.
        try:
            if not request.is_navigation_request() or self.policy.allows(request.url):
                route.fallback()
                return
            self.refused.append(request.url)
            if self._opens_a_new_page(request):
                route.abort("blockedbyclient")
            else:
                route.fulfill(status=204, body="")
        except Exception:  # noqa: BLE001 - a page closed mid-request has nothing left to guard
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
            if not refused_popup and (not url or url.startswith("chrome-error:") or self.policy.allows(url)):
                continue
            if not refused_popup:
                self.refused.append(url)
            changed = True
            try:
                if page is self.browser_env.page and len(self.browser_env.context.pages) == 1:
                    page.go_back(timeout=5000)
                    if not self.policy.allows(page.url):
                        page.goto("about:blank", timeout=5000)
                else:
                    page.close()
            except Exception:  # noqa: BLE001 - the refusal is reported either way
                pass
        if changed:
            self.browser_env._active_page_check()
        return changed

    @property
    def error(self) -> str:
        """The refusal to report for the step ("" if nothing was refused)."""
        if not self.refused:
            return ""
        return self.policy.refusal(self.refused[0]) or f"navigation to {self.refused[0][:200]} refused"


__all__ = ["BrowserGuard"]
