"""One dream's state, how a dream reads an action (as RealWeb-v0 does, with its words), and its token budgets.

Split from :mod:`dynaweb_env.envs.dream` so the step logic there reads on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..action_rules import left_page_error, tab_refusal
from ..actions import CLICK_ACTIONS, Action, read_action
from ..axtree import parse_axtree_line
from ..data.start_states import StartState
from ..navigation import NavigationPolicy, absolute_url
from ..observation import axtree_element_ids, axtree_element_line, make_observation, render_observation
from ..spaces import MAX_TEXT_LENGTH, fit_observation
from ..world_model.judge import DEFAULT_JUDGE_MAX_NEW_TOKENS, JudgeStep
from ..world_model.model import DEFAULT_MAX_NEW_TOKENS, WorldModelRequest


@dataclass
class DreamEpisode:
    """The state of one dream: where it started, the current page, and what has been done."""

    start: StartState
    url: str
    axtree: str
    last_action: str = ""
    last_action_error: str = ""
    previous_action: str = ""
    steps: list[JudgeStep] = field(default_factory=list)
    #: The page the last dreamed action other than ``stop`` was taken on (``""`` before any): what the judge's
    #: objective check reads where the final page no longer shows what was submitted.
    last_action_axtree: str = ""
    answer: str | None = None
    num_steps: int = 0
    done: bool = False
    #: ``(reward, info)`` of the step (or ``finish``) that ended the dream; ``None`` while it runs.
    verdict: tuple[float, dict[str, Any]] | None = None
    #: Steps whose world-model samples disagreed (``reward_guards.world_model_samples > 1``).
    uncertain_steps: int = 0
    #: Tabs open (a dream shows one; ``new_tab`` and ``close_tab`` count, for the tab rules both envs apply).
    tabs: int = 1

    @classmethod
    def begin(cls, start: StartState) -> DreamEpisode:
        previous = start.history[-1] if start.history else ""
        return cls(start=start, url=start.url, axtree=start.axtree, last_action=previous, previous_action=previous)

    def observation(self) -> dict[str, str]:
        observation = make_observation(self.start.goal, self.url, self.axtree, self.last_action, self.last_action_error)
        return fit_observation(observation)  # start states and predictions may be longer than the space admits

    def reset_info(self) -> dict[str, Any]:
        return {
            "task_id": self.start.task_id,
            "source": "dream",
            "trajectory_id": self.start.trajectory_id,
            "start_step_index": self.start.step_index,
        }

    def start_info(self) -> dict[str, Any]:
        """``reset``'s info: :meth:`reset_info` and the recorded actions before the start (``start_history``)."""
        return {**self.reset_info(), "start_history": tuple(self.start.history)}


# Errors read as RealWeb-v0 reports them, so that a policy cannot tell a dream by its error messages.
_MISSING_ELEMENT = 'ValueError: Could not find element with bid "{}"'  # BrowserGym's message
# Playwright's message for typing into an element that takes no text (BrowserGym's fill, as RealWeb-v0 reports it).
NOT_FILLABLE_ERROR = "Error: Locator.fill: Error: Element is not an <input>, <textarea> or [contenteditable] element"
#: Roles that are never an <input>, <textarea> or contenteditable element: typing into one fails on a real page.
#: (A combobox may be an <input> and a generic node may be contenteditable, so neither is here.)
NOT_FILLABLE_ROLES = frozenset(
    {"button", "link", "checkbox", "radio", "tab", "tablist", "tabpanel", "menuitem", "option", "heading",
     "image", "img", "LabelText", "list", "listitem"}
)  # fmt: skip


def read_dream_action(
    text: Any, episode: DreamEpisode, action_set: str = "paper"
) -> tuple[Action | None, str, str, str]:
    """``(action or None, action string to show, reasoning, error)`` for a bare action or a policy response.

    The text is read as RealWeb-v0 reads it (:func:`~dynaweb_env.actions.read_action`, in ``action_set``'s
    grammar). An element action whose id is not in the current tree, typing into an element that takes no
    text (a button, a link, a checkbox: :data:`NOT_FILLABLE_ROLES`), selecting in an element that is not a
    list (:data:`SELECTABLE_ROLES`), a tab that is not open, closing the last tab
    (:func:`~dynaweb_env.action_rules.tab_refusal`), and a navigation the real env would refuse, are
    refused here with the real env's words, so the world model is never asked to imagine them.
    """
    read = read_action(text, action_set=action_set)
    if read.action is None:
        return None, read.shown, read.reasoning, read.error
    action = read.action
    if action.element_id is not None and action.element_id not in axtree_element_ids(episode.axtree):
        return None, read.shown, read.reasoning, _MISSING_ELEMENT.format(action.element_id)
    if action.name in ("type", "select"):
        node = parse_axtree_line(axtree_element_line(episode.axtree, action.element_id, MAX_TEXT_LENGTH))
        if node is not None and action.name == "type" and node.role in NOT_FILLABLE_ROLES:
            return None, read.shown, read.reasoning, NOT_FILLABLE_ERROR
        if node is not None and action.name == "select" and node.role not in SELECTABLE_ROLES:
            return None, read.shown, read.reasoning, NOT_SELECTABLE_ERROR
    refusal = tab_refusal(action, episode.tabs) or _navigation_refusal(action, episode)
    return (None if refusal else action), read.shown, read.reasoning, refusal


