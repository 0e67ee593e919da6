"""``RealWeb-v0``: DynaWeb's observation and action contract on a real Chromium browser.

The environment drives BrowserGym's ``BrowserEnv`` (one per task id) and translates between the
paper's action grammar (:mod:`dynaweb_env.actions`) and BrowserGym's high-level action calls, and
from BrowserGym's accessibility tree to DynaWeb's text observation (:mod:`dynaweb_env.observation`).
Everything that can go wrong in a browser (a malformed action, a missing element, a refused
navigation, a crashed or hung browser) is reported in the observation and ``info`` instead of
raised, so a policy in training can never crash a step.

Each env runs its browser on a thread of its own (:class:`~.browser_thread.BrowserThread`) and
marshals every call to it, so its methods may be called from any thread and many envs may run on
many threads in one process.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from ..action_rules import DEFAULT_MAX_TABS
from ..actions import Action, read_action
from ..browsergym_actions import check_action_set
from ..compat import browsergym as compat_browsergym
from ..data.tasks import step_limit
from ..navigation import absolute_url
from ..observation import clean_axtree, make_observation, render_observation
from ..spaces import fit_observation, web_action_space, web_observation_space
from . import EPISODE_ENDED
from .browser import browser_pid, close_browser, ensure_playwright, kill_process_tree
from .browser_guard import BrowserGuard
from .browser_thread import BrowserThread
from .browsergym_adapter import (
    MAX_PAGE_ELEMENTS,
    check_real_env_arguments,
    check_task_id,
    flatten_axtree,
    in_memory_chat,
    make_browser_env,
    to_browsergym_call,
)

T = TypeVar("T")

#: Longest error message kept in ``last_action_error`` (Playwright timeouts carry long call logs).
MAX_ERROR_LENGTH = 1000
#: Seconds a call that outlived its limit gets to return once its browser is killed; after that
#: its thread is abandoned and the env starts a new one.
ABANDON_AFTER_S = 5.0


class RealWebEnv(gym.Env[dict, str]):
    """Web tasks in a real Chromium browser (MiniWoB++, WebArena, any BrowserGym task), in DynaWeb's format.

    ## Description

    Each episode opens a fresh browser on one BrowserGym task (default ``miniwob.click-button``,
    served from the ``miniwob`` package's local pages) and lets the agent act on it with the paper's
    action grammar. The observation is the same text dictionary ``DreamWeb-v0`` produces, so a
    policy cannot tell a dream from the real web by its format.

    ## Action Space

    ``web_action_space()``: one string of at most 4,096 characters. It may be a bare action
    (``click [13]``) or a whole policy response (``REASON: ... ACTION: click [13]``);
    :func:`~dynaweb_env.actions.read_action` finds the action. Actions map to BrowserGym calls:
    ``click [id]`` -> ``click``, ``type [id] [text] [1]`` -> ``fill`` then ``press Enter`` (``[0]``:
    no Enter), ``hover``, ``press [keys]`` -> ``keyboard_press``, ``scroll [up|down]`` -> wheel by
    90% of the viewport height, ``new_tab``, ``tab_focus [i]``, ``close_tab``, ``goto [url]``,
    ``go_back``, ``go_forward``, and ``stop [answer]`` -> ``send_msg_to_user(answer)``. An action
    that does not parse, is longer than the space admits, names a missing element or tab, would
    close the last tab or open more than ``max_tabs``, or would navigate where the task does not
    live costs a step, sets ``last_action_error`` and the episode goes on. ``select [id] [option]`` ->
    ``select_option``; ``dblclick``, ``focus``, ``press_on [id] [keys]`` -> ``press`` and ``noop`` too
    (:data:`~dynaweb_env.action_spec.ACTION_SPECS` defines each). With ``action_set="browsergym"`` the actions are
    BrowserGym's own calls instead (``click('13')``, ``fill('13', 'text')``, ...:
    :mod:`~dynaweb_env.browsergym_actions`), read into the same actions; ``last_action`` shows their paper form.

    Navigation is confined to the task (:class:`~dynaweb_env.navigation.NavigationPolicy`): its
    hosts, or for local pages the directory of its start page. ``goto`` and clicks on links are
    checked before they run; every other navigation (scripts, forms, redirects, pop-ups, a page's
    ``javascript:`` links) is stopped inside the browser, where the request is answered with
    "204 No Content", so the page stays as it was; a tab that still shows a refused address is
    sent back or closed. ``data:``, ``blob:``, ``javascript:`` and browser-internal addresses are
    never navigated to. The same policy covers every request a page makes, from the start page on:
    frames, images, scripts, XHR/``fetch``; service workers are blocked, and WebSockets and any other
    connection reach only the task's own hosts (:mod:`~dynaweb_env.envs.browser_guard`).

    ## Observation Space

    ``web_observation_space()``: a ``Dict`` of text fields ``goal`` (the task query), ``url`` (the
    active page), ``axtree`` (BrowserGym's flattened accessibility tree, ``[bid] role 'name'`` lines
    indented by depth with tabs, ``InlineTextBox`` / ``LineBreak`` lines dropped), ``last_action``
    (the action as executed, canonical form) and ``last_action_error`` ("" if none). Every field
    fits the space: the tree keeps at most 20,000 nodes, 200 levels deep, before it is flattened,
    and is cut to 200,000 characters; a page with more than ``max_page_elements`` elements is not
    extracted at all, and its tree is one line that says so.

    ## Starting State

    The task's own start page for ``task_seed`` (the same seed gives the same page). The task is
    ``options["task"]``, else one of ``tasks`` drawn with ``self.np_random``, else ``task``; the
    seed is ``options["task_seed"]``, else drawn with ``self.np_random``.

    ## Rewards

    The task's own reward clipped into ``[0, 1]``, reported at every step; the task decides when it
    is final. MiniWoB++ through BrowserGym: 1 when the page's raw score is positive, else 0. Tasks
    that score partial credit count a mostly right page as a success: click-checkboxes scores the
    share of boxes in the right state minus the share in the wrong one, so leaving one of three
    boxes unticked still earns 1 (``info["task_info"]["RAW_REWARD_GLOBAL"]`` has the raw score).

    ## Episode End

    Terminated when the task reports it is done (MiniWoB++: after the decisive click or submit)
    or on ``stop [answer]``. Truncated after ``max_steps`` steps, or when the browser crashed or hung
    (``info["error"]`` says why; the next ``reset`` launches a new browser). A MiniWoB++ task also ends
    (reward 0) when the agent leaves its page: ``new_tab``, ``go_back``, ``goto`` another address (BrowserGym's
    rule, :func:`~dynaweb_env.action_rules.left_page_error`). After the end, ``step`` raises
    ``gym.error.ResetNeeded`` until ``reset``, as ``DreamWeb-v0`` does.

    ## Arguments

    ```python
    gym.make("RealWeb-v0", task="miniwob.click-button", tasks=None, max_steps=10,
             allowed_domains=None, headless=True, action_timeout_ms=None, element_timeout_ms=2000,
             step_timeout_s=60.0, reset_timeout_s=120.0, pre_observation_delay=0.5, max_tabs=8,
             max_page_elements=20_000, clickable=True, action_set="paper", render_mode=None)
    ```

    * ``task``: a BrowserGym task id (``miniwob.<name>``; ``webarena.<n>`` etc. once that benchmark
      is installed and its sites configured).
    * ``tasks``: task ids to sample one from per reset (overrides ``task``).
    * ``max_steps``: steps before truncation (paper: 10); a long task's own limit raises it
      (:func:`~dynaweb_env.data.tasks.step_limit`).
    * ``allowed_domains``: hosts (``"localhost:7770"``, ``"example.com"`` also admits its
      subdomains), ``file:`` directory URLs, or ``"file://"`` for the start page's directory.
      Default: the start page's host, or its directory for local pages.
    * ``headless``: run Chromium without a window.
    * ``action_timeout_ms``: Playwright timeout per operation (default: the task's, 5 s for MiniWoB++).
    * ``element_timeout_ms``: how long an action waits for its element to be actionable (visible,
      enabled, not covered) before it fails. BrowserGym hard-codes 500 ms, which a busy CPU misses
      even for clicks that land; a covered or disabled element still fails, only later.
    * ``step_timeout_s``: a step taking longer is treated as a hung browser: it is killed and the
      step truncated.
    * ``reset_timeout_s``: the same for a reset (which then retries once on a new browser, and
      raises if that fails too).
    * ``pre_observation_delay``: seconds to let the page settle after an action (BrowserGym's).
    * ``max_tabs``: most tabs open at once (``new_tab`` beyond it is refused).
    * ``max_page_elements``: pages with more DOM elements are not extracted (see above).
    * ``clickable``: keep clickable ``generic`` elements (a ``<span>`` link, a ``<div>`` button, a clickable
      row) with their bids, as ``[13] generic, clickable=True`` lines; ``False`` gives the observation
      before issue 51 (BrowserGym's default flattening, which drops them, so they cannot be clicked by id).
    * ``action_set``: the action grammar: ``"paper"`` (``click [13]``) or ``"browsergym"`` (BrowserGym's
      ``HighLevelActionSet`` calls, subsets ``chat``, ``bid`` and ``nav``: ``click('13')``).
    * ``render_mode``: ``"ansi"`` makes ``render()`` return the observation as the policy sees it.

    ``info`` holds ``task_id``, ``task_seed``, ``source="real"``, ``changes=""`` (the real env does
    not describe state changes), ``error`` (browser-level failures, "" if none), ``step``, and
    ``task_info`` (BrowserGym's task information, e.g. MiniWoB++'s raw reward).

    ## Version History

    * v0: Initial version. Clickable ``generic`` elements are kept since issue 51 (``clickable=False``: before).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        task: str = "miniwob.click-button",
        tasks: list[str] | None = None,
        max_steps: int = 10,
        allowed_domains: list[str] | None = None,
        headless: bool = True,
        action_timeout_ms: int | None = None,
        element_timeout_ms: int = 2000,
        step_timeout_s: float = 60.0,
        reset_timeout_s: float = 120.0,
        pre_observation_delay: float = 0.5,
        max_tabs: int = DEFAULT_MAX_TABS,
        max_page_elements: int = MAX_PAGE_ELEMENTS,
        clickable: bool = True,
        action_set: str = "paper",
        render_mode: str | None = None,
    ):
        check_real_env_arguments(
            tasks or [task], tasks, max_steps, allowed_domains, action_timeout_ms, element_timeout_ms,
            (step_timeout_s, reset_timeout_s, pre_observation_delay), (max_tabs, max_page_elements),
        )  # fmt: skip
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if not isinstance(clickable, bool):
            raise ValueError(f"clickable must be True or False, got {clickable!r}")
        self.action_set = check_action_set(action_set)
        self.task = task
        self.tasks = list(tasks) if tasks is not None else None
        self.max_steps = max_steps
        self.allowed_domains = list(allowed_domains) if allowed_domains is not None else None
        self.headless = headless
        self.action_timeout_ms = action_timeout_ms
        self.element_timeout_ms = element_timeout_ms
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.pre_observation_delay = pre_observation_delay
        self.max_tabs = max_tabs
        self.max_page_elements = max_page_elements
        self.clickable = clickable
        self.render_mode = render_mode
        self.observation_space = web_observation_space()
        self.action_space = web_action_space()

        self._thread: BrowserThread | None = None  # owns the browser; every browser call runs on it
        self._browser_env: Any = None  # BrowserGym's BrowserEnv, for the task self._browser_env_task
        self._browser_env_task = ""
        self._task_id = ""
        self._task_seed = 0
        self._goal = ""
        self._step_count = 0
        self._observation: dict[str, str] | None = None
        self._broken = False  # the browser crashed or hung: relaunch at next reset
        self._ended = False  # the episode terminated or was truncated: step() raises until reset()
        self._guard: BrowserGuard | None = None  # the episode's navigation policy and tab limit

    # ------------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Open the start page of a task.

        Args:
            seed: Seeds ``self.np_random`` (task choice and task seeds drawn from it).
            options: ``{"task": id, "task_seed": int}``, both optional. Rollouts that must see the
                same page (a GSPO group) pass the same ``task_seed``. Other keys are ignored.
        """
        super().reset(seed=seed)
        options = options or {}
        task_id = options.get("task")
        if task_id is None:
            task_id = self.tasks[int(self.np_random.integers(len(self.tasks)))] if self.tasks else self.task
        check_task_id(task_id)
        task_seed = options.get("task_seed")
        if task_seed is None:
            task_seed = int(self.np_random.integers(0, 2**31 - 1))
        if isinstance(task_seed, (bool, float)) or not isinstance(task_seed, (int, np.integer)) or task_seed < 0:
            raise ValueError(f"options['task_seed'] must be a non-negative integer, got {task_seed!r}")
        self._task_id, self._task_seed = task_id, int(task_seed)
        self._observation = None  # a reset that raises leaves no episode to step in

        try:
            observation, task_info = self._in_browser(self._open_task, self.reset_timeout_s)
        except Exception:  # noqa: BLE001 - one retry on a fresh browser, then let the error out
            self._discard_browser()
            observation, task_info = self._in_browser(self._open_task, self.reset_timeout_s)
        self._step_count, self._ended = 0, False
        self._observation = observation
        return self._observation, self._info(task_info, error="")

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        """Execute one action (or the action inside a whole policy response); never raises on bad input."""
        if self._observation is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._ended:
            raise gym.error.ResetNeeded(EPISODE_ENDED)
        self._step_count += 1
        truncated_by_limit = self._step_count >= step_limit(self._task_id, self.max_steps)

        read = read_action(action, self.action_space.max_length, self.action_set)
        if read.action is None:
            return self._refuse(read.shown, read.error, truncated_by_limit)
        parsed = read.action
        try:
            outcome = self._in_browser(lambda: self._execute(parsed, read.shown), self.step_timeout_s)
        except Exception as error:  # noqa: BLE001 - any browser failure ends the episode, never the caller
            self._broken = self._ended = True
            message = _shorten(f"browser failure: {type(error).__name__}: {_first_line(str(error))}")
            observation = {**self._observation, "last_action": read.shown, "last_action_error": message}
            self._observation = observation
            return observation, 0.0, False, True, self._info({}, error=message)
        if isinstance(outcome, str):  # refused before it reached the page
            return self._refuse(read.shown, outcome, truncated_by_limit)

        self._observation, reward, done, task_info = outcome
        terminated = bool(done) or parsed.is_stop
        self._ended = terminated or truncated_by_limit
        reward = float(np.clip(float(reward or 0.0), 0.0, 1.0))
        return self._observation, reward, terminated, truncated_by_limit and not terminated, self._info(task_info, "")

    def render(self) -> str | None:
        """The current observation as the policy sees it (``render_mode="ansi"``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; use gym.make('RealWeb-v0', render_mode='ansi')")
            return None
        return render_observation(self._observation) if self._observation is not None else ""

    def close(self) -> None:
        """Close this env's browsers and end its browser thread; kills them if they do not close cleanly."""
        self._discard_browser()
        thread, self._thread = self._thread, None
        if thread is not None and not thread.close(timeout=30.0):
            for pid in self.browser_pids:
                kill_process_tree(pid)
        self._observation = None
        super().close()

    # ------------------------------------------------------------------ browser management

    def run_in_browser(self, function: Callable[[Any], T]) -> T:
        """``function(page)`` on the active Playwright page, run on this env's browser thread.

        For tests, debugging and harnesses that set up a page; what it does to the page is not checked
        against the navigation policy. Raises ``gym.error.ResetNeeded`` before the first reset.
        """
        if self._browser_env is None:
            raise gym.error.ResetNeeded("call reset() before run_in_browser()")
        return self._in_browser(lambda: function(self._browser_env.page), self.step_timeout_s)

    @property
    def browser_pids(self) -> list[int]:
        """Pids of the main processes of this env's browsers (the task's; with ``headless=False`` also the chat's)."""
        env = self._browser_env
        if env is None:
            return []
        chat_browser = getattr(getattr(env, "chat", None), "browser", None)
        return [pid for pid in (browser_pid(env.browser), browser_pid(chat_browser)) if pid is not None]

    def _in_browser(self, work: Callable[[], T], limit: float) -> T:
        """``work()`` on the browser thread; past ``limit`` seconds the browsers are killed (a hung browser)."""
        if self._thread is None or not self._thread.alive:
            self._thread = BrowserThread()
        future: Future = self._thread.submit(work)
        try:
            return future.result(limit)
        except TimeoutError:
            if future.done():  # the work itself raised a TimeoutError
                raise
        pids = self.browser_pids
        for pid in pids:
            kill_process_tree(pid)
        try:
            future.result(ABANDON_AFTER_S)  # the call ends once its browser is gone
        except Exception:  # noqa: BLE001 - the call failed with its browser, as expected
            pass
        if not future.done():  # busy outside the browser: leave it, the next call gets a new thread
            self._thread.close(timeout=0)
            self._thread, self._browser_env = None, None
        raise TimeoutError(f"no answer from the browser within {limit:g} s")

    def _open_task(self) -> tuple[dict[str, str], dict]:
        """Runs on the browser thread: the task's start page as an observation, and its task info."""
        ensure_playwright()  # this thread's own Playwright, which BrowserGym's reset then uses
        if self._broken or (self._browser_env is not None and self._browser_env_task != self._task_id):
            self._close_browser_env(keep_for_reuse=True)
        if self._browser_env is None:
            self._browser_env = make_browser_env(
                self._task_id,
                headless=self.headless,
                timeout=self.action_timeout_ms,
                element_timeout_ms=self.element_timeout_ms,
                max_page_elements=self.max_page_elements,
                pre_observation_delay=self.pre_observation_delay,
            )
            self._browser_env_task = self._task_id
            # Before the first reset: every request of the task's pages, from the start page on, is guarded.
            self._guard = BrowserGuard(self._browser_env, self.allowed_domains, self.max_tabs)
        self._broken = False
        self._guard.allowed_domains, self._guard.max_tabs = self.allowed_domains, self.max_tabs
        # Headless, nobody watches BrowserGym's chat window, a second Chromium started at every reset
        # (about a third of a reset's time and memory here): keep its messages in memory instead.
        with in_memory_chat(self.headless):
            browser_obs, browser_info = self._browser_env.reset(seed=self._task_seed)
        self._guard.start_episode(browser_obs["url"])
        self._goal = browser_obs.get("goal", "")
        return self._to_observation(browser_obs, "", ""), browser_info.get("task_info", {})

    def _discard_browser(self) -> None:
        if self._browser_env is None:
            return
        if self._thread is not None and self._thread.alive:
            try:
                self._in_browser(self._close_browser_env, 30.0)
                return
            except Exception:  # noqa: BLE001 - killed below
                pass
        for pid in self.browser_pids:
            kill_process_tree(pid)
        self._browser_env, self._broken = None, False

    def _close_browser_env(self, keep_for_reuse: bool = False) -> None:
        """Runs on the browser thread: close the BrowserGym env, keeping healthy browsers for reuse."""
        env, self._browser_env = self._browser_env, None
        if env is None:
            return
        browsers = [env.browser, getattr(getattr(env, "chat", None), "browser", None)]
        if not self._broken:
            try:
                env.close()  # hands healthy browsers back for reuse
            except Exception:  # noqa: BLE001 - a dead browser cannot close cleanly; it is killed below
                keep_for_reuse = False
        if self._broken or not keep_for_reuse:
            for browser in browsers:
                close_browser(browser)
        self._broken = False

    # ------------------------------------------------------------------ actions (on the browser thread)

    def _execute(self, action: Action, shown: str) -> tuple | str:
        """The step's ``(observation, reward, done, task_info)``, or why ``action`` was refused before it ran."""
        guard = self._guard
        guard.max_tabs = self.max_tabs
        refusal = guard.check_tabs(action) or guard.check_navigation(action)
        if refusal:
            return refusal
        if action.name == "goto":  # the browser needs the address the policy checked, not a relative one
            action = Action("goto", (absolute_url(action.args[0], self._browser_env.page.url),))
        guard.begin_step()
        viewport_height = (self._browser_env.page.viewport_size or {}).get("height", 600)
        browser_obs, reward, done, _, browser_info = self._browser_env.step(to_browsergym_call(action, viewport_height))
        task_info = browser_info.get("task_info", {})
        if guard.send_back_refused_pages():
            # The task judged the tab a refused navigation left behind: judge the page it was sent back to.
            reward, done, _, task_info = compat_browsergym.validate_task(self._browser_env)
            browser_obs = {**browser_obs, **compat_browsergym.observe(self._browser_env)}
        error = guard.error or browser_obs.get("last_action_error", "")
        return self._to_observation(browser_obs, shown, error), reward, done, task_info

    def _refuse(self, last_action: str, error: str, truncated: bool) -> tuple[dict, float, bool, bool, dict]:
        self._ended = truncated
        self._observation = {**self._observation, "last_action": last_action, "last_action_error": _shorten(error)}
        return self._observation, 0.0, False, truncated, self._info({}, error="")

    # ------------------------------------------------------------------ observation and info

    def _to_observation(self, browser_obs: dict, last_action: str, last_action_error: str) -> dict[str, str]:
        if "axtree_text" in browser_obs:  # a page too large to extract
            axtree = browser_obs["axtree_text"]
        else:
            extra_properties = browser_obs.get("extra_element_properties")
            text, nodes_cut = flatten_axtree(browser_obs["axtree_object"], extra_properties, self.clickable)
            axtree = clean_axtree(text) + (f"\n... ({nodes_cut} more nodes cut)" if nodes_cut else "")
        observation = make_observation(
            goal=self._goal or browser_obs.get("goal", ""),
            url=browser_obs.get("url", ""),
            axtree=axtree,
            last_action=last_action,
            last_action_error=_shorten(last_action_error),
        )
        return fit_observation(observation)

    def _info(self, task_info: dict, error: str) -> dict[str, Any]:
        return {
            "task_id": self._task_id,
            "task_seed": self._task_seed,
            "source": "real",
            "changes": "",
            "error": error,
            "step": self._step_count,
            "task_info": dict(task_info),
        }


# ---------------------------------------------------------------------- helpers


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _shorten(error: str) -> str:
    # Playwright errors append a multi-line call log; the first lines carry the reason.
    error = error.strip()
    if "Call log:" in error:
        error = error.split("Call log:", 1)[0].strip()
    return error if len(error) <= MAX_ERROR_LENGTH else error[: MAX_ERROR_LENGTH - 3] + "..."


__all__ = ["RealWebEnv"]
