"""The objective's explicit requirements, checked against a trajectory: the judge's objective check.

The 135M judge still calls a Submit on an empty form a success when the notes say otherwise (issue 48: 10 of the
24 wrong actions of ``benchmarks/default_rewards.py`` were paid). :func:`unmet_objective` states ten requirements
that an objective makes explicit and that a trajectory can be checked against without judgement, for
``TrajectoryJudge(objective_check=True)`` (``reward_guards={"objective_check": ...}``) to withhold a SUCCESS that
leaves one unmet:

- **Quoted text** (``Enter "Briana" ...``) on a page with a text field, unless it names an element of the page or
  one acted on: some ``type`` typed it, a field of the final page holds it, or an acted-on element's name holds it
  (a picked autocomplete entry);
- **Named checkboxes and radio buttons** (``Select yobHFFp, 6yzfh6u and click Submit``) are checked on the final
  page;
- **Named controls** (:data:`ACTED_ROLES`: ``Click button ONE, then click button TWO``, ``press login``) on the
  final page were acted on: some action targeted an element of that name (a click or a hover).
- **Dates** (``Select 01/03/2016 as the date and hit submit``), outside quotes, on a final page with a text field:
  the final page holds the date (a field's value or any text), or some ``type`` typed it (a date picker fills its
  field);
- **A control named as the objective begins** (``Book flight for $388`` for ``Book the shortest one-way flight
  ...``), not named in it, on the final page: some action targeted such a control (a heading "Book Your
  Flight" is not one).
- **Controls named by position** (``Focus into the 2nd input textbox``, ``click the 2nd checkbox``): the final
  page's element of that rank among its controls of that kind (:data:`ORDINAL_ROLES`, page order) was acted on.
- **Lists of values** (``Set the sliders to the combination [1,6,5]``), on a final page showing at least as many
  numbers: the page's numbers hold the list's values in that order.
- **Rows named by a word** (``Find the email by Zabrina and click the star icon``): when the last element acted on
  (a later ``stop`` acts on none) is an icon (unnamed, showing no text: ``[17] image ''``) and the final page has an
  icon of the same role in a row the objective names (:func:`named_rows`), the icon acted on sits in such a row
  (:func:`row_named_in_objective` of its row, as :func:`~dynaweb_env.observation.target_text_and_row` read it in its
  page). Checked only where each step's ``(text, row)`` is given.
- **Texts named** (``Find and click on the folder or file named "Marcella"``, ``click on the "Block" button`` for a
  menu entry ``Block @jerald``): when the last element acted on is unnamed but shows a text (a tree item, a menu
  entry) and the final page has an element of its role showing a text the objective names (:func:`named_texts`),
  the one acted on shows such a text (:func:`mentioned_in_objective`). Checked only where ``(text, row)`` is given.
- **Time windows** (``Create a 1 hour event named "Phonecall", between 4PM and 8PM``): a time range shown on the
  page the last action was taken on, else on the final page (``4:30am to 5am``), fits the window and the length
  (:mod:`~dynaweb_env.world_model.time_windows`).

What each rule flags on every shipped real trajectory, successes, failures and successes cut before their final
action: ``python -m benchmarks.objective_check`` (``benchmarks/results/judge/objective_check.json``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..actions import CLICK_ACTIONS, parse_action
from ..axtree import TEXT_FIELD_ROLES, AxNode, parse_axtree, parse_axtree_line
from ..observation import target_text_and_row
from .grounding import (
    MIN_NAME_CHARS,
    mentioned_in_objective,
    named_in_objective,
    normalise_text,
    quoted_phrases,
    row_named_in_objective,
)
from .time_windows import time_range_requirement

#: An objective that asks for a case ("Type "KELLY" in all lower case letters"): its quoted text is not typed as quoted.
CASE_INSTRUCTION = re.compile(r"\b(?:upper|lower)[\s-]*case\b", re.IGNORECASE)

#: Roles that are checked (those that hold typed text: :data:`~dynaweb_env.axtree.TEXT_FIELD_ROLES`).
CHECKABLE_ROLES = frozenset({"checkbox", "radio"})
#: Roles of controls that an objective naming them asks to act on ("click button ONE", "press Login",
#: "Select Chery>Clarie>Lainey"); an option is picked through its list box, not acted on.
ACTED_ROLES = frozenset({"button", "link", "tab", "menuitem", "treeitem"})
#: How each kind of requirement ends its line when unmet, by kind (:func:`requirement_kind` reads it back).
UNMET_WORDING = {
    "quoted_text": "is typed nowhere",
    "named_box": "which the objective names, is not checked",
    "named_control": "which the objective names, was never acted on",
    "ordinal_control": "which the objective names by its position, was never acted on",
    "date": "is held by no field",
    "values": "is not what the page shows, in order",
    "named_row": "is in no row the objective names",
    "named_text": "shows no text the objective names",
    "time_range": "does not fit the objective's time window and length",
    "first_word_control": "named as the objective begins, was never acted on",
}
#: A date as objectives write it: ``01/03/2016``, ``1/3/16``.
_DATE = re.compile(r"(?<![\w/])\d{1,2}/\d{1,2}/\d{2,4}(?![\w/])")


def objective_dates(objective: str) -> list[str]:
    """The dates the objective names, outside its quoted phrases (those are checked as quoted text).

    >>> objective_dates("Select 01/03/2016 as the date and hit submit.")
    ['01/03/2016']
    >>> objective_dates('Enter "12/25/2020" into the field')
    []
    """
    unquoted = re.sub(r'"[^"]*"', " ", objective)
    return _DATE.findall(unquoted)


#: A list of numbers as objectives write one: ``[1,6,5]``, ``[2, 7, 14]``.
_NUMBER = r"-?\d+(?:\.\d+)?"
_NUMBER_LIST = re.compile(rf"\[\s*({_NUMBER}(?:\s*,\s*{_NUMBER})+)\s*\]")


def objective_value_lists(objective: str) -> list[list[str]]:
    """The lists of numbers the objective names, each a list of its values as written.

    >>> objective_value_lists("Set the sliders to the combination [1,6,5] and submit.")
    [['1', '6', '5']]
    >>> objective_value_lists("Click on [13]")
    []
    """
    return [[value.strip() for value in match.split(",")] for match in _NUMBER_LIST.findall(objective)]


def _shows_in_order(values: Sequence[str], texts: Sequence[str]) -> bool:
    """Whether ``values`` appear among ``texts`` in that order (others may come between)."""
    remaining = iter(texts)
    return all(any(text == value for text in remaining) for value in values)


#: The nouns an objective names a control by position with ("the 2nd input textbox"), and the roles they mean.
ORDINAL_ROLES = {
    "textbox": TEXT_FIELD_ROLES,
    "input": TEXT_FIELD_ROLES,
    "field": TEXT_FIELD_ROLES,
    "button": frozenset({"button"}),
    "link": frozenset({"link"}),
    "checkbox": frozenset({"checkbox"}),
    "radio": frozenset({"radio"}),
    "tab": frozenset({"tab"}),
}
_ORDINAL_WORDS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
_ORDINAL = re.compile(
    rf"\bthe\s+(\d+)(?:st|nd|rd|th)\s+((?:\w+\s+)?\w+)|\bthe\s+({'|'.join(_ORDINAL_WORDS)})\s+((?:\w+\s+)?\w+)",
    re.IGNORECASE,
)


def ordinal_references(objective: str) -> list[tuple[int, str, frozenset[str]]]:
    """The controls the objective names by position: ``(rank, phrase, roles)``, rank from 1.

    >>> [(rank, phrase) for rank, phrase, _ in ordinal_references("Focus into the 2nd input textbox.")]
    [(2, '2nd input textbox')]
    >>> ordinal_references("Find the last email Elva sent")
    []
    """
    references = []
    for match in _ORDINAL.finditer(objective):
        digits, words, ordinal, noun_words = match.groups()
        rank = int(digits) if digits else _ORDINAL_WORDS.index(ordinal.lower()) + 1
        # The noun is one of the next two words ("the 2nd input textbox", "the 2nd textbox and ..."), singular:
        # "the first two checkboxes" names none; "the first name field" is a name, not a position.
        following = (words or noun_words).lower().split()
        nouns = [at for at, word in enumerate(following) if word in ORDINAL_ROLES]
        if nouns and rank >= 1 and following[0] != "name":
            phrase = " ".join(match.group(0).split()[1 : nouns[-1] + 3])  # from the ordinal to the noun
            references.append((rank, phrase, ORDINAL_ROLES[following[nouns[-1]]]))
    return references


def first_word(text: str) -> str:
    """The text's first word, in lower case, where it has 3 letters or more (else ``""``): an objective's verb and
    the control it can name ("Book the shortest one-way flight ..." and the button "Book flight for $388").

    >>> first_word("Book the shortest one-way flight from: LEB to: RDG on 10/15/2016."), first_word("OK")
    ('book', '')
    """
    match = re.match(r"\s*([A-Za-z]{3,})\b", text)
    return match.group(1).lower() if match else ""


def requirement_kind(requirement: str) -> str:
    """The kind (a key of :data:`UNMET_WORDING`) of one requirement line of :func:`objective_requirements`."""
    return next(kind for kind, words in UNMET_WORDING.items() if requirement.endswith(words))


def _is_icon(node) -> bool:
    """An element that says nothing of what it is: no name, no value, not a text field or box (an inbox row's star
    ``[27] image ''``); whether it also shows no text is read from its page."""
    return (
        node.bid is not None
        and not node.name.strip()
        and not node.value
        and node.role not in TEXT_FIELD_ROLES | CHECKABLE_ROLES
    )


def named_rows(axtree: str, objective: str) -> list[tuple[str, str]]:
    """``(id, role)`` of each of the page's icons (unnamed elements showing no text) whose row the objective names
    (:func:`row_named_in_objective`): the star of the inbox row "Zabrina Mi." for "Find the email by Zabrina and
    click the star icon"."""
    return [
        (node.bid, node.role)
        for node in parse_axtree(axtree)
        if _is_icon(node) and row_named_in_objective(target_text_and_row(node.line, axtree)[1], objective)
    ]