# Playwright's message for selecting in an element that is not a <select> (BrowserGym's select_option).
NOT_SELECTABLE_ERROR = "Error: Locator.select_option: Error: Element is not a <select> element"
#: The roles a <select> is shown with (one choice, several): selecting in any other element fails on a real page.
SELECTABLE_ROLES = frozenset({"combobox", "listbox"})


def leaves_task_page(action: Action, episode: DreamEpisode) -> str:
    """Why the task ends when ``action`` runs (a MiniWoB++ task left by ``new_tab`` or ``goto``), or "".

    The words are BrowserGym's, as RealWeb-v0 reports them in ``info["task_info"]["error"]``.
    """
    target = absolute_url(action.arg("url"), episode.url) if action.name == "goto" else ""
    return left_page_error(action, episode.start.task_id, episode.url, target)


_LINK_URL = re.compile(r"""\burl=(?:'([^']*)'|"([^"]*)")""")


def _navigation_refusal(action: Action, episode: DreamEpisode) -> str:
    """Why RealWeb-v0 would refuse ``action`` as a navigation out of the task (``goto``, a link click), or ""."""
    policy = NavigationPolicy.for_start_url(episode.start.url)
    if action.name == "goto":
        return policy.refusal(action.arg("url"), base_url=episode.url)
    if action.name in CLICK_ACTIONS:
        link = _LINK_URL.search(axtree_element_line(episode.axtree, action.arg("element_id"), MAX_TEXT_LENGTH))
        href = (link.group(1) or link.group(2)) if link else ""
        if href and not href.lower().startswith("javascript:"):  # as the real env: a page's own script link runs
            return policy.refusal(href, base_url=episode.url)
    return ""


def default_max_new_tokens(spec: Any, default: int) -> int:
    """The generation budget to use for the model ``spec`` names when its caller set none: an embedded model's
    own (:attr:`EmbeddedModel.max_new_tokens`, e.g. ``tiny-random``'s 16), else ``default``."""
    if isinstance(spec, (dict, str)):
        from ..llm import parse_backend_spec
        from ..models import EMBEDDED_MODELS

        try:
            name = parse_backend_spec(spec).get("model")
        except ValueError:  # a malformed spec is reported where the backend is built
            return default
        model = EMBEDDED_MODELS.get(name) if isinstance(name, str) else None
        if model is not None and model.max_new_tokens is not None:
            return model.max_new_tokens
    return default


def generation_budgets(world_model: Any, judge: Any, max_new_tokens: int | None, judge_max_new_tokens: int | None):
    """``(max_new_tokens, judge_max_new_tokens)`` with each ``None`` replaced by its model's default budget:
    :data:`DEFAULT_MAX_NEW_TOKENS` / :data:`DEFAULT_JUDGE_MAX_NEW_TOKENS`, or an embedded model's own
    (``tiny-random``: 16, :func:`default_max_new_tokens`)."""
    from .dream_setup import WORLD_MODEL_JUDGE

    judge = world_model if judge in (WORLD_MODEL_JUDGE, "world-model") else judge
    if max_new_tokens is None:
        max_new_tokens = default_max_new_tokens(world_model, DEFAULT_MAX_NEW_TOKENS)
    if judge_max_new_tokens is None:
        judge_max_new_tokens = default_max_new_tokens(judge, DEFAULT_JUDGE_MAX_NEW_TOKENS)
    return max_new_tokens, judge_max_new_tokens


def world_model_request(episode: DreamEpisode) -> WorldModelRequest:
    return WorldModelRequest(
        goal=episode.start.goal,
        url=episode.url,
        axtree=episode.axtree,
        action=episode.last_action,
        previous_action=episode.previous_action,
    )


def render_dream(episode: DreamEpisode) -> str:
    """Text rendering of a dream's current state (``render_mode="ansi"``)."""
    header = f"[dream {episode.start.task_id} step {episode.num_steps}{' (ended)' if episode.done else ''}]"
    return header + "\n" + render_observation(episode.observation()) + "\n"


__all__ = [
    "DreamEpisode",
    "generation_budgets",
    "leaves_task_page",
    "read_dream_action",
    "render_dream",
    "world_model_request",
]
