"""Building and rendering observations in the one format both envs share.

An observation is a plain ``dict`` with the keys of :data:`dynaweb_env.spaces.OBSERVATION_KEYS`.
The accessibility tree is BrowserGym's flattened text form, one node per line, indented by depth
with tabs::

    RootWebArea 'Click Test Task', focused
    \t[13] button 'ONE'
    \t[14] button 'TWO'

These are pure functions: they are tested without a browser and used by the real env, the dream
env, the world model and the policy prompt alike. The tree text itself (its grammar, cleaning,
truncation, lookup by id) is :mod:`dynaweb_env.axtree`'s; its functions are re-exported here.
"""

from __future__ import annotations

from .actions import parse_action
from .axtree import (
    IGNORED_ROLES,
    TEXT_FIELD_ROLES,
    axtree_element_ids,
    axtree_element_line,
    axtree_element_text,
    axtree_nodes,
    axtree_row_text,
    clean_axtree,
    parse_axtree_line,
    truncate_axtree,
)
from .spaces import OBSERVATION_KEYS


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


def action_target(action: str, axtree: str) -> str:
    """The tree line of the element ``action`` acts on, in the page ``axtree`` it is taken on (``""`` for an
    action without an element, a malformed one, or an element not in the tree)."""
    try:
        element = parse_action(action).element_id
    except ValueError:
        return ""
    return axtree_element_line(axtree, element) if element is not None else ""


def _unnamed_target(action: str, axtree: str) -> str | None:
    """The id of the element ``action`` acts on when it has neither a name nor a value, ``None`` otherwise."""
    target = action_target(action, axtree)
    node = parse_axtree_line(target) if target else None
    if node is None or node.name.strip() or node.value or node.bid is None:
        return None
    return node.bid


def action_target_text(action: str, axtree: str) -> str:
    """The text an *unnamed* element that ``action`` acts on shows (:func:`~dynaweb_env.axtree.axtree_element_text`):
    ``"Marcella"`` for ``click [17]`` on ``[17] listitem ''`` over ``StaticText 'Marcella'``.

    ``""`` for an element with a name or a value (they already say what it is: a text field's text is its
    ``value``), one without text, an action without an element, or an element not in the tree. A judge in the
    ``"grounded-text"`` prompt style reads it beside :func:`action_target`'s line.
    """
    bid = _unnamed_target(action, axtree)
    return axtree_element_text(axtree, bid) if bid is not None else ""


def action_target_row(action: str, axtree: str) -> str:
    """The row's text before an unnamed element that shows none itself (:func:`~dynaweb_env.axtree.axtree_row_text`):
    ``"Zabrina Mi. Elementum condi.."`` for the star ``[27] image ''`` of Zabrina's inbox row.

    ``""`` where :func:`action_target_text` reads a text (or has no unnamed element to read), for a text field
    (its row is its label), and for an element with no text before it in its row.
    """
    bid = _unnamed_target(action, axtree)
    if bid is None or axtree_element_text(axtree, bid):
        return ""
    node = parse_axtree_line(axtree_element_line(axtree, bid))
    # A text field's row is its label, which need not repeat the objective's words ("Verify password").
    return "" if node is None or node.role in TEXT_FIELD_ROLES else axtree_row_text(axtree, bid)


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
    "action_target_row",
    "action_target_text",
    "axtree_nodes",
    "truncate_axtree",
    "render_observation",
]
