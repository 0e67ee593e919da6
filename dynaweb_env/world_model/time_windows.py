"""Time windows an objective names, and the time ranges a page shows: the objective check's time rule.

"Create a 1 hour event named "Phonecall", between 4PM and 8PM." names a window (4PM to 8PM) and a length (one
hour). A scheduling form shows the range it is about to save as texts (``StaticText '4:30am'``, ``'to'``,
``'5am'``). Once it is saved, the calendar may show the event by its name alone: MiniWoB++'s daily-calendar does,
so its final page cannot tell an event at 4:30am from one at 4:30pm, and the 135M judge paid 3 of its 8 held-out
failures (issue 52). The range is read on the page the last action was taken on (the form as it was submitted,
:attr:`~dynaweb_env.world_model.judge.JudgeRequest.last_action_axtree`), else on the final page.

The rule is a veto, so it is as loose as the task it must never refuse: a range fits a window when it ends inside it
(MiniWoB++'s own test, which also passes 7:30am to 8:30am for "between 8AM and 12PM"), and its length is the
objective's. Nothing else is task-specific: any page that writes a range as ``<time> to <time>`` is read the same.

>>> objective_window('Create a 30 mins event named "Food", between 8AM and 12PM.')
(480, 720)
>>> objective_length('Create a 1.5 hours event named "Gym", between 4PM and 8PM.')
90
>>> range_fits((990, 1020), (960, 1200), 60)  # 4:30pm to 5pm: in the window, but 30 minutes, not 60
False
"""

from __future__ import annotations

import re

from ..axtree import parse_axtree

_CLOCK = r"(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\.?"
#: A time as pages and objectives write it: ``4PM``, ``8:30am``, ``12 p.m.``.
TIME = re.compile(rf"^\s*{_CLOCK}\s*$", re.IGNORECASE)
_WINDOW = re.compile(rf"\bbetween\s+{_CLOCK}\s+and\s+{_CLOCK}", re.IGNORECASE)
_LENGTH = re.compile(r"\b(\d+(?:\.\d+)?)\s*(mins?|minutes?|hours?|hrs?)\b", re.IGNORECASE)
#: The word a page writes between a range's two times.
RANGE_WORDS = frozenset({"to", "-", "–", "until"})


def _minutes(hour: str, minute: str | None, meridiem: str) -> int | None:
    """Minutes after midnight of a 12-hour clock time, ``None`` for an impossible one (13pm, 4:75)."""
    hours, minutes = int(hour), int(minute or 0)
    if not 1 <= hours <= 12 or minutes >= 60:
        return None
    return (hours % 12 + (12 if meridiem.lower() == "p" else 0)) * 60 + minutes


def parse_time(text: str) -> int | None:
    """Minutes after midnight of a text that is a time and nothing else (``"8:30pm"`` -> 1230), else ``None``.

    >>> parse_time("12am"), parse_time("12pm"), parse_time("8:30 PM"), parse_time("8pm party")
    (0, 720, 1230, None)
    """
    match = TIME.match(text)
    return _minutes(*match.groups()) if match else None


def objective_window(objective: str) -> tuple[int, int] | None:
    """The window ``between <time> and <time>`` the objective names, in minutes after midnight, else ``None``."""
    match = _WINDOW.search(objective)
    if match is None:
        return None
    start, end = _minutes(*match.groups()[:3]), _minutes(*match.groups()[3:])
    return None if start is None or end is None else (start, end)


def objective_length(objective: str) -> int | None:
    """The length the objective names (``30 mins``, ``1.5 hours``), in minutes, else ``None``."""
    match = _LENGTH.search(objective)
    if match is None:
        return None
    amount, unit = float(match.group(1)), match.group(2).lower()
    return round(amount * (60 if unit.startswith("h") else 1))


def shown_ranges(axtree: str) -> list[tuple[int, int]]:
    """The time ranges a page shows, ``(start, end)`` in minutes after midnight: a text that is a time, then a range
    word (:data:`RANGE_WORDS`), then a time, in page order with empty texts between them skipped. A range that
    ends at or past midnight (11:30pm to 12am) ends at 1440 or later."""
    texts = [node.name.strip() for node in parse_axtree(axtree) if node.name.strip()]
    ranges = []
    for at in range(len(texts) - 2):
        if texts[at + 1].lower() not in RANGE_WORDS:
            continue
        start, end = parse_time(texts[at]), parse_time(texts[at + 2])
        if start is not None and end is not None:
            ranges.append((start, end + 1440 if end == 0 and start > 0 else end))
    return ranges


def range_fits(shown: tuple[int, int], window: tuple[int, int] | None, length: int | None) -> bool:
    """Whether a shown range meets the objective: it ends inside ``window`` and lasts ``length`` (each where given).

    A range that ends before it starts (``8:30pm to 8:30am``) fits nothing."""
    start, end = shown
    if end <= start:
        return False
    if length is not None and end - start != length:
        return False
    return window is None or window[0] <= end <= window[1]


def format_time(minutes: int) -> str:
    """``1230`` -> ``"8:30pm"``, as a page writes it.

    >>> format_time(1230), format_time(0), format_time(720)
    ('8:30pm', '12am', '12pm')
    """
    hours, minute = divmod(minutes % 1440, 60)
    clock = f"{hours % 12 or 12}" + (f":{minute:02d}" if minute else "")
    return clock + ("pm" if hours >= 12 else "am")


def time_range_requirement(objective: str, pages: list[str]) -> tuple[str, bool] | None:
    """The time rule as one requirement of :func:`~dynaweb_env.world_model.requirements.objective_requirements`:
    ``(the range as shown, whether one shown range fits)``, read on the first of ``pages`` that shows a range;
    ``None`` when the objective names no window or length, or no page shows a range."""
    window, length = objective_window(objective), objective_length(objective)
    if window is None and length is None:
        return None
    for page in pages:
        ranges = shown_ranges(page) if page else []
        if ranges:
            described = ", ".join(f"{format_time(start)} to {format_time(end)}" for start, end in ranges)
            return described, any(range_fits(shown, window, length) for shown in ranges)
    return None


__all__ = [
    "RANGE_WORDS",
    "TIME",
    "format_time",
    "objective_length",
    "objective_window",
    "parse_time",
    "range_fits",
    "shown_ranges",
    "time_range_requirement",
]
