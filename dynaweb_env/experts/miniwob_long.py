"""Scripted experts for long MiniWoB++ tasks: episodes of five actions and more.

Large checkbox forms (``click-checkboxes-large``), digits drawn in a grid of checkboxes
(``number-checkboxes``), jQuery UI date pickers (``choose-date``), a flight booking with
autocompletion, a date picker and a result list (``book-flight``), sliders moved by keys
(``use-slider-2``, ``form-sequence``) and an event dragged onto a calendar (``daily-calendar``).
Like every expert (:mod:`dynaweb_env.experts.base`), each reads only the observation and is
stateless: progress is read off the page (a checkbox's ``checked``, a textbox's ``value``, the
month a calendar shows, a slider's value) or off ``last_action`` and its error. Most of these
tasks exceed the paper's 10-step default; their own limits are in
:data:`dynaweb_env.data.tasks.TASK_STEP_LIMITS`.

Tasks left out, and why: ``choose-date-easy``/``-medium`` (3-4 actions), ``guess-number``
(``type`` with Enter submits a guess: at most 4), ``copy-paste``/``-2`` and ``use-spinner`` (the text or
value can be typed: 2 actions), ``phone-book`` (median 3 pages), ``order-food`` (3-5), ``tic-tac-toe``
(at most 5 moves), ``stock-market`` (a price that changes every 100 ms: timing, not skill),
``ascending-numbers`` (SVG text without element ids), ``use-slider`` (range and page step unknown).
``text-editor`` (median 5 actions) has a module of its own, :mod:`dynaweb_env.experts.miniwob_editor`.
"""

from __future__ import annotations

import re

from .base import (
    AxNode,
    ExpertError,
    ExpertPolicy,
    fill_or_submit,
    find_all_by_role,
    find_by_role_and_name,
    goal_match,
    register_expert,
)
from .miniwob import ClickCheckboxesExpert


@register_expert
class ClickCheckboxesLargeExpert(ClickCheckboxesExpert):
    """``Select tN, kMLSI5, 1LO4eNb, NQ, X6uBdfT, HH and click Submit.`` (up to a dozen boxes to tick).

    The page and the goal read as click-checkboxes' do, so the logic is that expert's.
    """

    task_id = "miniwob.click-checkboxes-large"


#: The 7x4 grid of each digit in number-checkboxes, row by row (``1``: ticked), as the task's page draws it.
DIGIT_PATTERNS: dict[str, tuple[str, ...]] = {
    "0": ("0110", "1001", "1001", "1001", "1001", "1001", "0110"),
    "1": ("0010", "0110", "0010", "0010", "0010", "0010", "0010"),
    "2": ("0110", "1001", "1001", "0010", "0100", "1000", "1111"),
    "3": ("0110", "1001", "0001", "0110", "0001", "1001", "0110"),
    "4": ("1000", "1010", "1010", "1111", "0010", "0010", "0010"),
    "5": ("1111", "1000", "1000", "1110", "0001", "1001", "0110"),
    "6": ("0110", "1001", "1000", "1110", "1001", "1001", "0110"),
    "7": ("1111", "1001", "0001", "0010", "0010", "0100", "0100"),
    "8": ("0110", "1001", "1001", "0110", "1001", "1001", "0110"),
    "9": ("0110", "1001", "1001", "0111", "0001", "1001", "0110"),
}


@register_expert
class NumberCheckboxesExpert(ExpertPolicy):
    """``Draw the number "2" in the checkboxes using the example on the right and press Submit when finished.``

    The page holds seven rows of four checkboxes; the digit's pattern says which to tick.
    """

    task_id = "miniwob.number-checkboxes"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        digit = goal_match(r'Draw the number "(\d)"', observation["goal"]).group(1)
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "checkbox")
        if len(boxes) != 28:
            raise ExpertError(f"expected 7 rows of 4 checkboxes, found {len(boxes)} checkboxes")
        wanted = "".join(DIGIT_PATTERNS[digit])
        for index, box in enumerate(boxes):
            if (wanted[index] == "1") != box.checked:
                row, column = divmod(index, 4)
                verb = "tick" if wanted[index] == "1" else "untick"
                return (
                    f"The digit {digit} sets row {row + 1}, column {column + 1} to {wanted[index]}; I {verb} it.",
                    f"click [{box.bid}]",
                )
        submit = self.button(nodes, "Submit", observation)
        return f"The checkboxes draw a {digit}; I click Submit [{submit.bid}].", f"click [{submit.bid}]"


