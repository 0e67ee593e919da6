"""The action table: one :class:`ActionSpec` per action, from which every other form of the grammar is made.

Each spec holds an action's arguments, its line in the policy's prompt, its wording in the paper-style
world-model prompt (and the group it is listed under), its BrowserGym call, and its tool for TRL's
``environment_factory``. Generated from :data:`ACTION_SPECS`:

* the parser's tables and checks (:mod:`dynaweb_env.actions`: ``ACTION_ARGUMENTS``, ``ACTION_DESCRIPTIONS``);
* the world-model prompt's action block (:mod:`dynaweb_env.world_model.prompts`);
* the BrowserGym translation (:func:`dynaweb_env.envs.browsergym_adapter.to_browsergym_call`);
* the TRL tool methods (:class:`dynaweb_env.integrations.trl.DreamWebTools`, through :func:`tool_method`);
* the BrowserGym grammar, which reads BrowserGym's own calls into these actions
  (:mod:`dynaweb_env.browsergym_actions`).

The first twelve are the paper's grammar, on which the shipped world model and judge were trained:
:data:`PAPER_ACTIONS`. ``select`` is offered beside them (:data:`OFFERED_ACTIONS`: the default policy prompt
lists it last, and it is a TRL tool); ``dblclick``, ``focus``, ``press_on`` and ``noop`` exist so that the
BrowserGym grammar's calls of those names have an action to become, and are accepted in both grammars.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .action_rules import key_combination_error, normalize_key_combination

#: Words that open the world-model prompt's groups of actions (the paper's, appendix A.2).
PAGE, TABS, NAVIGATION, COMPLETION = (
    "Page Operation Actions:", "Tab Management Actions:", "URL Navigation Actions:", "Completion Action:",
)  # fmt: skip


@dataclass(frozen=True)
class ToolParameter:
    """One parameter of a TRL tool.

    Attributes:
        name: The parameter's name.
        annotation: Its Python type (``str``, ``int``, ``bool``), from which the JSON schema's type is made.
        description: Its line in the tool's ``Args:`` docstring section.
        default: Its default (``inspect.Parameter.empty``: required).
    """

    name: str
    annotation: type
    description: str
    default: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class ToolSpec:
    """A TRL tool that performs one action.

    Attributes:
        summary: The docstring's first paragraph (the schema's ``description``).
        parameters: The tool's parameters, in order.
        returns: The docstring's ``Returns:`` line.
        action: Builds the action string from the tool's arguments (by name).
    """

    summary: str
    parameters: tuple[ToolParameter, ...]
    returns: str
    action: Callable[..., str]


@dataclass(frozen=True)
class ActionSpec:
    """Everything about one action of the grammar.

    Attributes:
        name: The action's name, e.g. ``"click"``.
        arguments: Its argument names in order; each name's check is in :data:`ARGUMENT_CHECKS`.
        description: Its line in the policy's prompt.
        world_model_wording: Its paragraph in the paper-style world-model prompt.
        world_model_group: The group that paragraph is listed under (:data:`PAGE`, ...).
        browsergym: ``(args, viewport_height) -> code``: BrowserGym's high-level action code.
        tool: Its TRL tool, or ``None`` for an action not offered as one.
        defaults: Values of trailing arguments a text may leave out (``type``: press Enter; ``stop``: no answer).
        keep_spacing: Arguments are kept as written, not stripped (``type``'s text).
    """

    name: str
    arguments: tuple[str, ...]
    description: str
    world_model_wording: str
    world_model_group: str
    browsergym: Callable[[tuple[str, ...], int], str]
    tool: ToolSpec | None = None
    defaults: tuple[str, ...] = ()
    keep_spacing: bool = False

    def usage(self) -> str:
        """The usage pattern, e.g. ``"type [element_id] [text] [press_enter_after]"``."""
        return " ".join([self.name, *(f"[{argument}]" for argument in self.arguments)])


def _element_tool(summary: str, description: str, returns: str, name: str) -> ToolSpec:
    return ToolSpec(summary, (ToolParameter("element_id", str, description),), returns, lambda element_id: (
        f"{name} [{element_id}]"))  # fmt: skip


def _plain_tool(summary: str, returns: str, name: str) -> ToolSpec:
    return ToolSpec(summary, (), returns, lambda: name)


def _scroll_call(args: tuple[str, ...], viewport_height: int) -> str:
    return f"scroll(0, {(1 if args[0] == 'down' else -1) * round(0.9 * viewport_height)})"


def _type_call(args: tuple[str, ...], viewport_height: int) -> str:
    call = f"fill({args[0]!r}, {args[1]!r})"
    return call + (f"\npress({args[0]!r}, 'Enter')" if args[2] == "1" else "")


_ID = "The element's id, the number in brackets before it in the page"

#: The grammar: every action, in the order of the prompts (the paper's twelve first).
ACTION_SPECS: dict[str, ActionSpec] = {spec.name: spec for spec in (
    ActionSpec(
        "click", ("element_id",),
        "`click [id]`: Click on the element with the numerical id [id] on the page. E.g., `click [7]`.",
        "`click [id]`: This action clicks on an element with a specific id on the webpage.", PAGE,
        lambda args, _: f"click({args[0]!r})",
        _element_tool("Click an element of the page.", f"{_ID}, e.g. 13.", "The page after the click.", "click"),
    ),
    ActionSpec(
        "type", ("element_id", "text", "press_enter_after"),
        "`type [id] [content] [press_enter_after=0|1]`: Type content into the field with id [id]. "
        "The Enter key is pressed after typing unless press_enter_after is 0. "
        "E.g., `type [15] [Carnegie Mellon University] [1]`.",
        "`type [id] [content]`: Use this to type the content into the field with id. By default, the 'Enter' "
        "key is pressed after typing unless `press_enter_after` is set to 0, i.e., `type [id] [content] [0]`.", PAGE,
        _type_call,
        ToolSpec(
            "Type text into a field of the page (its old content is replaced).",
            (
                ToolParameter("element_id", str, "The field's id, the number in brackets before it in the page."),
                ToolParameter("text", str, "The text to type."),
                ToolParameter("press_enter", bool, "Whether to press Enter after typing.", False),
            ),
            "The page after typing.",
            lambda element_id, text, press_enter=False: f"type [{element_id}] [{text}] [{int(bool(press_enter))}]",
        ),
        defaults=("1",), keep_spacing=True,
    ),
    ActionSpec(
        "hover", ("element_id",), "`hover [id]`: Hover over the element with id [id].",
        "`hover [id]`: Hover over an element with id.", PAGE, lambda args, _: f"hover({args[0]!r})",
        _element_tool("Hover the mouse over an element of the page.", f"{_ID}.", "The page after hovering.", "hover"),
    ),
    ActionSpec(
        "press", ("key_comb",),
        "`press [key_comb]`: Press a key combination on the keyboard (e.g., `press [Control+a]`, `press [Enter]`).",
        "`press [key_comb]`: Simulates the pressing of a key combination on the keyboard (e.g., Ctrl+v).", PAGE,
        lambda args, _: f"keyboard_press({normalize_key_combination(args[0])!r})",
        ToolSpec(
            "Press a key or key combination, e.g. Enter or Control+a.",
            (ToolParameter("key_comb", str, "The keys, joined with +."),),
            "The page after the key press.", lambda key_comb: f"press [{key_comb}]",
        ),
    ),
    ActionSpec(
        "scroll", ("direction",), "`scroll [down]` or `scroll [up]`: Scroll the page down or up.",
        "`scroll [down]` or `scroll [up]`: Scroll the page up or down.", PAGE, _scroll_call,
        ToolSpec(
            "Scroll the page.", (ToolParameter("direction", str, "up or down."),),
            "The page after scrolling.", lambda direction: f"scroll [{direction}]",
        ),
    ),
    ActionSpec(
        "new_tab", (), "`new_tab`: Open a new, empty browser tab.", "`new_tab`: Open a new, empty browser tab.",
        TABS, lambda args, _: "new_tab()", _plain_tool("Open a new, empty tab.", "The new tab's page.", "new_tab"),
    ),
    ActionSpec(
        "tab_focus", ("tab_index",),
        "`tab_focus [tab_index]`: Switch focus to the browser tab with index tab_index.",
        "`tab_focus [tab_index]`: Switch the browser's focus to a specific tab using its index.", TABS,
        lambda args, _: f"tab_focus({int(args[0])})",
        ToolSpec(
            "Switch to a tab.", (ToolParameter("tab_index", int, "The tab's index, from 0."),),
            "That tab's page.", lambda tab_index: f"tab_focus [{tab_index}]",
        ),
    ),
    ActionSpec(
        "close_tab", (), "`close_tab`: Close the currently active tab.", "`close_tab`: Close the currently active tab.",
        TABS, lambda args, _: "tab_close()",
        _plain_tool("Close the current tab.", "The page of the tab that becomes current.", "close_tab"),
    ),
    ActionSpec(
        "goto", ("url",), "`goto [url]`: Navigate to the url.", "`goto [url]`: Navigate to a specific URL.",
        NAVIGATION, lambda args, _: f"goto({args[0]!r})",
        ToolSpec(
            "Open a URL in the current tab.", (ToolParameter("url", str, "The URL to open."),),
            "The page at that URL.", lambda url: f"goto [{url}]",
        ),
    ),
    ActionSpec(
        "go_back", (), "`go_back`: Navigate to the previously viewed page.",
        "`go_back`: Navigate to the previously viewed page.", NAVIGATION, lambda args, _: "go_back()",
        _plain_tool("Go back to the previous page.", "The previous page.", "go_back"),
    ),
    ActionSpec(
        "go_forward", (), "`go_forward`: Navigate to the next page (after a `go_back`).",
        "`go_forward`: Navigate to the next page (if a previous 'go_back' action was performed)", NAVIGATION,
        lambda args, _: "go_forward()",
        _plain_tool("Go forward to the next page (after going back).", "The next page.", "go_forward"),
    ),
    ActionSpec(
        "stop", ("answer",),
        "`stop [answer]`: Stop when you believe the task is complete, with the answer in brackets. "
        "If the task needs no textual answer, use `stop [N/A]`. E.g., `stop [5h 47min]`.",
        "`stop [answer]`: Done when you believe the task is complete.", COMPLETION,
        lambda args, _: f"send_msg_to_user({args[0]!r})",
        ToolSpec(
            "End the task, with the answer if the objective asks for one (else N/A).",
            (ToolParameter("answer", str, "The answer, or N/A."),),
            "How the episode ended.", lambda answer: f"stop [{answer}]",
        ),
        defaults=("",),
    ),
    ActionSpec(
        "select", ("element_id", "option"),
        "`select [id] [option]`: Select the option with the text [option] in the drop-down list with id [id].",
        "`select [id] [option]`: Select the option with the text [option] in the drop-down list with id [id].",
        PAGE, lambda args, _: f"select_option({args[0]!r}, {args[1]!r})",
        ToolSpec(
            "Select an option of a drop-down list of the page.",
            (
                ToolParameter("element_id", str, "The list's id, the number in brackets before it in the page."),
                ToolParameter("option", str, "The text of the option to select."),
            ),
            "The page after selecting.", lambda element_id, option: f"select [{element_id}] [{option}]",
        ),
    ),
    ActionSpec(
        "dblclick", ("element_id",), "`dblclick [id]`: Double-click on the element with id [id].",
        "`dblclick [id]`: Double-click on an element with id.", PAGE, lambda args, _: f"dblclick({args[0]!r})",
    ),
    ActionSpec(
        "focus", ("element_id",), "`focus [id]`: Move the keyboard focus to the element with id [id].",
        "`focus [id]`: Focus an element with id.", PAGE, lambda args, _: f"focus({args[0]!r})",
    ),
    ActionSpec(
        "press_on", ("element_id", "key_comb"),
        "`press_on [id] [key_comb]`: Focus the element with id [id] and press a key combination "
        "(e.g., `press_on [15] [Enter]`).",
        "`press_on [id] [key_comb]`: Focus an element with id and press a key combination on it.", PAGE,
        lambda args, _: f"press({args[0]!r}, {normalize_key_combination(args[1])!r})",
    ),
    ActionSpec(
        "noop", ("wait_ms",),
        "`noop [wait_ms]`: Do nothing and wait wait_ms milliseconds (1000 if left out), e.g. for the page to load.",
        "`noop [wait_ms]`: Do nothing for wait_ms milliseconds; the page may still change by itself.", PAGE,
        lambda args, _: f"noop({int(args[0])})", defaults=("1000",),
    ),
)}  # fmt: skip

#: The paper's grammar (appendix A.1/A.2): what the shipped world model and judge were trained on, and what the
#: world-model prompt describes.
PAPER_ACTIONS: tuple[str, ...] = tuple(ACTION_SPECS)[:12]
#: The actions the default policy prompt describes and TRL offers as tools: the paper's, then ``select``.
OFFERED_ACTIONS: tuple[str, ...] = (*PAPER_ACTIONS, "select")


def _element_id(name: str, value: str) -> str:
    stripped = value.strip()
    if not stripped or not all(char.isascii() and (char.isalnum() or char in "_.-") for char in stripped):
        raise ValueError(f"{name}: element id must be the id shown in the tree, e.g. [12]; got [{value}]")
    return stripped


def _press_enter_after(name: str, value: str) -> str:
    if value.strip() not in ("0", "1"):
        raise ValueError(f"{name}: press_enter_after must be 0 or 1, got [{value}]")
    return value.strip()


def _direction(name: str, value: str) -> str:
    if value.lower() not in ("up", "down"):
        raise ValueError(f"{name} direction must be up or down, got [{value}]")
    return value.lower()


def _tab_index(name: str, value: str) -> str:
    if not value.isdigit():
        raise ValueError(f"{name}: tab index must be a non-negative integer, got [{value}]")
    return value


def _not_empty(name: str, value: str) -> str:
    if not value:
        raise ValueError(f"{name}: argument must not be empty")
    return value


#: Longest ``noop`` wait, in milliseconds (a step must stay well inside RealWeb-v0's step timeout).
MAX_WAIT_MS = 10_000


def _wait_ms(name: str, value: str) -> str:
    if not value.strip().isdigit() or int(value) > MAX_WAIT_MS:
        raise ValueError(
            f"{name}: wait_ms must be a whole number of milliseconds from 0 to {MAX_WAIT_MS}, got [{value}]"
        )
    return str(int(value))


def _option(name: str, value: str) -> str:
    if not value:
        raise ValueError(f"{name}: option must not be empty")
    return value


def _key_comb(name: str, value: str) -> str:
    if error := key_combination_error(_not_empty(name, value)):
        raise ValueError(error.replace("press:", f"{name}:", 1))
    return value


#: How each argument is checked and normalised: ``check(action_name, value) -> value`` (``ValueError``: why not).
ARGUMENT_CHECKS: dict[str, Callable[[str, str], str]] = {
    "element_id": _element_id, "text": lambda name, value: value, "press_enter_after": _press_enter_after,
    "key_comb": _key_comb, "direction": _direction, "tab_index": _tab_index, "url": _not_empty,
    "answer": lambda name, value: value, "option": _option, "wait_ms": _wait_ms,
}  # fmt: skip


def check_arguments(spec: ActionSpec, args: list[str]) -> tuple[str, ...]:
    """``args`` checked and normalised by :data:`ARGUMENT_CHECKS`, in order (``ValueError``: the first problem)."""
    return tuple(
        ARGUMENT_CHECKS[argument](spec.name, value) for argument, value in zip(spec.arguments, args, strict=True)
    )


def tool_method(spec: ActionSpec, perform: Callable[[Any, str], str]) -> Callable[..., str]:
    """A method performing ``spec``'s action, with the tool's signature, type hints and Google-style docstring,
    so that ``transformers.utils.get_json_schema`` (which TRL uses) reads it as it reads a hand-written method.

    Args:
        spec: An action with a tool.
        perform: ``(instance, action string) -> result``: what the method does with the action it writes.

    Returns:
        The function, to be set as a method of the class whose instances ``perform`` takes.

    Raises:
        ValueError: If ``spec`` has no tool.
    """
    if spec.tool is None:
        raise ValueError(f"{spec.name} is not offered as a tool")
    tool = spec.tool
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.annotation)
        for p in tool.parameters
    ]
    signature = inspect.Signature(parameters, return_annotation=str)

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return perform(self, tool.action(**{key: value for key, value in bound.arguments.items() if key != "self"}))

    doc = [tool.summary, ""]
    if tool.parameters:
        doc += ["Args:", *(f"    {p.name}: {p.description}" for p in tool.parameters), ""]
    doc += ["Returns:", f"    {tool.returns}"]
    method.__name__ = spec.name
    method.__qualname__ = f"DreamWebTools.{spec.name}"
    method.__doc__ = "\n".join(doc)
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {p.name: p.annotation for p in tool.parameters} | {"return": str}
    return method


__all__ = [
    "ACTION_SPECS",
    "ARGUMENT_CHECKS",
    "ActionSpec",
    "COMPLETION",
    "MAX_WAIT_MS",
    "NAVIGATION",
    "OFFERED_ACTIONS",
    "PAGE",
    "PAPER_ACTIONS",
    "TABS",
    "ToolParameter",
    "ToolSpec",
    "check_arguments",
    "tool_method",
]
