"""The action grammar shared by every DynaWeb environment, policy prompt and world-model prompt.

Actions are single strings in the WebArena / NNetNav grammar used by the DynaWeb paper::

    click [id]                      hover [id]
    type [id] [text] [0|1]          press [key_comb]
    scroll [up|down]                new_tab | tab_focus [i] | close_tab
    goto [url] | go_back | go_forward
    stop [answer]

and beyond the paper's twelve ``select [id] [option]``, ``dblclick [id]``, ``focus [id]``,
``press_on [id] [key_comb]`` and ``noop [wait_ms]``. Every action is defined once, in
:data:`~dynaweb_env.action_spec.ACTION_SPECS`; the tables and checks here are made from it.

:func:`parse_action` turns a string into an :class:`Action` (or raises :class:`ActionParseError`
with a message fit to show the policy as ``last_action_error``), :func:`format_action` is its
inverse, :data:`ACTION_DESCRIPTIONS` documents the grammar for prompts,
:func:`extract_action` finds the action inside a whole policy response
(``REASON: ... ACTION: ...``), and :func:`read_action` does all of it for an environment step.
:func:`read_action` also reads BrowserGym's calls (``action_set="browsergym"``,
:mod:`dynaweb_env.browsergym_actions`) into the same :class:`Action`.
A ``press`` of a key Playwright does not know is refused here, so both envs refuse it alike; the
rules that need an env's state (tabs, pages a task forbids) are in :mod:`dynaweb_env.action_rules`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .action_spec import ACTION_SPECS, OFFERED_ACTIONS, check_arguments
from .spaces import MAX_ACTION_LENGTH

#: Action name -> its argument names, in order (from :data:`~dynaweb_env.action_spec.ACTION_SPECS`).
ACTION_ARGUMENTS: dict[str, tuple[str, ...]] = {name: spec.arguments for name, spec in ACTION_SPECS.items()}

#: One line per action, used verbatim in the agent's prompt (from :data:`~dynaweb_env.action_spec.ACTION_SPECS`).
ACTION_DESCRIPTIONS: dict[str, str] = {name: spec.description for name, spec in ACTION_SPECS.items()}

#: The actions that click their element (a link they click navigates; a button they click submits).
CLICK_ACTIONS = frozenset({"click", "dblclick"})

_BRACKETED = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]")
_NAME = re.compile(r"\s*([a-z_]+)\s*")


class ActionParseError(ValueError):
    """Raised by :func:`parse_action` for a string outside the grammar.

    Its message is written for the policy: it is what the environment puts in
    ``last_action_error``.
    """


@dataclass(frozen=True)
class Action:
    """A parsed action.

    Attributes:
        name: One of :data:`ACTION_ARGUMENTS`.
        args: Argument values in grammar order, as strings (``press_enter_after`` is ``"0"``/``"1"``).
    """

    name: str
    args: tuple[str, ...] = field(default_factory=tuple)

    def arg(self, key: str) -> str:
        """The value of the named argument (see :data:`ACTION_ARGUMENTS`)."""
        return self.args[ACTION_ARGUMENTS[self.name].index(key)]

    @property
    def element_id(self) -> str | None:
        """The target element's bid for element actions, else ``None``."""
        return self.args[0] if "element_id" in ACTION_ARGUMENTS[self.name] else None

    @property
    def is_stop(self) -> bool:
        return self.name == "stop"

    def __str__(self) -> str:
        return format_action(self)