# ---------------------------------------------------------------------------- date pickers

_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December",
)  # fmt: skip


def _shown_month(nodes: list[AxNode]) -> tuple[int, int] | None:
    """``(year, month)`` of the open jQuery UI date picker (its title: a month's name, then the year), or ``None``."""
    for index, node in enumerate(nodes[:-1]):
        if node.role == "StaticText" and node.name in _MONTHS:
            for later in nodes[index + 1 : index + 4]:
                if later.role == "StaticText" and later.name.isdigit() and len(later.name) == 4:
                    return int(later.name), _MONTHS.index(node.name) + 1
    return None


def pick_date(nodes: list[AxNode], field: AxNode, date: str) -> tuple[str, str] | None:
    """The next step of choosing ``date`` (``MM/DD/YYYY``) in a read-only date picker ``field``; ``None`` once set.

    A click on the field opens the calendar (on the latest month allowed); ``Prev`` and ``Next`` turn its
    months; a click on a day's link fills the field and closes it.
    """
    if (field.value or "") == date:
        return None
    month, day, year = (int(part) for part in date.split("/"))
    shown = _shown_month(nodes)
    if shown is None:
        return f"The date field [{field.bid}] is read-only; a click on it opens its calendar.", f"click [{field.bid}]"
    if shown != (year, month):
        direction = "Prev" if shown > (year, month) else "Next"
        arrow = find_by_role_and_name(nodes, "link", direction)
        if arrow is None:
            raise ExpertError(f"the calendar shows {shown} and has no {direction} link towards {date}")
        return (
            f"The calendar shows {_MONTHS[shown[1] - 1]} {shown[0]}; {date} is in {_MONTHS[month - 1]} {year}, so I "
            f"click {direction} [{arrow.bid}].",
            f"click [{arrow.bid}]",
        )
    link = find_by_role_and_name(nodes, "link", str(day))
    if link is None:
        raise ExpertError(f"the calendar of {_MONTHS[month - 1]} {year} has no day {day}")
    return f"The calendar shows {_MONTHS[month - 1]} {year}; day {day} is [{link.bid}].", f"click [{link.bid}]"


class _ChooseDateExpert(ExpertPolicy):
    """``Select 03/17/2016 as the date and hit submit.`` (a read-only field with a jQuery UI date picker)"""

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        date = goal_match(r"Select (\d\d/\d\d/\d{4}) as the date", observation["goal"]).group(1)
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        field = self.require(boxes[0] if boxes else None, "the date field", observation)
        step = pick_date(nodes, field, date)
        if step is not None:
            return step
        submit = self.button(nodes, "Submit", observation)
        return f"The field holds {date}; I click Submit [{submit.bid}].", f"click [{submit.bid}]"


@register_expert
class ChooseDateExpert(_ChooseDateExpert):
    task_id = "miniwob.choose-date"


@register_expert
class ChooseDateNodelayExpert(_ChooseDateExpert):
    task_id = "miniwob.choose-date-nodelay"


# ---------------------------------------------------------------------------- flight booking


def _listitem_text(nodes: list[AxNode], index: int) -> str:
    """The text of the first ``StaticText`` below ``nodes[index]`` (an autocompletion suggestion)."""
    for child in nodes[index + 1 :]:
        if child.depth <= nodes[index].depth:
            break
        if child.role == "StaticText" and child.name.strip():
            return child.name
    return ""


def _airport_fits(entry: str, wanted: str) -> bool:
    """Whether an airport entry ``"Corpus Christi, TX (CRP)"`` is the goal's city (``"Corpus Christi, TX"``) or code."""
    return entry.startswith(wanted + " (") or entry.endswith(f"({wanted})")