def named_texts(axtree: str, objective: str) -> list[tuple[str, str]]:
    """``(id, role)`` of each of the page's unnamed elements whose shown text the objective names
    (:func:`mentioned_in_objective`): the tree item ``[17] listitem ''`` showing "Marcella" for "Navigate through
    the file tree. Find and click on the folder or file named "Marcella"."; the menu entry showing "Block @jerald" for
    'For the user @jerald, click on the "Block" button.'."""
    found = []
    for node in parse_axtree(axtree):
        if _is_icon(node):
            text = target_text_and_row(node.line, axtree)[0]
            if text.strip() and mentioned_in_objective(text, objective):
                found.append((node.bid, node.role))
    return found


def acts_on_page(action: str) -> bool:
    """Whether a recorded action acted on its page: any but an empty one or ``stop`` (a malformed one still did)."""
    try:
        stop = parse_action(action).is_stop
    except ValueError:
        stop = False
    return bool(action.strip()) and not stop


def objective_requirements(
    objective: str,
    actions: Sequence[str],
    targets: Sequence[str],
    final_axtree: str,
    shown: Sequence[tuple[str, str]] | None = None,
    last_page: str = "",
    exact_case: bool = False,
) -> list[tuple[str, bool]]:
    """The objective's explicit requirements (see the module docstring), each with whether the trajectory met it.

    Args:
        objective: The task's goal.
        actions: Every action of the trajectory, in order.
        targets: The tree line each acted on (``""`` for none), as :attr:`JudgeStep.target` holds it.
        final_axtree: The final page.
        shown: For each target, ``(text, row)`` as :func:`~dynaweb_env.observation.target_text_and_row` reads it
            in the page the action was taken on (:attr:`JudgeStep.text`, :attr:`JudgeStep.row`); ``None`` leaves
            out the named-row requirement, which needs them.
        last_page: The page the last action was taken on (``""``: unknown), where a time range is read before the
            final page (:mod:`~dynaweb_env.world_model.time_windows`: a saved event may show no time), and where
            the objective's values must also show when that action clicked a button (what a Submit submitted).
        exact_case: Quoted text counts as typed only in the objective's case (``"c6vT"`` does not meet
            ``"C6vT"``), unless the objective asks for a case (:data:`CASE_INSTRUCTION`). Off for the veto, since
            some sites compare text ignoring case (MiniWoB++'s daily-calendar, search-engine); on for
            :func:`objective_progress`, where the quoted case is never the worse one to rank first.

    Returns:
        ``(requirement, met)`` pairs, the requirement worded as it reads when unmet; ``[]`` when the objective
        makes none explicit on this page.
    """
    nodes = parse_axtree(final_axtree)
    acted = [node for node in map(parse_axtree_line, [t for t in targets if t]) if node is not None]
    names = {normalise_text(node.name) for node in [*nodes, *acted] if node.bid is not None and node.name.strip()}
    fold = not exact_case or CASE_INSTRUCTION.search(objective) is not None
    typed = []
    for action in actions:
        try:
            parsed = parse_action(action)
        except ValueError:
            continue
        if parsed.name == "type" and len(parsed.args) > 1:
            typed.append(normalise_text(parsed.args[1], fold))
    # What the trajectory typed and what the final page's fields hold: where quoted text and dates are looked for.
    held = typed + [normalise_text(node.value or "", fold) for node in nodes if node.role in TEXT_FIELD_ROLES]
    requirements = []
    if any(node.role in TEXT_FIELD_ROLES for node in [*nodes, *acted]):
        picked = [normalise_text(node.name, fold) for node in acted]  # a picked entry ("El Salvador" for "El S")
        for quoted in quoted_phrases(objective):
            text = normalise_text(quoted, fold)
            if not text or normalise_text(quoted) in names:
                continue
            met = any(text in value for value in held) or (
                len(text) >= MIN_NAME_CHARS and any(text in name for name in picked)  # "b" is in "submit"
            )
            requirements.append((f"the objective's text {quoted!r} {UNMET_WORDING['quoted_text']}", met))
    if any(node.role in TEXT_FIELD_ROLES for node in nodes):  # a date is checked where the final page has a field
        page_texts = [node.name for node in nodes if node.name]
        for date in objective_dates(objective):
            met = any(date in text for text in held + page_texts)
            requirements.append((f"the objective's date {date!r} {UNMET_WORDING['date']}", met))
    # Values are read on the final page and, when the last action clicked a button (a Submit), on the page it was
    # clicked on: what that page showed is what the click submitted, whatever the next page (dreamed) shows.
    pages = [nodes]
    last_target = last_acted(actions, targets)[1]
    if last_page and last_target is not None and last_target.role == "button":
        pages.append(parse_axtree(last_page))
    shown_numbers = [[n.name.strip() for n in page if re.fullmatch(_NUMBER, n.name.strip())] for page in pages]
    for values in objective_value_lists(objective):
        checked = [numbers for numbers in shown_numbers if len(numbers) >= len(values)]  # the form gone: unchecked
        if checked:
            met = all(_shows_in_order(values, numbers) for numbers in checked)
            requirements.append((f"the objective's values [{','.join(values)}] {UNMET_WORDING['values']}", met))
    acted_names = {normalise_text(node.name) for node in acted}
    seen = set()
    for node in nodes:
        if node.bid is None or (node.role, node.name) in seen or not named_in_objective(node.name, objective):
            continue
        seen.add((node.role, node.name))
        if node.role in CHECKABLE_ROLES:
            checked = str(node.attributes.get("checked", "")).lower() == "true"
            requirements.append((f"{node.role} {node.name!r}, {UNMET_WORDING['named_box']}", checked))
        elif node.role in ACTED_ROLES:
            met = normalise_text(node.name) in acted_names
            requirements.append((f"{node.role} {node.name!r}, {UNMET_WORDING['named_control']}", met))
    # A control whose name begins as the objective does ("Book flight for $388" for "Book the shortest flight ..."),
    # not named in it: a page offering one is finished only by acting on one (a MiniWoB++ page ends at that click).
    verb = first_word(objective)
    offered = [
        node
        for node in nodes
        if verb and node.bid is not None and node.role in ACTED_ROLES and first_word(node.name) == verb
    ]
    if offered and not any((node.role, node.name) in seen for node in offered):
        met = any(node.role in ACTED_ROLES and first_word(node.name) == verb for node in acted)
        control = f"{offered[0].role} {offered[0].name!r}"
        requirements.append((f"{control}, {UNMET_WORDING['first_word_control']}", met))
    acted_ids = {node.bid for node in acted}
    for rank, phrase, roles in ordinal_references(objective):
        ranked = [node for node in nodes if node.bid is not None and node.role in roles]
        if len(ranked) >= rank:  # a page with fewer such controls cannot be checked against the objective
            met = ranked[rank - 1].bid in acted_ids
            requirements.append((f"the {phrase} ([{ranked[rank - 1].bid}]), {UNMET_WORDING['ordinal_control']}", met))
    last = max((index for index, target in enumerate(targets) if target), default=None)
    if shown and last is not None:
        # The last element acted on (a later `stop` acts on none) is an icon, and the final page has an icon of its
        # kind in a row the objective names ("the email by Zabrina"): the icon acted on is that one, in that row.
        node, (text, row) = parse_axtree_line(targets[last]), shown[last]
        if node is not None and _is_icon(node) and not text.strip():
            if any(role == node.role for _, role in named_rows(final_axtree, objective)):
                met = row_named_in_objective(row, objective)
                requirements.append((f"the icon acted on last ([{node.bid}]) {UNMET_WORDING['named_row']}", met))
        elif node is not None and _is_icon(node) and text.strip():
            # An unnamed element read by its text (a tree item, a menu entry), and the final page has one of its
            # kind showing a text the objective names: the one acted on shows such a text.
            if any(role == node.role for _, role in named_texts(final_axtree, objective)):
                met = mentioned_in_objective(text, objective)
                requirements.append((f"the element acted on last ([{node.bid}]) {UNMET_WORDING['named_text']}", met))
    if (timed := time_range_requirement(objective, [last_page, final_axtree])) is not None:
        described, met = timed
        requirements.append((f"the time range shown ({described}) {UNMET_WORDING['time_range']}", met))
    return requirements


