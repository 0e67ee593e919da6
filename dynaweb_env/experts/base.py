"""The expert-policy interface, its registry, and helpers to query accessibility-tree text.

An expert reads only what a learned policy reads, the observation (goal, URL, tree, last action and
error), and answers with ``(reasoning, action)`` in the paper's grammar. Experts are stateless:
progress through a multi-step task is read off the page (a checkbox's ``checked``, a textbox's
``value``) or, where the page does not show it, off ``last_action``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from ..agent import format_policy_response
from ..axtree import AxNode, parse_axtree
from ..observation import render_observation


def find_all_by_role(nodes: list[AxNode], role: str, with_bid: bool = True) -> list[AxNode]:
    """Every node of the given role, in page order (by default only those with a bid)."""
    return [node for node in nodes if node.role == role and (node.bid is not None or not with_bid)]


def find_by_role_and_name(
    nodes: list[AxNode], role: str, name: str, *, exact: bool = True, case_sensitive: bool = True
) -> AxNode | None:
    """The first node with a bid, the given role and name (``exact=False``: name contains ``name``)."""
    wanted = name if case_sensitive else name.lower()
    for node in find_all_by_role(nodes, role):
        candidate = node.name if case_sensitive else node.name.lower()
        if (candidate == wanted) if exact else (wanted in candidate):
            return node
    return None


def fill_or_submit(fields: list[tuple[AxNode, str]], submit: AxNode) -> tuple[str, str]:
    """Type each ``(textbox, text)`` pair whose value differs, in order; then click ``submit``."""
    for field, text in fields:
        if (field.value or "") != text:
            return f"The field [{field.bid}] must contain {text!r}; I type it.", f"type [{field.bid}] [{text}] [0]"
    return f"Every field holds its text; I click '{submit.name}' to submit.", f"click [{submit.bid}]"


def goal_match(pattern: str, goal: str) -> re.Match[str]:
    """The first match of ``pattern`` in a task goal; :class:`ExpertError` if the goal has another form."""
    match = re.search(pattern, goal)
    if match is None:
        raise ExpertError(f"goal {goal!r} does not match the expected form {pattern!r}")
    return match


def quoted_strings(text: str) -> list[str]:
    """The double-quoted substrings of a goal, in order: ``'Enter "Bob" ...'`` -> ``["Bob"]``."""
    return re.findall(r'"([^"]*)"', text)


def last_action_targets(observation: dict[str, str], action_name: str) -> str | None:
    """The element id of the previous action if it was ``action_name`` and succeeded, else ``None``."""
    last, error = observation.get("last_action", ""), observation.get("last_action_error", "")
    match = re.match(rf"^{action_name} \[([^\]]+)\]", last)
    return match.group(1) if match and not error else None


class ExpertError(RuntimeError):
    """The page does not look like the task the expert knows (e.g. the target element is missing)."""


class ExpertPolicy:
    """A scripted policy for one task. Subclass, set ``task_id`` and implement :meth:`act`.

    Example:
        >>> expert = get_expert("miniwob.click-button")
        >>> reasoning, action = expert.act(observation)  # doctest: +SKIP
    """

    #: The BrowserGym task id the expert solves, e.g. ``"miniwob.click-button"``.
    task_id: ClassVar[str] = ""

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        """Choose the next action from one observation.

        Returns:
            ``(reasoning, action)``: a short explanation and one action string in the grammar.

        Raises:
            ExpertError: If the page does not match what the task should show.
        """
        raise NotImplementedError

    def respond(self, observation: dict[str, str]) -> str:
        """The expert's answer in the policy's response format (:func:`~dynaweb_env.agent.format_policy_response`)."""
        return format_policy_response(*self.act(observation))

    def __call__(self, observation: dict[str, str]) -> tuple[str, str]:
        return self.act(observation)

    @staticmethod
    def nodes(observation: dict[str, str]) -> list[AxNode]:
        return parse_axtree(observation["axtree"])

    def fill_single_field(self, observation: dict[str, str], text: str) -> tuple[str, str]:
        """The step of a one-field form: type ``text`` into the page's first textbox, then click Submit."""
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        box = self.require(boxes[0] if boxes else None, "a text field", observation)
        submit = self.button(nodes, "Submit", observation)
        return fill_or_submit([(box, text)], submit)

    def button(self, nodes: list[AxNode], name: str, observation: dict[str, str]) -> AxNode:
        """The button named ``name`` (exactly), or an :class:`ExpertError` saying it is missing."""
        return self.require(find_by_role_and_name(nodes, "button", name), f"the {name} button", observation)

    @staticmethod
    def require(node: AxNode | None, what: str, observation: dict[str, str]) -> AxNode:
        """``node``, or an :class:`ExpertError` saying which element is missing from the page."""
        if node is None:
            page = render_observation(observation, max_axtree_chars=1500)
            raise ExpertError(f"expected {what} on the page:\n{page}")
        return node


#: Task id -> expert. Filled by :func:`register_expert`.
EXPERTS: dict[str, ExpertPolicy] = {}


def register_expert(cls: type[ExpertPolicy]) -> type[ExpertPolicy]:
    """Class decorator adding one instance of an :class:`ExpertPolicy` subclass to :data:`EXPERTS`."""
    if not cls.task_id:
        raise ValueError(f"{cls.__name__} must set task_id")
    if cls.task_id in EXPERTS:
        raise ValueError(f"an expert for {cls.task_id!r} is already registered ({type(EXPERTS[cls.task_id]).__name__})")
    EXPERTS[cls.task_id] = cls()
    return cls


def get_expert(task_id: str) -> ExpertPolicy:
    """The registered expert for ``task_id``.

    Raises:
        KeyError: If there is none; the message lists the tasks that have one.
    """
    if task_id not in EXPERTS:
        raise KeyError(f"no expert for task {task_id!r}; experts exist for: {', '.join(sorted(EXPERTS))}")
    return EXPERTS[task_id]


#: Anything ``record_episode`` accepts as a policy: an expert, or a callable returning
#: ``(reasoning, action)`` or a whole response text.
PolicyLike = ExpertPolicy | Callable[[dict[str, str]], "tuple[str, str] | str"]

__all__ = [
    "AxNode",
    "EXPERTS",
    "ExpertError",
    "ExpertPolicy",
    "PolicyLike",
    "find_all_by_role",
    "fill_or_submit",
    "find_by_role_and_name",
    "get_expert",
    "goal_match",
    "last_action_targets",
    "parse_axtree",
    "quoted_strings",
    "register_expert",
]
