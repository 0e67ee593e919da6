"""A scripted expert for MiniWoB++'s ``text-editor``: style or colour one word, or all the text, in a Quill editor.

The page holds a rich-text editor (Quill) over three or four words of lorem ipsum with commas and full stops
(``Amet, nunc. Etiam convallis.``), a toolbar (a colour picker and three nameless buttons: bold, italic,
underline) and a Submit button. The goal names a word (punctuation included) or ``everything``, and a style
(bold, italics, underlined) or a colour. The page accepts a word when its formatted run, spaces aside, is
exactly the word and nothing else is formatted (``singleStyled``/``singleColored`` in the page's script).

The route: click the editor, select with keys (``Control+a`` for everything; otherwise caret moves from an end
of the text, by word with ``Control+Arrow``, by character with ``Arrow``), then ``Control+b``/``i``/``u`` or the
colour picker and its swatch, then Submit. The caret and the selection are not in the accessibility tree, and
an expert reads only the observation (:mod:`dynaweb_env.experts.base`), so the key sequence is planned whole
from the goal and the editor's text, and the next key is the one after ``last_action`` in that plan. That
works only when no key repeats in the plan, so the plan is the shortest selection **without a repeated key**
(:func:`selection_keys`), searched over a model of Chromium's caret moves (:func:`move_selection`; checked
against Chromium on random key sequences). A repeated key (two ``Control+ArrowRight`` in a row) would be the
same observation twice with two different next actions, which neither this expert nor a policy reading the same
observations could follow. Over the 1,048 words of 300 texts generated as the page does, the plan was as short
as the shortest selection with repeats for 995 (95%), one to three keys longer for 48, and missing for 5 (0.5%:
words beside a ``,.`` such as ``Nunc,. Ultrices.``), where the expert raises :class:`~.base.ExpertError`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .base import AxNode, ExpertError, ExpertPolicy, goal_match, register_expert

#: Keys that move the caret or the selection, in the order the plan search prefers them. ``Control+ArrowUp`` /
#: ``Control+ArrowDown`` (paragraph start / end: the text is one paragraph) do what ``Control+Home`` /
#: ``Control+End`` do, and their ``Shift`` forms what ``Control+Shift+Home`` / ``End`` do.
SELECTION_KEYS: tuple[str, ...] = (
    "Control+Home", "Control+End", "Control+a", "Control+ArrowRight", "Control+ArrowLeft",
    "Control+Shift+ArrowRight", "Control+Shift+ArrowLeft", "Shift+ArrowRight", "Shift+ArrowLeft",
    "ArrowRight", "ArrowLeft", "Control+Shift+Home", "Control+Shift+End",
    "Control+ArrowUp", "Control+ArrowDown", "Control+Shift+ArrowUp", "Control+Shift+ArrowDown",
)  # fmt: skip
#: Keys whose result does not depend on where the caret was: a plan starts with one (the click that focuses
#: the editor leaves the caret wherever it landed).
ABSOLUTE_KEYS: tuple[str, ...] = ("Control+Home", "Control+End", "Control+a", "Control+ArrowUp", "Control+ArrowDown")
_SYNONYMS = {
    "Control+ArrowUp": "Control+Home", "Control+ArrowDown": "Control+End",
    "Control+Shift+ArrowUp": "Control+Shift+Home", "Control+Shift+ArrowDown": "Control+Shift+End",
}  # fmt: skip
#: The keyboard shortcut of each style the goal may name.
STYLE_KEYS = {"bold": "Control+b", "italics": "Control+i", "underlined": "Control+u"}
#: The column of each colour the goal may name in the picker's first row of swatches (Quill's default palette:
#: black, red, orange, yellow, green, blue, purple); the page accepts any shade of that column.
COLOR_COLUMNS = {"red": 1, "orange": 2, "yellow": 3, "green": 4, "blue": 5, "purple": 6}
#: Most keys in a selection plan (every text the page generates needs far fewer).
MAX_PLAN_KEYS = 8

Selection = tuple[int, int]


def _stops(text: str) -> tuple[list[int], list[int]]:
    """Where word moves stop: the starts and the ends of words and of punctuation marks (each its own word)."""
    segments = [(match.start(), match.end()) for match in re.finditer(r"\w+|[^\w\s]", text)]
    return sorted({start for start, _ in segments}), sorted({end for _, end in segments})


def move_selection(text: str, selection: Selection, key: str) -> Selection | None:
    """Where Chromium leaves the selection in a one-paragraph editor holding ``text`` after ``key``.

    Args:
        text: The editor's text.
        selection: ``(anchor, focus)`` offsets in ``text`` (equal when the caret is collapsed).
        key: One of :data:`SELECTION_KEYS`.

    Returns:
        The new ``(anchor, focus)``, or ``None`` if the key changes nothing. Word moves go from the focus to the
        next end (right) or previous start (left) of a word or punctuation mark; without ``Shift`` they
        collapse the selection there. ``ArrowRight``/``ArrowLeft`` collapse a selection to its right/left
        end, or move a caret by one character.

    Raises:
        KeyError: If ``key`` is not in :data:`SELECTION_KEYS`.
    """
    if key not in SELECTION_KEYS:
        raise KeyError(f"no model for the key {key!r}; modelled keys: {', '.join(SELECTION_KEYS)}")
    key = _SYNONYMS.get(key, key)
    starts, ends = _stops(text)
    anchor, focus = selection
    low, high = min(selection), max(selection)
    extend = "Shift" in key
    if key in ("Control+Home", "Control+End", "Control+a", "Control+Shift+Home", "Control+Shift+End"):
        edge = 0 if key.endswith("Home") else len(text)
        moved = {"Control+a": (0, len(text))}.get(key, (anchor, edge) if extend else (edge, edge))
    elif key.startswith("Control+"):
        right = key.endswith("Right")
        target = min((end for end in ends if end > focus), default=None) if right else (
            max((start for start in starts if start < focus), default=None))  # fmt: skip
        moved = None if target is None else ((anchor, target) if extend else (target, target))
    elif extend:
        target = focus + (1 if key.endswith("Right") else -1)
        moved = (anchor, target) if 0 <= target <= len(text) else None
    elif low != high:
        moved = (high, high) if key.endswith("Right") else (low, low)
    else:
        target = focus + (1 if key.endswith("Right") else -1)
        moved = (target, target) if 0 <= target <= len(text) else None
    return None if moved == selection else moved


def formats_word(text: str, selection: Selection, word: str) -> bool:
    """Whether formatting ``selection`` of ``text`` passes the page's check for ``word``.

    The page splits the text into runs (formatted or not, the last ending in a newline), takes the last run
    that is ``word`` once spaces are removed, and asks that it be formatted and no other run be.
    """
    low, high = min(selection), max(selection)
    runs = [(part, formatted) for part, formatted in (
        (text[:low], False), (text[low:high], True), (text[high:] + "\n", False)) if part]  # fmt: skip
    matches = [index for index, (part, _) in enumerate(runs) if re.sub(r"\s", "", part) == word]
    if not matches:
        return False
    return all(formatted == (index == matches[-1]) for index, (_, formatted) in enumerate(runs))


@lru_cache(maxsize=256)
def selection_keys(text: str, word: str | None) -> tuple[str, ...]:
    """The shortest key sequence, no key twice, that selects ``word`` in ``text`` so that formatting it passes.

    Args:
        text: The editor's text.
        word: The word to select, punctuation included, or ``None`` for all the text.

    Returns:
        Keys of :data:`SELECTION_KEYS`, the first one of :data:`ABSOLUTE_KEYS`.

    Raises:
        ExpertError: If no such sequence of at most :data:`MAX_PLAN_KEYS` keys exists.
    """
    if word is None:
        return ("Control+a",)
    # Synonyms move the same way, so the search tracks how many keys of each effect are left, not which.
    effects = [key for key in SELECTION_KEYS if key not in _SYNONYMS]
    supply = tuple(1 + sum(_SYNONYMS[other] == key for other in _SYNONYMS) for key in effects)
    accepted = {(low, high) for low in range(len(text)) for high in range(low + 1, len(text) + 1)
                if formats_word(text, (low, high), word)}  # fmt: skip
    moves: dict[tuple[Selection, int], Selection | None] = {}
    layer: list[tuple[tuple[int, ...], Selection, tuple[int, ...]]] = []
    for key in ABSOLUTE_KEYS:
        effect = effects.index(_SYNONYMS.get(key, key))
        edge = 0 if effects[effect].endswith("Home") else len(text)
        left = tuple(count - (index == effect) for index, count in enumerate(supply))
        layer.append(((effect,), (0, len(text)) if key == "Control+a" else (edge, edge), left))
    # A state is dropped when one reached as soon, at the same selection, has every key it has left.
    seen: dict[Selection, list[tuple[int, ...]]] = {}
    for _ in range(MAX_PLAN_KEYS):
        for plan, selection, _left in layer:
            if (min(selection), max(selection)) in accepted:
                return _name_keys(effects[effect] for effect in plan)
        following = []
        for plan, selection, left in layer:
            for effect, key in enumerate(effects):
                if not left[effect]:
                    continue
                if (selection, effect) not in moves:
                    moves[selection, effect] = move_selection(text, selection, key)
                moved = moves[selection, effect]
                remaining = left[:effect] + (left[effect] - 1,) + left[effect + 1 :]
                if moved is None or any(all(map(int.__ge__, other, remaining)) for other in seen.get(moved, ())):
                    continue
                seen.setdefault(moved, []).append(remaining)
                following.append(((*plan, effect), moved, remaining))
        layer = following
    raise ExpertError(f"no selection of {word!r} in {text!r} within {MAX_PLAN_KEYS} distinct keys")


def _name_keys(effects) -> tuple[str, ...]:
    """Key names for a plan of effects: an effect's first use by its own key, its second by the synonym."""
    named: list[str] = []
    for effect in effects:
        synonym = next((key for key, same in _SYNONYMS.items() if same == effect), None)
        named.append(synonym if effect in named and synonym is not None else effect)
    return tuple(named)