def unmet_objective(
    objective: str,
    actions: Sequence[str],
    targets: Sequence[str],
    final_axtree: str,
    shown: Sequence[tuple[str, str]] | None = None,
    last_page: str = "",
) -> list[str]:
    """One line per explicit requirement the trajectory left undone (``[]``: none found; that is no proof of
    success). Arguments as :func:`objective_requirements`."""
    requirements = objective_requirements(objective, actions, targets, final_axtree, shown, last_page)
    return [requirement for requirement, met in requirements if not met]


def last_acted(actions: Sequence[str], targets: Sequence[str]) -> tuple[str, AxNode | None]:
    """The last action that acted on its page (:func:`acts_on_page`) and the tree line it acted on, parsed
    (``("", None)``: none did; ``None`` for the line when it named none)."""
    action, target = next(
        ((a, t) for a, t in zip(actions[::-1], targets[::-1], strict=False) if acts_on_page(a)), ("", "")
    )
    return action, parse_axtree_line(target) if target else None


def _presses(action: str) -> bool:
    """Whether an action presses its element: a click, a double click, or Enter or Space on it."""
    try:
        parsed = parse_action(action)
    except ValueError:
        return False
    if parsed.name == "press_on":
        return parsed.arg("key_comb").strip().lower() in {"enter", "space"}
    return parsed.name in CLICK_ACTIONS