class _BookFlightExpert(ExpertPolicy):
    """``Book the shortest one-way flight from: Corpus Christi, TX to: SHG on 12/05/2016.``

    Each airport field autocompletes: typing the goal's city or code lists the matching airports, and a
    click on the one that fits fills the field with its full name. The date field is a read-only date
    picker (:func:`pick_date`). Search lists the flights, each with its duration and a "Book flight for
    $price" button: the cheapest or the shortest is booked.
    """

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        goal = observation["goal"]
        kind, origin, destination, date = goal_match(
            r"Book the (cheapest|shortest) one-way flight from: (.+?) to: (.+?) on (\d\d/\d\d/\d{4})", goal
        ).groups()
        nodes = self.nodes(observation)
        books = [node for node in find_all_by_role(nodes, "button") if node.name.startswith("Book flight for")]
        if books:
            return self._book(nodes, books, kind)
        origin_box = find_by_role_and_name(nodes, "textbox", "From:")
        destination_box = find_by_role_and_name(nodes, "textbox", "To:")
        origin_box = self.require(origin_box, "the From: field", observation)
        destination_box = self.require(destination_box, "the To: field", observation)
        for box, wanted in ((origin_box, origin), (destination_box, destination)):
            if _airport_fits(box.value or "", wanted):
                continue
            suggestions = [
                (index, _listitem_text(nodes, index))
                for index, node in enumerate(nodes)
                if node.role == "listitem" and node.bid is not None
            ]
            for index, text in suggestions:
                if _airport_fits(text, wanted) and box.attributes.get("focused", "").lower() == "true":
                    return f"The suggestion '{text}' [{nodes[index].bid}] is {wanted}.", f"click [{nodes[index].bid}]"
            return (
                f"The field '{box.name}' [{box.bid}] must name {wanted}; typing it lists the matching airports.",
                f"type [{box.bid}] [{wanted}] [0]",
            )
        boxes = [box for box in find_all_by_role(nodes, "textbox") if box not in (origin_box, destination_box)]
        field = self.require(boxes[0] if boxes else None, "the departure date field", observation)
        step = pick_date(nodes, field, date)
        if step is not None:
            return step
        search = self.button(nodes, "Search", observation)
        return f"From, To and the date are set; I click Search [{search.bid}].", f"click [{search.bid}]"

    @staticmethod
    def _book(nodes: list[AxNode], books: list[AxNode], kind: str) -> tuple[str, str]:
        if kind == "cheapest":
            prices = [float(re.sub(r"[^\d.]", "", book.name.rsplit("$", 1)[-1])) for book in books]
            best = min(range(len(books)), key=prices.__getitem__)
            return f"The cheapest flight costs ${prices[best]:g}; I book it [{books[best].bid}].", (
                f"click [{books[best].bid}]"
            )
        durations = []
        for book in books:  # each flight's "Xh Ym" duration comes before its Book button
            before = [node.name for node in nodes[: nodes.index(book)] if node.role == "StaticText"]
            match = next(filter(None, (re.fullmatch(r"(\d+)h (\d+)m", text) for text in reversed(before))), None)
            if match is None:
                raise ExpertError(f"no duration before the button {book.name!r}")
            durations.append(int(match.group(1)) * 60 + int(match.group(2)))
        best = min(range(len(books)), key=durations.__getitem__)
        return f"The shortest flight takes {durations[best]} minutes; I book it [{books[best].bid}].", (
            f"click [{books[best].bid}]"
        )


@register_expert
class BookFlightExpert(_BookFlightExpert):
    task_id = "miniwob.book-flight"


@register_expert
class BookFlightNodelayExpert(_BookFlightExpert):
    task_id = "miniwob.book-flight-nodelay"


# ---------------------------------------------------------------------------- sliders

_CHECKBOX_POSITIONS = {"1st": 1, "2nd": 2, "3rd": 3}


def slider_key(value: int, wanted: int, low: int, high: int) -> str:
    """The first key of the fewest presses moving a jQuery UI slider on ``[low, high]`` from ``value`` to ``wanted``.

    Arrows move it one step, PageUp/PageDown a fifth of its range, Home/End to its ends (a breadth-first search).
    """
    page = (high - low) // 5
    up = [("End", None), ("PageUp", page), ("ArrowRight", 1)]
    down = [("Home", None), ("PageDown", -page), ("ArrowLeft", -1)]
    moves = up + down if wanted > value else down + up  # among equally short paths, the one heading for wanted
    first: dict[int, str] = {}
    frontier = [value]
    while frontier and wanted not in first:
        following = []
        for current in frontier:
            for key, step in moves:
                ends = high if key == "End" else low
                target = ends if step is None else min(high, max(low, current + step))
                if target != value and target not in first:
                    first[target] = first.get(current, key)
                    following.append(target)
        frontier = following
    if wanted not in first:
        raise ExpertError(f"{wanted} is outside the slider's range {low} to {high}")
    return first[wanted]


