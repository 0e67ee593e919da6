"""Page consistency: what a real page never does after an action, and how a dreamed page is held to it.

Replayed on their real pages (``benchmarks/dream_rewards.py``), most dreams the judge wrongly called SUCCESS
were not misjudged: the world model had drawn a page the action could not have produced, and the judge read
it correctly. Two such drawings recur:

- **A control renamed.** The policy clicks checkbox ``[18] '0ntVvBZ'``; the dreamed page shows
  ``[18] checkbox 'dhjq', checked='true'``, the name the objective asked for.
- **A field filled that nobody typed into.** The policy types the password into the first field only; the
  dreamed page shows both fields filled.

Neither happens on a real page without navigation. On the 3,957 same-URL transitions of the shipped real
trajectories (24 MiniWoB++ tasks, experts and ε-exploration, ``benchmarks/dream_consistency.py``) neither
happened once. So a dreamed step that does either is a world-model error, whatever the task, and
``DreamWeb-v0``'s ``reward_guards={"consistency": ...}`` either **repairs** the page (the renamed control gets
its name back, the untyped field its emptiness) or **cuts** the dream (ended, reward 0).

Measured on three fresh dreams-only runs (README, "Page consistency"), ``cut`` left no dream rewarded for a real
failure (44 of 44 rewarded dreams succeeded on their real pages). ``repair`` changed no verdict offline: the small
judge still called the repaired near miss a success.

Both rules hold within one page (the URL unchanged): a navigation may replace every element.
Buttons and links are not held to their names: a real toggle renames itself ("Play" -> "Pause"), and a
``select`` sets its list's name and value.

**Where the premise fails: widgets that fill fields.** On the 4,283 same-URL transitions of the all-tasks data
(``dynaweb_env/data/miniwob-all``: 53 tasks, the long ones included) the rules flag 152, all on four tasks whose
pages fill a field by a click or refuse typed text: a date picker's day click fills its input (``choose-date``,
``book-flight``), an autocomplete suggestion replaces the typed code (``book-flight``: ``ERI`` -> ``Erie, PA
(ERI)``), and a date input or a ``<select>`` ignores ``type``. A dream of those tasks held to the rules is cut or
repaired where the real page is not wrong; keep the ``consistency`` guard off for them until the rules learn such
widgets.

The converse, what a dreamed page *leaves out*, is :func:`typed_text_left_out`: a typed field that does not
show its text, or a field whose text changed with no action on it. ``reward_guards={"keep_typed_text": True}``
writes that text in (:func:`repair_page`), since on a real page it is always there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..actions import ActionParseError, parse_action
from ..axtree import TEXT_FIELD_ROLES, nodes_by_bid, parse_axtree, parse_axtree_line, replace_line_fields

if TYPE_CHECKING:
    from ..data.schema import Step

#: Roles whose accessible name is their label, which an action on the same page does not change.
STABLE_NAME_ROLES = frozenset(
    {"checkbox", "radio", "tab", "option", "textbox", "searchbox", "combobox", "spinbutton", "switch", "slider",
     "listbox", "menuitemcheckbox", "menuitemradio", "treeitem"}
)  # fmt: skip
#: Roles that hold typed text in ``value=``.
#: The character a password field shows for each typed one.
MASK = "\u2022"
#: Actions that put text into their target element (``press`` types into whichever element has focus).
TEXT_ACTIONS = frozenset({"type", "press"})


@dataclass(frozen=True)
class Inconsistency:
    """One thing a dreamed page did that a real page does not, or left out that a real page does.

    Attributes:
        kind: ``"renamed"`` (a control's name changed), ``"untyped_value"`` (an empty field got text that no
            action typed), ``"not_typed"`` (the field the action typed into does not show the text) or
            ``"changed"`` (a field lost its text, or got other text, though no action targeted it).
        element_id: The element's bid.
        before: Its name (``renamed``) or value (the others, ``""`` for none) on the page the action was taken on.
        after: The same on the dreamed page.
        expected: The value a real page shows instead (``not_typed`` and ``changed``; ``""`` otherwise).
    """

    kind: str
    element_id: str
    before: str
    after: str
    expected: str = ""

    def describe(self) -> str:
        if self.kind == "renamed":
            return f"[{self.element_id}] renamed: {self.before!r} -> {self.after!r}"
        if self.kind == "untyped_value":
            return f"[{self.element_id}] filled without typing: {self.before!r} -> {self.after!r}"
        what = "typed into but shown" if self.kind == "not_typed" else "changed without an action on it to"
        return f"[{self.element_id}] {what} {self.after!r}, a real page shows {self.expected!r}"


def _typed_into(action: str) -> str | None:
    """The element an action may put text into: its target for ``type``, any (``"*"``) for ``press``."""
    try:
        parsed = parse_action(action)
    except ActionParseError:
        return None
    if parsed.name not in TEXT_ACTIONS:
        return None
    return parsed.element_id or "*"


def _selected(action: str) -> str | None:
    """The list a ``select [id] [option]`` sets: a real ``<select>`` then shows the option as its name and value."""
    try:
        parsed = parse_action(action)
    except ActionParseError:
        return None
    return parsed.element_id if parsed.name == "select" else None


def page_inconsistencies(before: str, action: str, after: str) -> list[Inconsistency]:
    """What the page ``after`` shows that ``action`` on the page ``before`` cannot have caused, on one URL.

    Args:
        before: The tree the action was taken on.
        action: The action, as the policy wrote it (``click [18]``).
        after: The predicted tree.

    Returns:
        The inconsistencies in page order, ``[]`` for a page a real browser could have shown.
    """
    previous = nodes_by_bid(parse_axtree(before))[0]
    typed = _typed_into(action)
    selected = _selected(action)
    found = []
    for node in parse_axtree(after):
        old = previous.get(node.bid) if node.bid else None
        if old is None or old.role != node.role or node.bid == selected:
            continue
        if node.role in STABLE_NAME_ROLES and node.name != old.name:
            found.append(Inconsistency("renamed", node.bid, old.name, node.name))
        may_have_typed = typed in ("*", node.bid)
        if node.role in TEXT_FIELD_ROLES and not old.value and node.value and not may_have_typed:
            found.append(Inconsistency("untyped_value", node.bid, old.value or "", node.value))
    return found


def _password_field(page: str, bid: str, value: str | None) -> bool:
    """Whether field ``bid`` of ``page`` masks its text: it already shows bullets, or the nearest text before
    it (its label) names a password. On the real typings at hand (shipped and near-miss episodes) the label
    rule tells the 806 that showed bullets from the 640 that showed the text, with one exception."""
    if value and set(value) == {MASK}:
        return True
    label = ""
    for node in parse_axtree(page):
        if node.bid == bid:
            return "password" in label.lower()
        if node.role in ("StaticText", "LabelText") and node.name.strip():
            label = node.name
    return False


def typed_text_left_out(before: str, action: str, after: str) -> list[Inconsistency]:
    """What the page ``after`` leaves out of the text typed so far, on one URL.

    Two omissions are checked, both world-model errors:

    - ``not_typed``: ``action`` is ``type [id] [text]`` and field ``id``, drawn enabled, does not show ``text``
      (or, for a password field, as many bullets). A field drawn ``disabled`` is spared: a finished MiniWoB++
      episode disables its form, and keystrokes after the end do not land.
    - ``changed``: a field that held text shows none, or other text that does not extend it, though the action
      did not target it (a ``press`` may edit the focused field, so it is exempt; an extension is an
      autocompletion, or keystrokes drawn late).

    Neither occurs in the 3,957 same-URL transitions of the shipped real trajectories (809 typings; 1,139
    filled fields not targeted: 1,072 kept their text, 67 extended it). In the 384 near-miss episodes recorded
    for the grounded judge, 48 of 744 typings showed other text or none, and 5 login-user usernames turned into
    bullets (``benchmarks/dream_consistency.py`` counts both on any real data).

    Args:
        before: The tree the action was taken on.
        action: The action, as the policy wrote it (``type [19] [Pw8IG] [0]``).
        after: The predicted tree.

    Returns:
        The omissions in page order; :func:`repair_page` writes the ``expected`` values in.
    """
    try:
        parsed = parse_action(action)
    except ActionParseError:
        return []
    # A `select` sets its target list (no text to check); a `type` sets its target field's text.
    target = parsed.element_id if parsed.name in ("type", "select") else None
    text = parsed.arg("text") if parsed.name == "type" else ""
    previous = nodes_by_bid(parse_axtree(before))[0]
    found = []
    for node in parse_axtree(after):
        old = previous.get(node.bid) if node.bid else None
        if old is None or old.role != node.role or node.role not in TEXT_FIELD_ROLES:
            continue
        drawn = node.value or ""
        if node.bid == target and text and "disabled" not in node.attributes:
            shown = [text, MASK * len(text)]
            if drawn not in shown and drawn.removesuffix("\n") not in shown:  # Enter in a textarea adds a line
                expected = shown[1] if _password_field(before, node.bid, old.value) else shown[0]
                found.append(Inconsistency("not_typed", node.bid, old.value or "", drawn, expected))
        elif node.bid != target and old.value and not drawn.startswith(old.value) and parsed.name != "press":
            found.append(Inconsistency("changed", node.bid, old.value, drawn, old.value))
    return found


def write_typed_text_in(before: str, action: str, after: str) -> tuple[str, list[Inconsistency]]:
    """``after`` as ``reward_guards={"keep_typed_text": True}`` shows it: the text it left out written in
    (:func:`typed_text_left_out`, :func:`repair_page`), and what was written (``[]``: the page as drawn)."""
    left_out = typed_text_left_out(before, action, after)
    return (repair_page(after, left_out) if left_out else after), left_out


def same_page_transitions(steps: Sequence[Step]) -> Iterator[tuple[Step, Step]]:
    """The ``(step, next step)`` pairs of a trajectory whose action left the URL as it was: where the rules hold."""
    for step, following in zip(steps, steps[1:], strict=False):
        if step.action and step.url == following.url:
            yield step, following


def repair_page(after: str, inconsistencies: list[Inconsistency]) -> str:
    """``after`` with each inconsistency undone: a renamed control gets its old name back, an untyped field
    loses its value and the ``StaticText`` child that shows it, and a field that left out its text
    (``not_typed``, ``changed``) gets it, shown by one ``StaticText`` child as a real page shows it."""
    renamed = {item.element_id: item.before for item in inconsistencies if item.kind == "renamed"}
    emptied = {item.element_id: item for item in inconsistencies if item.kind == "untyped_value"}
    filled = {item.element_id: item for item in inconsistencies if item.kind in ("not_typed", "changed")}
    lines: list[str] = []
    stale: set[str] = set()  # values the field being rewritten showed, whose StaticText children go
    field_depth = -1
    for line in after.splitlines():
        node = parse_axtree_line(line)
        if node is not None and stale and node.depth > field_depth:
            if node.role == "StaticText" and node.name in stale:
                continue
        else:
            stale = set()
        if node is not None and node.bid in renamed:
            line = replace_line_fields(line, name=renamed[node.bid])
        if node is not None and node.bid in emptied:
            line = replace_line_fields(line, remove_value=True)
            stale, field_depth = {emptied[node.bid].after}, node.depth
        if node is not None and node.bid in filled:
            item = filled[node.bid]
            indent = line[: len(line) - len(line.lstrip())]
            lines += [replace_line_fields(line, value=item.expected), f"{indent}\tStaticText {item.expected!r}"]
            stale, field_depth = {item.before, item.after, item.expected} - {""}, node.depth
            continue
        lines.append(line)
    return "\n".join(lines)


__all__ = [
    "STABLE_NAME_ROLES",
    "TEXT_FIELD_ROLES",
    "Inconsistency",
    "page_inconsistencies",
    "repair_page",
    "same_page_transitions",
    "typed_text_left_out",
    "write_typed_text_in",
]
