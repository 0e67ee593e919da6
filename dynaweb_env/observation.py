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


def target_text_and_row(target: str, axtree: str) -> tuple[str, str]:
    """What an *unnamed* element reads as, from its tree line ``target`` (:func:`action_target`) in ``axtree``:
    ``(text, row)``, the text it shows (:func:`~dynaweb_env.axtree.axtree_element_text`), else, when it shows none,
    the text before it in its row (:func:`~dynaweb_env.axtree.axtree_row_text`).

    ``("Marcella", "")`` for ``[17] listitem ''`` over ``StaticText 'Marcella'``; ``("", "Zabrina Mi.")`` for the star
    ``[27] image ''`` of Zabrina's inbox row. ``("", "")`` for an element with a name or a value (they already say
    what it is: a text field's text is its ``value``), for a text field's row (its label, which need not repeat the
    objective's words: "Verify password"), and for no element. A judge in the ``"grounded-text"`` prompt style reads
    them beside the target line.
    """
    node = parse_axtree_line(target) if target else None
    if node is None or node.name.strip() or node.value or node.bid is None:
        return "", ""
    if text := axtree_element_text(axtree, node.bid):
        return text, ""
    return "", "" if node.role in TEXT_FIELD_ROLES else axtree_row_text(axtree, node.bid)


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
    "target_text_and_row",
    "axtree_nodes",
    "truncate_axtree",
    "render_observation",
]