def slider_step(nodes: list[AxNode], slider: int, wanted: int, low: int, high: int) -> tuple[str, str] | None:
    """The next step of setting the slider ``nodes[slider]`` to ``wanted``; ``None`` once its value text shows it.

    The slider's value is the number shown right after it. A click on the slider focuses its handle (a
    focused element inside it; the click may move it too); then keys move it (:func:`slider_key`).
    """
    below = _children(nodes, slider)
    after = nodes[slider + 1 + len(below) :]
    value = next((int(node.name) for node in after[:1] if re.fullmatch(r"-?\d+", node.name.strip())), None)
    if value is None:
        raise ExpertError(f"no value shown after the slider [{nodes[slider].bid}]")
    if value == wanted:
        return None
    bid = nodes[slider].bid
    if not any(_focused(nodes[index]) for index in below):
        return f"The slider [{bid}] shows {value}, not {wanted}; a click gives it the focus.", f"click [{bid}]"
    key = slider_key(value, wanted, low, high)
    return f"The slider [{bid}] has the focus and shows {value}; towards {wanted} the first key is {key}.", (
        f"press [{key}]"
    )


def _sliders(nodes: list[AxNode], count: int) -> list[int]:
    """Indices of the page's first ``count`` sliders: clickable ``generic`` elements, not inside another one."""
    sliders: list[int] = []
    for index, node in enumerate(nodes):
        inside = sliders and index in _children(nodes, sliders[-1])
        if node.role == "generic" and node.bid is not None and "clickable" in node.attributes and not inside:
            sliders.append(index)
    if len(sliders) < count:
        raise ExpertError(f"expected {count} slider(s), found {len(sliders)}")
    return sliders[:count]


def _children(nodes: list[AxNode], index: int) -> list[int]:
    """Indices of the nodes below ``nodes[index]`` (its subtree, in page order)."""
    below = []
    for position in range(index + 1, len(nodes)):
        if nodes[position].depth <= nodes[index].depth:
            break
        below.append(position)
    return below


def _focused(node: AxNode) -> bool:
    return node.attributes.get("focused", "").lower() == "true"


@register_expert
class FormSequenceExpert(ExpertPolicy):
    """``Select 7 with the slider, click the 3rd checkbox, then hit Submit.`` (a slider from -10 to 10)"""

    task_id = "miniwob.form-sequence"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        wanted, position = goal_match(
            r"Select (-?\d+) with the slider, click the (\w+) checkbox", observation["goal"]
        ).groups()
        nodes = self.nodes(observation)
        step = slider_step(nodes, _sliders(nodes, 1)[0], int(wanted), -10, 10)
        if step is not None:
            return step
        boxes = find_all_by_role(nodes, "checkbox")
        index = _CHECKBOX_POSITIONS.get(position)
        if index is None or index > len(boxes):
            raise ExpertError(f"no {position} checkbox among {len(boxes)}")
        for number, box in enumerate(boxes, start=1):
            if (number == index) != box.checked:
                verb = "tick" if number == index else "untick"
                return f"The slider shows {wanted}; I {verb} checkbox {number} [{box.bid}].", f"click [{box.bid}]"
        submit = self.button(nodes, "Submit", observation)
        return f"The slider shows {wanted} and only the {position} box is ticked; I submit.", f"click [{submit.bid}]"


@register_expert
class UseSlider2Expert(ExpertPolicy):
    """``Set the sliders to the combination [3,15,10] and submit.`` (three sliders from 0 to 20)"""

    task_id = "miniwob.use-slider-2"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        combination = goal_match(r"combination \[([-\d,\s]+)\]", observation["goal"]).group(1)
        wanted = [int(number) for number in combination.split(",")]
        nodes = self.nodes(observation)
        for slider, number in zip(_sliders(nodes, len(wanted)), wanted, strict=True):
            step = slider_step(nodes, slider, number, 0, 20)
            if step is not None:
                return step
        submit = self.button(nodes, "Submit", observation)
        return f"The sliders show {wanted}; I click Submit [{submit.bid}].", f"click [{submit.bid}]"