def parse_action(text: str) -> Action:
    """Parse one action string.

    Whitespace around the action and surrounding backticks are ignored; ``type`` defaults
    ``press_enter_after`` to ``1`` as in the paper's prompt; ``scroll down`` / ``go back`` style
    spellings are not accepted (one grammar, no guessing).

    Args:
        text: The action, e.g. ``"type [12] [hello world] [0]"``.

    Returns:
        The parsed :class:`Action`.

    Raises:
        ActionParseError: If the string is not a valid action; the message says why.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"action must be a string, got {type(text).__name__}")
    stripped = text.strip().strip("`").strip()
    if not stripped:
        raise ActionParseError("empty action")
    match = _NAME.match(stripped)
    name = match.group(1) if match else ""
    if name not in ACTION_ARGUMENTS:
        shown = stripped.split()[0][:40] if stripped.split() else stripped[:40]
        raise ActionParseError(f"unknown action {shown!r}; valid actions: {', '.join(ACTION_ARGUMENTS)}")
    rest = stripped[match.end() :] if match else ""
    spec = ACTION_SPECS[name]
    args = _split_bracketed(rest, name)
    expected = spec.arguments
    missing = len(expected) - len(args)
    if 0 < missing <= len(spec.defaults):
        args.extend(spec.defaults[len(spec.defaults) - missing :])
    if len(args) != len(expected):
        raise ActionParseError(
            f"{name} takes {len(expected)} bracketed argument(s) ({', '.join(expected) or 'none'}), "
            f"got {len(args)}: {format_action_usage(name)}"
        )
    try:
        return Action(name, check_arguments(spec, args))
    except ValueError as error:
        raise ActionParseError(str(error)) from None


def _split_bracketed(rest: str, name: str) -> list[str]:
    args: list[str] = []
    position = 0
    rest = rest.rstrip()
    while position < len(rest):
        if rest[position].isspace():
            position += 1
            continue
        match = _BRACKETED.match(rest, position)
        if not match:
            if name == "stop" and not args:
                # `stop` answers often contain brackets themselves: take everything up to the last "]".
                break
            raise ActionParseError(f"arguments must be in square brackets: {format_action_usage(name)}")
        args.append(match.group(1) if ACTION_SPECS[name].keep_spacing else match.group(1).strip())
        position = match.end()
    if name == "stop" and not args and rest.strip():
        body = rest.strip()
        if body.startswith("[") and body.endswith("]"):
            return [body[1:-1].strip()]
        raise ActionParseError(f"arguments must be in square brackets: {format_action_usage(name)}")
    return args


def format_action(action: Action) -> str:
    """Render an :class:`Action` back to its canonical string; ``parse_action`` inverts it."""
    if not action.args:
        return action.name
    return action.name + " " + " ".join(f"[{value}]" for value in action.args)


def format_action_usage(name: str) -> str:
    """The usage pattern of one action, e.g. ``"type [element_id] [text] [press_enter_after]"``."""
    return ACTION_SPECS[name].usage()


def describe_actions(names: tuple[str, ...] | None = None) -> str:
    """A bullet list describing the given actions (by default :data:`~dynaweb_env.action_spec.OFFERED_ACTIONS`),
    for system prompts."""
    return "\n".join(f"- {ACTION_SPECS[name].description}" for name in (names or OFFERED_ACTIONS))


# Response reading is written with string operations over lines, not with regular expressions that
# may backtrack: a response is text a policy generated, and a pattern such as ``\n\s*\**\s*ACTION``
# searched over 4,000 newlines took minutes. Every function below is linear in the response length.
_SECTION_NAME = re.compile(r"[A-Z][A-Z ]{2,}")
_SECTION_NAME_ANY_CASE = re.compile(r"[A-Z][A-Z ]{2,}", re.IGNORECASE)
_ACTION_WORD = re.compile(r"\b(" + "|".join(ACTION_ARGUMENTS) + r")\b")
_SPACES = re.compile(r"\s*")


def _lines(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of every line of ``text`` (``end`` excludes the newline)."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield start, end
        start = end + 1
    yield start, len(text)


def _section_header(line: str) -> tuple[str, int] | None:
    """``(name, offset just after the colon)`` if ``line`` opens a section such as ``**ACTION:**``, else ``None``.

    A section line is optional whitespace and ``*`` markers, a name, optional whitespace and ``*``
    markers, then ``:``. The name is returned as written; callers decide which names count.
    """
    body = line.lstrip()
    body = body.lstrip("*").lstrip()
    colon = body.find(":")
    if colon < 0:
        return None
    name = body[:colon].rstrip()
    name = name.rstrip("*").rstrip()
    return name, len(line) - len(body) + colon + 1


def _is_section(line: str, any_case: bool = False) -> bool:
    """Whether ``line`` opens a section whose name is three or more capital letters and spaces."""
    header = _section_header(line)
    if header is None:
        return False
    name = header[0]
    pattern = _SECTION_NAME_ANY_CASE if any_case else _SECTION_NAME
    if len(name) < 3:
        # "AB :" is a section too: spaces after a short name count towards its three characters.
        after = line[line.find(name) + len(name) :]
        name += " " * (len(after) - len(after.lstrip(" ")))
    return pattern.fullmatch(name) is not None


def _cut_at_next_section(body: str, any_case: bool = False, skip_first_line: bool = False) -> str:
    """``body`` up to (not including) its first section-header line."""
    # Lines of only "*" just before a header belong to it (a bold marker opened on its own line).
    markers_start = -1
    for number, (start, end) in enumerate(_lines(body)):
        line = body[start:end]
        if (number or not skip_first_line) and _is_section(line, any_case):
            return body[: markers_start if markers_start >= 0 else start]
        if line.strip().strip("*").strip():
            markers_start = -1
        elif markers_start < 0 and number:
            markers_start = start
    return body


def _grammar_actions(text: str) -> Iterator[str]:
    """Grammar-looking actions in ``text``, left to right, non-overlapping: a name, then optionally
    ``[...]`` running to the last ``]`` of the line on which the ``[`` stands."""
    last_bracket: dict[int, int] = {}  # line end -> position of the line's last "]" (-1: none)
    position = 0
    while (word := _ACTION_WORD.search(text, position)) is not None:
        end = word.end()
        bracket = _SPACES.match(text, end).end()
        if bracket < len(text) and text[bracket] == "[":
            line_end = text.find("\n", bracket)
            line_end = len(text) if line_end < 0 else line_end
            if line_end not in last_bracket:
                last_bracket[line_end] = text.rfind("]", bracket, line_end)
            if last_bracket[line_end] > bracket:
                end = last_bracket[line_end] + 1
        yield text[word.start() : end]
        position = max(end, word.start() + 1)


def extract_action(response: str) -> str:
    """Find the action string in a whole policy response in the paper's format.

    The response is expected to contain ``REASON: ...`` and ``ACTION: ...`` sections (possibly with
    other sections such as ``OBSERVATION HIGHLIGHT:`` after them, and markdown bold markers). The
    text after the last ``ACTION:`` header, up to the next section header, is returned with
    backticks stripped. Without an ``ACTION:`` header, the last grammar-looking action in the text
    is returned; failing that, the stripped response itself, so that :func:`parse_action` reports
    what was wrong. Runs in time linear in ``len(response)``.

    Args:
        response: The policy's full generated text.

    Returns:
        The action string, to be passed to :func:`parse_action` (or to an env's ``step``).
    """
    action_body_start = -1
    for start, end in _lines(response):
        header = _section_header(response[start:end])
        if header is not None and header[0].lower() == "action":
            action_body_start = start + header[1]
    if action_body_start >= 0:
        body = _cut_at_next_section(response[action_body_start:].lstrip().lstrip("*"))
        candidate = ""
        for start, end in _lines(body):
            line = body[start:end].strip()
            if line:
                candidate = line.strip("`").strip()
                break
        inline = next(_grammar_actions(body), None)
        if candidate and not _NAME.match(candidate) and inline:
            candidate = inline
        return candidate.strip("`").strip()
    last = None
    for last in _grammar_actions(response):  # noqa: B007 - the last one is wanted
        pass
    if last is not None:
        return last.strip("`").strip()
    return response.strip()


def extract_reasoning(response: str) -> str:
    """The text of the ``REASON:`` section of a policy response ("" if there is none).

    The section runs from the first ``REASON:`` to the next line that opens a section (any case).
    Runs in time linear in ``len(response)``.
    """
    for word in re.finditer("reason", response, re.IGNORECASE):
        position = _SPACES.match(response, word.end()).end()
        while position < len(response) and response[position] == "*":
            position += 1
        position = _SPACES.match(response, position).end()
        if position < len(response) and response[position] == ":":
            body = response[position + 1 :].lstrip().lstrip("*")
            return _cut_at_next_section(body, any_case=True, skip_first_line=True).strip()
    return ""


#: How much of an unreadable action ``last_action`` repeats.
MAX_SHOWN_ACTION_LENGTH = 200


@dataclass(frozen=True)
class ReadAction:
    """What an environment step makes of the text it was given (see :func:`read_action`).

    Attributes:
        action: The parsed action, or ``None`` if the text holds no valid one.
        shown: What ``last_action`` shows: the canonical action, or the start of the unreadable text.
        reasoning: The response's ``REASON:`` section ("" for a bare action).
        error: Why the text was refused, as ``last_action_error`` shows it ("" if it was read).
    """

    action: Action | None
    shown: str
    reasoning: str = ""
    error: str = ""


def _grammar(action_set: str) -> tuple[Callable[[str], Action], Callable[[str], str]]:
    """``(parse, extract)`` of an action set: the paper's grammar, or BrowserGym's
    (:mod:`dynaweb_env.browsergym_actions`)."""
    if action_set == "paper":
        return parse_action, extract_action
    from .browsergym_actions import check_action_set, extract_browsergym_action, parse_browsergym_action

    check_action_set(action_set)
    return parse_browsergym_action, extract_browsergym_action


def read_action(text: Any, max_length: int = MAX_ACTION_LENGTH, action_set: str = "paper") -> ReadAction:
    """Read the action of one env step, from a bare action or a whole policy response.

    Both envs read actions with this one function, so they accept and refuse the same texts with
    the same words. The checks, in order: the text must be a string of at most ``max_length``
    characters (the action space's limit); a text that parses as an action is that action;
    otherwise the action inside the response (:func:`extract_action`) is parsed.

    Args:
        text: What was passed to ``step``.
        max_length: The longest text admitted.
        action_set: ``"paper"`` (this module's grammar) or ``"browsergym"`` (BrowserGym's calls,
            :mod:`dynaweb_env.browsergym_actions`); both give the same :class:`Action`, shown in its paper form.

    Returns:
        A :class:`ReadAction`; ``error`` reads ``"invalid action: ..."`` when ``action`` is ``None``.
    """
    parse, extract = _grammar(action_set)
    if not isinstance(text, str):
        return ReadAction(None, "", error=f"invalid action: action must be a string, got {type(text).__name__}")
    if len(text) > max_length:
        return ReadAction(
            None,
            text[:MAX_SHOWN_ACTION_LENGTH],
            error=f"invalid action: the action is {len(text)} characters long, more than the {max_length} allowed",
        )
    try:
        action = parse(text)
        return ReadAction(action, format_action(action))
    except ActionParseError as direct_error:
        extracted = extract(text)
        if extracted == text.strip():
            return ReadAction(None, extracted[:MAX_SHOWN_ACTION_LENGTH], error=f"invalid action: {direct_error}")
    reasoning = extract_reasoning(text)
    try:
        action = parse(extracted)
    except ActionParseError as error:
        return ReadAction(None, extracted[:MAX_SHOWN_ACTION_LENGTH], reasoning, f"invalid action: {error}")
    return ReadAction(action, format_action(action), reasoning)


__all__ = [
    "ACTION_ARGUMENTS",
    "ACTION_DESCRIPTIONS",
    "Action",
    "ActionParseError",
    "CLICK_ACTIONS",
    "parse_action",
    "format_action",
    "format_action_usage",
    "describe_actions",
    "extract_action",
    "extract_reasoning",
    "MAX_SHOWN_ACTION_LENGTH",
    "ReadAction",
    "read_action",
]
