"""Building and rendering observations in the one format both envs share.

An observation is a plain ``dict`` with the keys of :data:`dynaweb_env.spaces.OBSERVATION_KEYS`.
The accessibility tree is BrowserGym's flattened text form, one node per line, indented by depth
with tabs::

    RootWebArea 'Click Test Task', focused
    \t[13] button 'ONE'
    \t[14] button 'TWO'

These are pure functions: they are tested without a browser and used by the real env, the dream
env, the world model and the policy prompt alike.
"""

from __future__ import annotations

import re

from .actions import parse_action
from .spaces import OBSERVATION_KEYS

#: Roles BrowserGym emits that carry no information for an agent (DESIGN.md: drop them).
IGNORED_ROLES: tuple[str, ...] = ("InlineTextBox", "LineBreak")

_NODE_LINE = re.compile(r"^(?P<indent>\s*)\[(?P<bid>[^\]]+)\]\s*(?P<rest>.*)$")


def make_observation(
    goal: str,
    url: str,
    axtree: str,
    last_action: str = "",
    last_action_error: str = "",
) -> dict[str, str]:
    """Assemble an observation dict with every key of the shared observation space."""
    values = (goal, url, axtree, last_action, last_action_error)
    return dict(zip(OBSERVATION_KEYS, values, strict=True))


def clean_axtree(axtree: str) -> str:
    """Drop lines of :data:`IGNORED_ROLES` and trailing whitespace from a flattened tree."""
    kept = []
    for line in axtree.splitlines():
        body = line.strip()
        if not body:
            continue
        match = _NODE_LINE.match(line)
        role = (match.group("rest") if match else body).split(" ", 1)[0]
        if role in IGNORED_ROLES:
            continue
        kept.append(line.rstrip())
    return "\n".join(kept)


def axtree_element_ids(axtree: str) -> list[str]:
    """The bids (``[id]`` prefixes) of the nodes of a flattened tree, in order."""
    return [match.group("bid") for line in axtree.splitlines() if (match := _NODE_LINE.match(line))]


def axtree_element_line(axtree: str, bid: str, max_chars: int = 120) -> str:
    """The node line of element ``bid`` in a flattened tree, whitespace-normalised and cut to ``max_chars``
    (``""`` if the tree has no such element): what an action on ``[bid]`` acted on, in words."""
    for line in axtree.splitlines():
        match = _NODE_LINE.match(line)
        if match and match.group("bid") == bid:
            text = " ".join(line.split())
            return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
    return ""


def action_target(action: str, axtree: str) -> str:
    """The tree line of the element ``action`` acts on, in the page ``axtree`` it is taken on (``""`` for an
    action without an element, a malformed one, or an element not in the tree)."""
    try:
        element = parse_action(action).element_id
    except ValueError:
        return ""
    return axtree_element_line(axtree, element) if element is not None else ""


def axtree_nodes(axtree: str) -> list[str]:
    """The node lines of a tree, whitespace-normalised: the unit of world-model fidelity metrics."""
    return [" ".join(line.split()) for line in axtree.splitlines() if line.strip()]


def truncate_axtree(axtree: str, max_chars: int) -> str:
    """Cut a tree to at most ``max_chars`` characters at a line boundary.

    This is the one documented way long trees are shortened (for prompts): whole lines are kept
    from the top of the page, and a final line says how many were dropped, so neither the policy
    nor the world model mistakes a cut tree for a short page.
    """
    if max_chars <= 0 or len(axtree) <= max_chars:
        return axtree
    lines = axtree.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > max_chars - 40:
            break
        kept.append(line)
        size += len(line) + 1
    kept.append(f"... ({len(lines) - len(kept)} more lines cut)")
    return "\n".join(kept)


def render_observation(observation: dict[str, str], max_axtree_chars: int = 0) -> str:
    """Render an observation as the text block shown to the policy at one step."""
    parts = [
        f"OBJECTIVE: {observation['goal']}",
        f"URL: {observation['url']}",
        "OBSERVATION:",
        truncate_axtree(observation["axtree"], max_axtree_chars),
    ]
    if observation.get("last_action"):
        parts.append(f"PREVIOUS ACTION: {observation['last_action']}")
    if observation.get("last_action_error"):
        parts.append(f"PREVIOUS ACTION ERROR: {observation['last_action_error']}")
    return "\n".join(parts)


__all__ = [
    "IGNORED_ROLES",
    "make_observation",
    "clean_axtree",
    "axtree_element_ids",
    "axtree_element_line",
    "action_target",
    "axtree_nodes",
    "truncate_axtree",
    "render_observation",
]