def submitted_early(objective: str, actions: Sequence[str], targets: Sequence[str]) -> bool:
    """Whether the last action clicked the button the objective ends by naming ("... and press Submit."): the task's
    final step. Clicked while a requirement is unmet, it ends the task in failure on MiniWoB++, whatever a dream
    shows. A button named earlier in the objective ("Click button ONE, then click button TWO.") is a step, not the
    end, and a hover or focus on the final button submits nothing."""
    action, node = last_acted(actions, targets)
    if node is None or node.role != "button" or not _presses(action):
        return False
    phrase = normalise_text(node.name).strip(" '\"")
    ending = rf"(?<!\w){re.escape(phrase)}(?!\w)\W*$"
    return len(phrase) >= MIN_NAME_CHARS and re.search(ending, normalise_text(objective)) is not None


def objective_progress(
    objective: str, actions: Sequence[str], targets: Sequence[str], final_axtree: str, last_page: str = ""
) -> float | None:
    """The share of the objective's explicit requirements the trajectory met (:func:`objective_requirements`, quoted
    text in its case: ``exact_case=True``), ``None`` when the objective makes none explicit on this page. A progress
    signal for a trajectory that has not ended: typing the quoted username is progress on a login form before any
    Submit, and typing the password ``"C6vT"`` as ``c6vT`` is not. Pressing the objective's final button with a
    requirement unmet (:func:`submitted_early`) is no progress at all: 0. Arguments as
    :func:`objective_requirements`."""
    requirements = objective_requirements(
        objective, actions, targets, final_axtree, last_page=last_page, exact_case=True
    )
    if not requirements:
        return None
    met = sum(met for _, met in requirements)
    if met < len(requirements) and submitted_early(objective, actions, targets):
        return 0.0  # the final button pressed before the rest was done: a failed attempt, not progress
    return met / len(requirements)


__all__ = [
    "ACTED_ROLES",
    "acts_on_page",
    "CASE_INSTRUCTION",
    "last_acted",
    "ORDINAL_ROLES",
    "UNMET_WORDING",
    "named_rows",
    "objective_dates",
    "objective_progress",
    "objective_requirements",
    "objective_value_lists",
    "ordinal_references",
    "requirement_kind",
    "submitted_early",
    "unmet_objective",
]