@register_expert
class TextEditorExpert(ExpertPolicy):
    """``Using the text editor, give the text nunc. the style italics and press Submit.`` (or ``the color red``,
    or ``everything``)

    Click the editor, select the word (:func:`selection_keys`) or everything (``Control+a``), press the style's
    shortcut (:data:`STYLE_KEYS`) or open the colour picker and click the colour's swatch
    (:data:`COLOR_COLUMNS`: the swatches have no names, only their place), then click Submit. The step is the
    one after ``last_action`` in that plan; after anything else (the first step, an error) the plan starts
    again with the click on the editor.

    Example:
        >>> from dynaweb_env.experts import get_expert
        >>> reasoning, action = get_expert("miniwob.text-editor").act(observation)  # doctest: +SKIP
        >>> action  # doctest: +SKIP
        'click [100]'
    """

    task_id = "miniwob.text-editor"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        goal = observation["goal"]
        single = re.search(r"give the text (\S+) the (style|color) (\w+)", goal)
        match = single or goal_match(r"(?:give|make) everything the (style|color) (\w+)", goal)
        word, (kind, name) = (match.group(1) if single else None), match.groups()[-2:]
        if (kind == "style" and name not in STYLE_KEYS) or (kind == "color" and name not in COLOR_COLUMNS):
            raise ExpertError(f"unknown {kind} {name!r} in the goal {goal!r}")
        nodes = self.nodes(observation)
        editor = self.require(next((node for node in nodes if node.role == "generic" and node.value is not None
                                    and node.bid), None), "the text editor", observation)  # fmt: skip
        submit = self.button(nodes, "Submit", observation)
        text = editor.value or ""
        keys = selection_keys(text, word)
        what = f"the text {word!r}" if word else "everything"
        plan = [f"click [{editor.bid}]", *(f"press [{key}]" for key in keys)]
        last = "" if observation.get("last_action_error") else observation.get("last_action", "")
        if kind == "style":
            plan.append(f"press [{STYLE_KEYS[name]}]")
            if last == plan[-1]:
                return f"{what.capitalize()} has the style {name}; I click Submit.", f"click [{submit.bid}]"
        else:
            picker, first_button, swatches = self._picker(nodes, observation)
            plan.append(f"click [{picker.bid}]")
            if last == plan[-1] and swatches:
                swatch = swatches[COLOR_COLUMNS[name]]
                return f"The colour picker is open; {name} is swatch {COLOR_COLUMNS[name] + 1} [{swatch.bid}].", (
                    f"click [{swatch.bid}]"
                )
            clicked = re.fullmatch(r"click \[(\d+)\]", last)
            if clicked and (picker.bid or "").isdigit() and int(picker.bid) < int(clicked.group(1)) < first_button:
                return f"{what.capitalize()} has the colour {name}; I click Submit.", f"click [{submit.bid}]"
        if last in plan[:-1]:
            step = plan[plan.index(last) + 1]
            return f"To give {what} the {kind} {name}, the plan is {', '.join(plan)}; next: {step}.", step
        return f"To give {what} the {kind} {name}, I first click the editor [{editor.bid}].", plan[0]

    def _picker(self, nodes: list[AxNode], observation: dict[str, str]) -> tuple[AxNode, int, list[AxNode]]:
        """The colour picker's label, the bid of the first toolbar button, and the swatches (when open)."""
        first = next((index for index, node in enumerate(nodes) if node.role == "button" and not node.name), None)
        if first is None or not (nodes[first].bid or "").isdigit():
            raise ExpertError("expected the editor's toolbar buttons (bold, italic, underline) on the page")
        labels = [index for index in range(first) if nodes[index].role == "generic" and nodes[index].bid
                  and index + 1 < first and nodes[index + 1].role == "image"]  # fmt: skip
        label = self.require(nodes[labels[-1]] if labels else None, "the colour picker", observation)
        swatches = [node for node in nodes[labels[-1] + 1 : first] if node.role == "generic" and node.bid]
        if swatches and len(swatches) != 35:
            raise ExpertError(f"expected Quill's 35 colour swatches, found {len(swatches)}")
        return label, int(nodes[first].bid or 0), swatches
