"""``RealWeb-v0``: DynaWeb's observation and action contract on a real Chromium browser.

The environment drives BrowserGym's ``BrowserEnv`` (one per task id) and translates between the
paper's action grammar (:mod:`dynaweb_env.actions`) and BrowserGym's high-level action calls, and
from BrowserGym's accessibility tree to DynaWeb's text observation (:mod:`dynaweb_env.observation`).
Everything that can go wrong in a browser (a malformed action, a missing element, a refused
navigation, a crashed or hung browser) is reported in the observation and ``info`` instead of
raised, so a policy in training can never crash a step.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit

import gymnasium as gym
import numpy as np

from ..actions import Action, ActionParseError, extract_action, format_action, parse_action
from ..observation import clean_axtree, make_observation, render_observation, truncate_axtree
from ..spaces import MAX_TEXT_LENGTH, web_action_space, web_observation_space
from .browser import (
    browser_pid,
    close_browser,
    close_idle_browsers,
    ensure_playwright,
    kill_process_tree,
    setup_miniwob_url,
)

#: The element timeout BrowserGym writes into its action functions (replaced by ``element_timeout_ms``).
_BROWSERGYM_ELEMENT_TIMEOUT = "timeout=500"
#: Longest error message kept in ``last_action_error`` (Playwright timeouts carry long call logs).
MAX_ERROR_LENGTH = 1000

#: Key names a policy may write in lower case, mapped to Playwright's spelling.
_KEY_NAMES = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "escape": "Escape", "esc": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": "Space", "home": "Home",
    "end": "End", "pageup": "PageUp", "pagedown": "PageDown", "insert": "Insert",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "ctrl": "Control", "control": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta", "cmd": "Meta",
    "controlormeta": "ControlOrMeta",
}  # fmt: skip

# The URL a click on an element would open: its own or its enclosing link's href.
_LINK_TARGET_JS = "e => { const a = e.closest('a[href]'); return a ? a.href : null; }"

# URLs a page may always show: new tabs start blank, and error pages are where refusals land.
_ALWAYS_ALLOWED_SCHEMES = ("about", "data", "blob", "chrome-error")


class RealWebEnv(gym.Env[dict, str]):
    """Web tasks in a real Chromium browser (MiniWoB++, WebArena, any BrowserGym task), in DynaWeb's format.

    ## Description

    Each episode opens a fresh browser on one BrowserGym task (default ``miniwob.click-button``,
    served from the ``miniwob`` package's local pages) and lets the agent act on it with the paper's
    action grammar. The observation is the same text dictionary ``DreamWeb-v0`` produces, so a
    policy cannot tell a dream from the real web by its format.

    ## Action Space

    ``web_action_space()``: one string. It may be a bare action (``click [13]``) or a whole policy
    response (``REASON: ... ACTION: click [13]``); :func:`~dynaweb_env.actions.extract_action` finds
    the action. Actions map to BrowserGym calls: ``click [id]`` -> ``click``, ``type [id] [text] [1]``
    -> ``fill`` then ``press Enter`` (``[0]``: no Enter), ``hover``, ``press [keys]`` ->
    ``keyboard_press``, ``scroll [up|down]`` -> wheel by 90% of the viewport height, ``new_tab``,
    ``tab_focus [i]``, ``close_tab``, ``goto [url]``, ``go_back``, ``go_forward``, and
    ``stop [answer]`` -> ``send_msg_to_user(answer)``. An action that does not parse, names a
    missing element or would leave ``allowed_domains`` costs a step, sets ``last_action_error`` and
    the episode goes on.

    ## Observation Space

    ``web_observation_space()``: a ``Dict`` of text fields ``goal`` (the task query), ``url`` (the
    active page), ``axtree`` (BrowserGym's flattened accessibility tree, ``[bid] role 'name'`` lines
    indented by depth with tabs, ``InlineTextBox`` / ``LineBreak`` lines dropped), ``last_action``
    (the action as executed, canonical form) and ``last_action_error`` ("" if none).

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
    (``info["error"]`` says why; the next ``reset`` launches a new browser).

    ## Arguments

    ```python
    gym.make("RealWeb-v0", task="miniwob.click-button", tasks=None, max_steps=10,
             allowed_domains=None, headless=True, action_timeout_ms=None, element_timeout_ms=2000,
             step_timeout_s=60.0, reset_timeout_s=120.0, pre_observation_delay=0.5, render_mode=None)
    ```

    * ``task``: a BrowserGym task id (``miniwob.<name>``; ``webarena.<n>`` etc. once that benchmark
      is installed and its sites configured).
    * ``tasks``: task ids to sample one from per reset (overrides ``task``).
    * ``max_steps``: steps before truncation (paper: 10).
    * ``allowed_domains``: hosts (``"localhost:7770"``, ``"example.com"`` also admits its
      subdomains) or ``"file://"``. Navigation elsewhere is refused. Default: the start page's
      host, or ``"file://"`` for local pages.
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
    * ``render_mode``: ``"ansi"`` makes ``render()`` return the observation as the policy sees it.

    ``info`` holds ``task_id``, ``task_seed``, ``source="real"``, ``changes=""`` (the real env does
    not describe state changes), ``error`` (browser-level failures, "" if none), ``step``, and
    ``task_info`` (BrowserGym's task information, e.g. MiniWoB++'s raw reward).

    ## Version History

    * v0: Initial version.
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
        render_mode: str | None = None,
    ):
        if tasks is not None:
            if isinstance(tasks, str) or not tasks or not all(isinstance(t, str) for t in tasks):
                raise ValueError(f"tasks must be a non-empty list of task ids, got {tasks!r}")
            tasks = list(tasks)
        for task_id in tasks or [task]:
            check_task_id(task_id)
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if allowed_domains is not None and (
            isinstance(allowed_domains, str) or not all(isinstance(d, str) and d for d in allowed_domains)
        ):
            raise ValueError(f"allowed_domains must be a list of non-empty strings, got {allowed_domains!r}")
        if action_timeout_ms is not None and action_timeout_ms <= 0:
            raise ValueError(f"action_timeout_ms must be positive, got {action_timeout_ms}")
        if not isinstance(element_timeout_ms, int) or element_timeout_ms <= 0:
            raise ValueError(f"element_timeout_ms must be a positive integer, got {element_timeout_ms!r}")
        if step_timeout_s <= 0 or reset_timeout_s <= 0:
            raise ValueError(f"timeouts must be positive, got {step_timeout_s=} and {reset_timeout_s=}")
        if pre_observation_delay < 0:
            raise ValueError(f"pre_observation_delay must be >= 0, got {pre_observation_delay}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")

        self.task = task
        self.tasks = tasks
        self.max_steps = max_steps
        self.allowed_domains = list(allowed_domains) if allowed_domains is not None else None
        self.headless = headless
        self.action_timeout_ms = action_timeout_ms
        self.element_timeout_ms = element_timeout_ms
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.pre_observation_delay = pre_observation_delay
        self.render_mode = render_mode
        self.observation_space = web_observation_space()
        self.action_space = web_action_space()

        self._browser_env: Any = None  # BrowserGym's BrowserEnv, for the task self._browser_env_task
        self._browser_env_task = ""
        self._task_id = ""
        self._task_seed = 0
        self._goal = ""
        self._step_count = 0
        self._observation: dict[str, str] | None = None
        self._broken = False  # the browser crashed or hung: relaunch at next reset
        self._domains: list[str] = []
        self._refused_navigations: list[str] = []

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
            browser_obs, browser_info = self._open_task()
        except Exception:  # noqa: BLE001 - one retry on a fresh browser, then let the error out
            self._discard_browser()
            browser_obs, browser_info = self._open_task()

        self._step_count = 0
        self._goal = browser_obs.get("goal", "")
        self._observation = self._to_observation(browser_obs, last_action="", last_action_error="")
        return self._observation, self._info(browser_info.get("task_info", {}), error="")

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        """Execute one action (or the action inside a whole policy response); never raises on bad input."""
        if self._observation is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self._step_count += 1
        truncated_by_limit = self._step_count >= self.max_steps

        if self._broken:
            observation = {**self._observation, "last_action_error": "the browser crashed earlier; call reset()"}
            return observation, 0.0, False, True, self._info({}, error="browser crashed earlier")

        text = action if isinstance(action, str) else ""
        extracted = extract_action(text)
        try:
            parsed = parse_action(extracted) if isinstance(action, str) else None
            if parsed is None:
                raise ActionParseError(f"action must be a string, got {type(action).__name__}")
            last_action = format_action(parsed)
        except ActionParseError as error:
            return self._refuse(extracted[:200], f"invalid action: {error}", truncated_by_limit)

        self._refused_navigations.clear()
        try:
            outcome = self._run_with_watchdog(lambda: self._execute(parsed), self.step_timeout_s)
        except Exception as error:  # noqa: BLE001 - any browser failure ends the episode, never the caller
            self._broken = True
            message = f"browser failure: {type(error).__name__}: {_first_line(str(error))}"
            observation = {**self._observation, "last_action": last_action, "last_action_error": message}
            self._observation = observation
            return observation, 0.0, False, True, self._info({}, error=message)
        if isinstance(outcome, str):  # refused before it reached the page
            return self._refuse(last_action, outcome, truncated_by_limit)

        browser_obs, reward, done, _, browser_info = outcome
        error = _shorten(browser_obs.get("last_action_error", ""))
        if self._refused_navigations:
            error = self._refusal_message(self._refused_navigations[0])
        self._observation = self._to_observation(browser_obs, last_action=last_action, last_action_error=error)
        terminated = bool(done) or parsed.is_stop
        reward = float(np.clip(float(reward or 0.0), 0.0, 1.0))
        return (
            self._observation,
            reward,
            terminated,
            truncated_by_limit and not terminated,
            self._info(browser_info.get("task_info", {}), error=""),
        )

    def render(self) -> str | None:
        """The current observation as the policy sees it (``render_mode="ansi"``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; use gym.make('RealWeb-v0', render_mode='ansi')")
            return None
        return render_observation(self._observation) if self._observation is not None else ""

    def close(self) -> None:
        """Close the browsers of this env (and any kept for reuse); kills them if they do not close cleanly."""
        self._discard_browser()
        close_idle_browsers()
        self._observation = None
        super().close()

    # ------------------------------------------------------------------ browser management

    @property
    def page(self) -> Any:
        """The active Playwright page (``None`` before the first reset), for debugging and tests."""
        return self._browser_env.page if self._browser_env is not None else None

    @property
    def browser_pids(self) -> list[int]:
        """Pids of the main processes of this env's browsers (the task's; with ``headless=False`` also the chat's)."""
        env = self._browser_env
        if env is None:
            return []
        chat_browser = getattr(getattr(env, "chat", None), "browser", None)
        return [pid for pid in (browser_pid(env.browser), browser_pid(chat_browser)) if pid is not None]

    def _open_task(self) -> tuple[dict, dict]:
        if self._broken or (self._browser_env is not None and self._browser_env_task != self._task_id):
            self._discard_browser(keep_for_reuse=True)
        ensure_playwright()
        if self._browser_env is None:
            self._browser_env = _make_browser_env(
                self._task_id,
                headless=self.headless,
                timeout=self.action_timeout_ms,
                element_timeout_ms=self.element_timeout_ms,
                pre_observation_delay=self.pre_observation_delay,
            )
            self._browser_env_task = self._task_id
        result = self._run_with_watchdog(self._reset_browser_env, self.reset_timeout_s)
        self._broken = False
        return result

    def _reset_browser_env(self) -> tuple[dict, dict]:
        # Headless, nobody watches BrowserGym's chat window, a second Chromium started at every reset
        # (about a third of a reset's time and memory here): keep its messages in memory instead.
        with _chat_class(InMemoryChat if self.headless else None):
            browser_obs, browser_info = self._browser_env.reset(seed=self._task_seed)
        self._domains = self.allowed_domains
        if self._domains is None:
            self._domains = _default_domains(browser_obs["url"])
        self._browser_env.context.route("**/*", self._guard_request)
        return browser_obs, browser_info

    def _execute(self, action: Action) -> tuple | str:
        """BrowserGym's step result for ``action``, or why it was refused before it ran."""
        refusal = self._check_navigation(action)
        if refusal:
            return refusal
        browser_obs, reward, done, truncated, browser_info = self._browser_env.step(self._to_browsergym(action))
        if self._refused_navigations:
            browser_obs = self._restore_allowed_page(browser_obs)
        return browser_obs, reward, done, truncated, browser_info

    def _run_with_watchdog(self, work: Callable[[], Any], limit: float) -> Any:
        """``work()``, killing the browsers if it takes longer than ``limit`` seconds (a hung browser)."""
        pids = self.browser_pids
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            for pid in pids or self.browser_pids:
                kill_process_tree(pid)

        watchdog = threading.Timer(limit, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            return work()
        except Exception as error:
            if timed_out.is_set():
                raise TimeoutError(f"no answer from the browser within {limit:g} s") from error
            raise
        finally:
            watchdog.cancel()

    def _discard_browser(self, keep_for_reuse: bool = False) -> None:
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

    # ------------------------------------------------------------------ actions

    def _to_browsergym(self, action: Action) -> str:
        name, args = action.name, action.args
        if name == "click":
            return f"click({args[0]!r})"
        if name == "hover":
            return f"hover({args[0]!r})"
        if name == "type":
            call = f"fill({args[0]!r}, {args[1]!r})"
            return call + (f"\npress({args[0]!r}, 'Enter')" if args[2] == "1" else "")
        if name == "press":
            return f"keyboard_press({normalize_key_combination(args[0])!r})"
        if name == "scroll":
            height = (self._browser_env.page.viewport_size or {}).get("height", 600)
            return f"scroll(0, {(1 if args[0] == 'down' else -1) * round(0.9 * height)})"
        if name == "new_tab":
            return "new_tab()"
        if name == "tab_focus":
            return f"tab_focus({int(args[0])})"
        if name == "close_tab":
            return "tab_close()"
        if name == "goto":
            return f"goto({args[0]!r})"
        if name in ("go_back", "go_forward"):
            return f"{name}()"
        if name == "stop":
            return f"send_msg_to_user({args[0]!r})"
        raise ValueError(f"no BrowserGym translation for {name!r}")  # unreachable: the grammar is closed

    def _refuse(self, last_action: str, error: str, truncated: bool) -> tuple[dict, float, bool, bool, dict]:
        self._observation = {**self._observation, "last_action": last_action, "last_action_error": _shorten(error)}
        return self._observation, 0.0, False, truncated, self._info({}, error="")

    # ------------------------------------------------------------------ navigation guard

    def _check_navigation(self, action: Action) -> str:
        """Why ``action`` may not run (it would leave the allowed domains), or ""."""
        if action.name == "goto":
            url = urljoin(self._browser_env.page.url, action.args[0])
            return "" if self._allowed(url) else self._refusal_message(url)
        if action.name == "click":
            from browsergym.core.action.utils import get_elem_by_bid

            try:
                element = get_elem_by_bid(self._browser_env.page, action.args[0])
                href = element.evaluate(_LINK_TARGET_JS, timeout=1000)
            except Exception:  # noqa: BLE001 - a missing element is reported by the click itself
                return ""
            if href and not href.lower().startswith("javascript:") and not self._allowed(href):
                return self._refusal_message(href)
        return ""

    def _guard_request(self, route: Any, request: Any) -> None:
        # Navigations the pre-check cannot foresee (scripts, forms, redirects) are stopped here.
        if request.is_navigation_request() and not self._allowed(request.url):
            self._refused_navigations.append(request.url)
            route.abort("blockedbyclient")
        else:
            route.fallback()

    def _restore_allowed_page(self, browser_obs: dict) -> dict:
        # A blocked navigation can leave an error page behind: return to the last allowed page.
        page = self._browser_env.page
        if urlsplit(page.url).scheme == "chrome-error":
            try:
                page.go_back(timeout=5000)
                browser_obs = {**browser_obs, **self._browser_env._get_obs()}
            except Exception:  # noqa: BLE001 - the refusal is reported either way
                pass
        return browser_obs

    def _allowed(self, url: str) -> bool:
        return url_in_domains(url, self._domains)

    def _refusal_message(self, url: str) -> str:
        return f"navigation to {url[:200]} refused: outside the allowed domains ({', '.join(self._domains)})"

    # ------------------------------------------------------------------ observation and info

    def _to_observation(self, browser_obs: dict, last_action: str, last_action_error: str) -> dict[str, str]:
        from browsergym.utils.obs import flatten_axtree_to_str

        axtree = clean_axtree(flatten_axtree_to_str(browser_obs["axtree_object"]))
        return make_observation(
            goal=self._goal or browser_obs.get("goal", ""),
            url=browser_obs.get("url", "")[:MAX_TEXT_LENGTH],
            axtree=truncate_axtree(axtree, MAX_TEXT_LENGTH),
            last_action=last_action,
            last_action_error=last_action_error,
        )

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


class InMemoryChat:
    """BrowserGym's ``Chat`` without its browser window: the messages exchanged with the task.

    Tasks read these messages to validate answers (``stop [answer]`` is sent as an assistant
    message), so they are kept exactly as BrowserGym's chat keeps them.
    """

    ROLES = ("user", "user_image", "assistant", "info", "infeasible")

    def __init__(self, *args: Any, **kwargs: Any):
        self.messages: list[dict[str, Any]] = []

    def add_message(self, role: str, msg: str) -> None:
        if role not in self.ROLES:
            raise ValueError(f"Invalid role: {role}")
        if role != "info":
            self.messages.append({"role": role, "timestamp": time.time(), "message": msg})

    def wait_for_user_message(self) -> None:
        raise RuntimeError("waiting for a user message needs BrowserGym's chat window: use headless=False")

    def close(self) -> None:
        pass


@contextmanager
def _chat_class(chat_class: type | None) -> Iterator[None]:
    """Make BrowserGym's env module build ``chat_class`` chats for the duration (``None``: its own)."""
    import browsergym.core.env as browsergym_env

    original = browsergym_env.Chat
    if chat_class is not None:
        browsergym_env.Chat = chat_class
    try:
        yield
    finally:
        browsergym_env.Chat = original


def check_task_id(task_id: str) -> None:
    """Raise ``ValueError`` unless ``task_id`` names a registered BrowserGym task (importing its benchmark)."""
    if not isinstance(task_id, str) or "." not in task_id:
        raise ValueError(f"task must be a BrowserGym task id such as 'miniwob.click-button', got {task_id!r}")
    benchmark = task_id.split(".", 1)[0]
    if benchmark == "miniwob":
        setup_miniwob_url()
    try:
        importlib.import_module(f"browsergym.{benchmark}")
    except ImportError as error:
        raise ValueError(
            f"task {task_id!r} needs the BrowserGym benchmark package browsergym-{benchmark} "
            f"(pip install browsergym-{benchmark}; see its docs for the sites it needs): {error}"
        ) from None
    if f"browsergym/{task_id}" not in gym.registry:
        raise ValueError(f"unknown BrowserGym task {task_id!r}")


def _make_browser_env(task_id: str, element_timeout_ms: int = 2000, **kwargs: Any) -> Any:
    from browsergym.core.action.highlevel import HighLevelActionSet

    action_set = HighLevelActionSet(subsets=["chat", "infeas", "bid", "coord", "nav", "tab"], strict=True)

    def to_python_code(action: str) -> str:
        # BrowserGym's action functions pass a literal ``timeout=500`` to every element operation.
        return action_set.to_python_code(action).replace(_BROWSERGYM_ELEMENT_TIMEOUT, f"timeout={element_timeout_ms}")

    return gym.make(
        f"browsergym/{task_id}", disable_env_checker=True, action_mapping=to_python_code, **kwargs
    ).unwrapped


def normalize_key_combination(keys: str) -> str:
    """Playwright's spelling of a key combination: ``"ctrl+a"`` -> ``"Control+a"``, ``"enter"`` -> ``"Enter"``."""
    parts = [part.strip() for part in keys.split("+")] if keys.strip() != "+" else ["+"]
    return "+".join(_KEY_NAMES.get(part.lower(), part) if len(part) > 1 else part for part in parts)


def url_in_domains(url: str, domains: list[str]) -> bool:
    """Whether ``url`` lies in one of ``domains`` (hosts, ``host:port``, or ``"file://"``)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _ALWAYS_ALLOWED_SCHEMES:
        return True
    if scheme == "file":
        return any(domain.lower().rstrip("/") in ("file:", "file") for domain in domains)
    host = (parts.hostname or "").lower()
    for domain in domains:
        domain = domain.lower()
        if "://" in domain:
            domain = urlsplit(domain).netloc or domain
        domain_host, _, domain_port = domain.partition(":")
        if domain_port and str(parts.port or {"http": 80, "https": 443}.get(scheme, "")) != domain_port:
            continue
        if host == domain_host or host.endswith("." + domain_host):
            return True
    return False


def _default_domains(start_url: str) -> list[str]:
    parts = urlsplit(start_url)
    if parts.scheme == "file":
        return ["file://"]
    return [parts.netloc] if parts.netloc else []


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _shorten(error: str) -> str:
    # Playwright errors append a multi-line call log; the first lines carry the reason.
    error = error.strip()
    if "Call log:" in error:
        error = error.split("Call log:", 1)[0].strip()
    return error if len(error) <= MAX_ERROR_LENGTH else error[: MAX_ERROR_LENGTH - 3] + "..."


__all__ = ["InMemoryChat", "RealWebEnv", "check_task_id", "normalize_key_combination", "url_in_domains"]