# ---------------------------------------------------------------------------- calendar

_HOURS = tuple(f"{hour % 12 or 12}{'am' if hour < 12 else 'pm'}" for hour in range(24))
_DURATIONS = {"30 mins": 1, "0.5 hours": 1, "60 mins": 2, "1 hour": 2, "90 mins": 3, "1.5 hours": 3}


@register_expert
class DailyCalendarExpert(ExpertPolicy):
    """``Create a 90 mins event named "Gym", between 12PM and 4PM.``

    The day is a column of half-hour slots (two after each hour's label). An event is drawn by pressing
    the mouse on its first slot (a click), moving it onto its last slot (a hover) and releasing it on the
    drawn "New event" (a click); a name field and a Create button then appear. Other events may cover
    slots, and a click or hover on a covered slot fails. So the expert first hovers the last slot of a
    candidate block (harmless before the drag starts), and after any failure moves on to the first block
    that starts after the covered slot.
    """

    task_id = "miniwob.daily-calendar"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        goal = observation["goal"]
        duration, name, start, end = goal_match(
            r'Create a (.+?) event named "([^"]+)", between (\d+[AP]M) and (\d+[AP]M)', goal
        ).groups()
        if duration not in _DURATIONS:
            raise ExpertError(f"unknown duration {duration!r}")
        length = _DURATIONS[duration]
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        if boxes:
            create = self.button(nodes, "Create", observation)
            return fill_or_submit([(boxes[0], name)], create)
        index = next((i for i, node in enumerate(nodes) if node.bid and _text_below(nodes, i) == "New event"), None)
        if index is not None:
            bid = nodes[index].bid
            return f"The new event is drawn; releasing the mouse on it [{bid}] asks for its name.", f"click [{bid}]"
        slots = self._slots(nodes)
        first, last = 2 * _HOURS.index(start.lower()), 2 * _HOURS.index(end.lower())
        blocks = [(slot, slot + length - 1) for slot in range(first, last - length + 1) if slot + length - 1 in slots]
        where = {bid: slot for slot, bid in slots.items()}
        target = re.match(r"^(click|hover) \[([^\]]+)\]", observation.get("last_action", ""))
        verb, bid = target.groups() if target else ("", "")
        chosen = 0
        if target and observation.get("last_action_error", "") and bid in where:
            chosen = next((k for k, (begin, _) in enumerate(blocks) if begin > where[bid]), len(blocks))
        elif verb == "hover" and bid in where:
            begin, finish = next(((b, f) for b, f in blocks if slots[f] == bid), (None, None))
            if begin is not None:
                return (
                    f"The last slot [{bid}] is free; the drag starts on the first slot [{slots[begin]}].",
                    f"click [{slots[begin]}]",
                )
        elif verb == "click" and bid in where:
            begin, finish = next(((b, f) for b, f in blocks if slots[b] == bid), (None, None))
            if finish is not None:
                return f"The mouse went down on [{bid}]; the event ends on slot [{slots[finish]}].", (
                    f"hover [{slots[finish]}]"
                )
        if chosen >= len(blocks):
            raise ExpertError(f"no free block of {length} half-hours between {start} and {end}")
        begin, finish = blocks[chosen]
        return (
            f"A {duration} event between {start} and {end} spans {length} half-hour slot(s); I check that its last "
            f"slot [{slots[finish]}] is free (no other event covers it) before the drag from [{slots[begin]}].",
            f"hover [{slots[finish]}]",
        )

    @staticmethod
    def _slots(nodes: list[AxNode]) -> dict[int, str]:
        """Half-hour index -> the bid of its slot (the two ``generic`` elements after each hour's label)."""
        slots: dict[int, str] = {}
        for index, node in enumerate(nodes):
            if node.role == "StaticText" and node.name in _HOURS:
                after = [later.bid for later in nodes[index + 1 : index + 3] if later.role == "generic" and later.bid]
                for half, bid in enumerate(after):
                    slots[2 * _HOURS.index(node.name) + half] = bid
        return slots


def _text_below(nodes: list[AxNode], index: int) -> str:
    """The text of the first ``StaticText`` child of ``nodes[index]``."""
    following = nodes[index + 1] if index + 1 < len(nodes) else None
    if following is not None and following.depth > nodes[index].depth and following.role == "StaticText":
        return following.name
    return ""
