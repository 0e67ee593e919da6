"""Objective grounding: which of the objective's names a trajectory acted on, and how the final page shows them.

A small judge reads ``click [18]``, ``ELEMENT: [18] checkbox 'cp'`` and the objective "Select Neb and click
Submit", and does not reliably notice that ``'cp'`` is not ``'Neb'``. Measured on the dreams of four
dreams-only training runs (README, "Near misses"), 21 of the 31 dreams the judge wrongly called SUCCESS were
such a click: the wrong checkbox, tab, option or button. Trained on more of them, the 135M judge learned that
such pages *often* fail, and rejected half of the real successes too.

The ``"grounded"`` prompt style (:data:`~dynaweb_env.world_model.prompts.PROMPT_STYLES`) therefore states the
match instead of leaving it to the model:

- after each acted-on element, whether its name is named in the objective (:func:`step_grounding`), and for
  ``type``, whether the typed text is;
- after the final tree, the final page's lines whose element the objective names, with their state (checked,
  selected, value): :func:`objective_elements`.

Both are computed from the trajectory alone, by one rule with nothing task-specific, so they read the same on
a live site as on MiniWoB++. They are evidence, not a verdict: the judge still decides (a task may name an
element only by description, or need an element it does not name, such as an unnamed text field).

The objective's explicit requirements, checked against a trajectory for the judge's objective check, are in
:mod:`~dynaweb_env.world_model.requirements`.
"""

from __future__ import annotations

import re

from ..actions import parse_action
from ..axtree import parse_axtree, parse_axtree_line

#: The most final-page lines :func:`objective_elements` returns (the rest are in the tree itself).
MAX_OBJECTIVE_ELEMENTS = 12
#: Names shorter than this are never matched: a one-letter name ("x", "a") is found inside too many objectives.
MIN_NAME_CHARS = 2


def normalise_text(text: str, fold: bool = True) -> str:
    """``text`` with its spacing squashed and, if ``fold``, lower-cased."""
    squashed = " ".join(text.split())
    return squashed.lower() if fold else squashed


def named_in_objective(text: str, objective: str) -> bool:
    """Whether ``text`` appears in ``objective`` as a whole phrase, ignoring case and spacing.

    >>> named_in_objective("Tab #2", "Click on Tab #2.")
    True
    >>> named_in_objective("Tab #1", "Click on Tab #12.")
    False
    """
    phrase = normalise_text(text).strip(" '\"")
    if len(phrase) < MIN_NAME_CHARS:
        return False
    # A phrase bounded by non-word characters or the ends, so 'cp' is not found inside 'cpu' nor '#1' in '#12'.
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", normalise_text(objective)) is not None


def quoted_phrases(objective: str) -> list[str]:
    """The objective's double-quoted phrases, in order: ``Click on the "Block" button`` gives ``["Block"]``."""
    return re.findall(r'"([^"]+)"', objective)


def mentioned_in_objective(label: str, objective: str) -> bool:
    """Whether an element reading ``label`` is one the objective names: ``label`` is named in the objective
    (:func:`named_in_objective`), or a quoted phrase of the objective is a whole phrase of ``label``
    (``'Block @jerald'`` for ``click on the "Block" button``).

    >>> mentioned_in_objective("Block @jerald", 'For the user @jerald, click on the "Block" button.')
    True
    >>> mentioned_in_objective("Mute @jerald", 'For the user @jerald, click on the "Block" button.')
    False
    """
    return named_in_objective(label, objective) or any(
        named_in_objective(phrase, label) for phrase in quoted_phrases(objective)
    )


#: A word of a row's text that can name it: a proper name, a handle or a number (``Zabrina``, ``@jerald``, ``420``)
#: of three characters or more.
_NAME_WORD = re.compile(r"^(?=.*[A-Z0-9@])[\w@#.-]{3,}$")


def row_named_in_objective(row: str, objective: str) -> bool:
    """Whether the objective names a row by a word of its text: a proper name, handle or number of the row
    (:data:`_NAME_WORD`) named in the objective as a whole word (:func:`named_in_objective`).

    >>> row_named_in_objective("Zabrina Mi. Elementum condi..", "Find the email by Zabrina and click the star icon.")
    True
    >>> row_named_in_objective("Simonette Enim. Ultrices laoree..", "Find the email by Zabrina and click the star.")
    False
    """
    words = [word.strip(".,:;!?'\"()") for word in row.split()]
    return any(_NAME_WORD.match(word) and named_in_objective(word, objective) for word in words)


def step_grounding(action: str, target: str, objective: str, text: str = "", row: str = "") -> str:
    """The grounding note of one action, ``""`` when there is nothing to ground.

    Args:
        action: The action string, e.g. ``"click [18]"`` or ``"type [16] [cheree] [0]"``.
        target: The tree line of the element it acted on (:attr:`~dynaweb_env.world_model.judge.JudgeStep.target`).
        objective: The task's goal.
        text: The text an unnamed element shows (:attr:`~dynaweb_env.world_model.judge.JudgeStep.text`), given
            only in the ``"grounded-text"`` prompt style; ``""``: an unnamed element is not grounded by it.
        row: For an unnamed element without text, its row's text (:attr:`~dynaweb_env.world_model.judge.JudgeStep.row`),
            likewise.

    Returns:
        ``"NAMED IN OBJECTIVE: yes|no"`` for an element with a name (:func:`named_in_objective`), with a
        ``text`` (:func:`mentioned_in_objective`) or with a ``row`` (:func:`row_named_in_objective`), and for
        ``type`` also ``"TEXT IN OBJECTIVE: yes|no"``, joined with ``"; "``.
    """
    notes = []
    node = parse_axtree_line(target) if target else None
    if node is not None and node.name.strip():
        notes.append(f"NAMED IN OBJECTIVE: {'yes' if named_in_objective(node.name, objective) else 'no'}")
    elif node is not None and text.strip():
        notes.append(f"NAMED IN OBJECTIVE: {'yes' if mentioned_in_objective(text, objective) else 'no'}")
    elif node is not None and row.strip():
        notes.append(f"NAMED IN OBJECTIVE: {'yes' if row_named_in_objective(row, objective) else 'no'}")
    try:
        parsed = parse_action(action)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.name == "type" and len(parsed.args) > 1 and parsed.args[1].strip():
        notes.append(f"TEXT IN OBJECTIVE: {'yes' if named_in_objective(parsed.args[1], objective) else 'no'}")
    return "; ".join(notes)


def objective_elements(axtree: str, objective: str, limit: int = MAX_OBJECTIVE_ELEMENTS) -> list[str]:
    """The lines of ``axtree`` whose element the objective names (by name or by value), whitespace-normalised.

    Only elements with an id count (the page's static text repeats the names of the controls it labels).
    At most ``limit`` lines, in page order.
    """
    lines = []
    for node in parse_axtree(axtree):
        if node.bid is None:
            continue
        if named_in_objective(node.name, objective) or (node.value and named_in_objective(node.value, objective)):
            lines.append(" ".join(node.line.split()))
            if len(lines) == limit:
                break
    return lines


def format_objective_elements(axtree: str, objective: str) -> str:
    """The prompt section listing :func:`objective_elements` (``"None"`` when the page names none)."""
    return "\n".join(objective_elements(axtree, objective)) or "None"


__all__ = [
    "MAX_OBJECTIVE_ELEMENTS",
    "MIN_NAME_CHARS",
    "format_objective_elements",
    "mentioned_in_objective",
    "named_in_objective",
    "normalise_text",
    "objective_elements",
    "quoted_phrases",
    "row_named_in_objective",
    "step_grounding",
]
