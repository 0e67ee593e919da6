"""The second action grammar: BrowserGym's ``HighLevelActionSet`` calls, read into DynaWeb's one action form.

``gym.make("DreamWeb-v0", action_set="browsergym")`` and ``gym.make("RealWeb-v0", action_set="browsergym")``
take actions written as BrowserGym (and AgentLab's agents) write them, from its subsets ``chat``, ``bid`` and
``nav``: ``click('12')``, ``fill('12', 'text')``, ``select_option('12', 'Red')``, ``press('12', 'Enter')``,
``scroll(0, 200)``, ``go_back()``, ``goto('url')``, ``send_msg_to_user('answer')``, ... Each call becomes the
same :class:`~dynaweb_env.actions.Action` the paper's grammar gives (``fill('12', 'a')`` is ``type [12] [a] [0]``),
so the world model, the judge and recorded data see one format, and ``last_action`` shows that form.

The text is read with :func:`ast.parse` and :func:`ast.literal_eval`: nothing is ever evaluated or run. Calls
this env cannot perform exactly are refused with a clear error, never approximated:

* ``click``/``dblclick`` other than the left button without modifiers; ``select_option`` of several options;
  ``fill(..., enable_autocomplete_menu=True)``; ``noop`` waiting longer than 10 s;
* ``scroll`` sideways (a vertical ``scroll`` moves 90% of the window in the direction of ``delta_y``, as
  ``scroll [down]``/``scroll [up]`` do);
* ``drag_and_drop``, ``upload_file`` and every call outside the three subsets (``mouse_*``, ``keyboard_*``, tabs).

Functions:
    :func:`parse_browsergym_action`: one call -> :class:`~dynaweb_env.actions.Action` (or ``ActionParseError``).
    :func:`extract_browsergym_action`: the call inside a whole policy response.
    :func:`describe_browsergym_actions`: the policy prompt's action section (BrowserGym's own ``describe()``).
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable
from typing import Any

from .action_spec import ACTION_SPECS, MAX_WAIT_MS, check_arguments
from .actions import Action, ActionParseError, extract_action, format_action, parse_action

#: The grammars an env takes (``action_set=``): the paper's bracketed strings, or BrowserGym's calls.
ACTION_SETS = ("paper", "browsergym")
#: The ``HighLevelActionSet`` subsets the BrowserGym grammar offers.
BROWSERGYM_SUBSETS = ("chat", "bid", "nav")
#: Calls of those subsets with no exact action here: refused (``upload_file`` would read local files).
REFUSED_CALLS = {
    "drag_and_drop": "drag_and_drop is not supported in this environment",
    "upload_file": "upload_file is not supported in this environment",
}


def check_action_set(action_set: str) -> str:
    """``action_set`` if it is one of :data:`ACTION_SETS`; ``ValueError`` otherwise."""
    if action_set not in ACTION_SETS:
        raise ValueError(f"action_set must be one of {ACTION_SETS}, got {action_set!r}")
    return action_set


def _bid(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ActionParseError(f"{name}: bid must be a string, e.g. {name}('12'); got {value!r:.40}")
    return value


def _text(name: str, argument: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ActionParseError(f"{name}: {argument} must be a string, got {type(value).__name__}")
    return value


def _left_button(name: str, bid: Any, button: Any = "left", modifiers: Any = ()) -> tuple[str, ...]:
    if button != "left" or modifiers not in ([], ()):
        raise ActionParseError(f"{name}: only the left button without modifiers is supported, e.g. {name}('12')")
    return (_bid(name, bid),)


def _fill(bid: Any, value: Any, enable_autocomplete_menu: Any = False) -> tuple[str, tuple[str, ...]]:
    if enable_autocomplete_menu is not False:
        raise ActionParseError("fill: enable_autocomplete_menu=True is not supported; use fill(bid, value)")
    return "type", (_bid("fill", bid), _text("fill", "value", value), "0")


def _select_option(bid: Any, options: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(options, list) and len(options) == 1:
        options = options[0]
    if isinstance(options, list):
        raise ActionParseError("select_option: selecting several options is not supported; give one option")
    return "select", (_bid("select_option", bid), _text("select_option", "options", options))


def _scroll(delta_x: Any, delta_y: Any) -> tuple[str, tuple[str, ...]]:
    for argument, value in (("delta_x", delta_x), ("delta_y", delta_y)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ActionParseError(f"scroll: {argument} must be a number of pixels, got {value!r:.40}")
    if delta_x != 0 or delta_y == 0:
        raise ActionParseError("scroll: only vertical scrolling is supported: scroll(0, dy) with dy != 0")
    return "scroll", ("down" if delta_y > 0 else "up",)


def _noop(wait_ms: Any = 1000) -> tuple[str, tuple[str, ...]]:
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, (int, float)) or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise ActionParseError(f"noop: wait_ms must be a number of milliseconds from 0 to {MAX_WAIT_MS}")
    return "noop", (str(round(wait_ms)),)


#: BrowserGym call name -> ``(**arguments) -> (action name, args)``; the arguments are bound to BrowserGym's
#: own signature first, so a call is read exactly as BrowserGym would read it.
CONVERTERS: dict[str, Callable[..., tuple[str, tuple[str, ...]]]] = {
    "noop": _noop,
    "send_msg_to_user": lambda text: ("stop", (_text("send_msg_to_user", "text", text),)),
    "scroll": _scroll,
    "fill": _fill,
    "select_option": _select_option,
    "click": lambda bid, button="left", modifiers=(): ("click", _left_button("click", bid, button, modifiers)),
    "dblclick": lambda bid, button="left", modifiers=(): ("dblclick", _left_button("dblclick", bid, button, modifiers)),
    "hover": lambda bid: ("hover", (_bid("hover", bid),)),
    "press": lambda bid, key_comb: ("press_on", (_bid("press", bid), _text("press", "key_comb", key_comb))),
    "focus": lambda bid: ("focus", (_bid("focus", bid),)),
    "clear": lambda bid: ("type", (_bid("clear", bid), "", "0")),
    "go_back": lambda: ("go_back", ()),
    "go_forward": lambda: ("go_forward", ()),
    "goto": lambda url: ("goto", (_text("goto", "url", url),)),
}


@functools.lru_cache(maxsize=1)
def browsergym_action_set() -> Any:
    """BrowserGym's ``HighLevelActionSet`` of the calls this grammar reads (one at a time).

    Raises:
        ImportError: Without BrowserGym (``pip install 'dynaweb[browser]'``).
    """
    try:
        from browsergym.core.action import functions
        from browsergym.core.action.highlevel import ACTION_SUBSETS, HighLevelActionSet
    except ImportError as error:  # pragma: no cover - the browser extra is installed where this runs
        message = f"action_set='browsergym' needs BrowserGym: pip install 'dynaweb[browser]' ({error})"
        raise ImportError(message) from None
    offered = [f for subset in BROWSERGYM_SUBSETS for f in ACTION_SUBSETS[subset] if f.__name__ in CONVERTERS]
    missing = set(CONVERTERS) - {"noop"} - {f.__name__ for f in offered}
    if missing or functions.noop.__name__ != "noop":
        raise RuntimeError(f"BrowserGym's action subsets {BROWSERGYM_SUBSETS} no longer offer {sorted(missing)}")
    return HighLevelActionSet(subsets=["custom"], custom_actions=offered, multiaction=False, strict=True)


@functools.lru_cache(maxsize=1)
def _signatures() -> dict[str, inspect.Signature]:
    from browsergym.core.action import functions

    return {name: inspect.signature(getattr(functions, name)) for name in CONVERTERS}


def _valid_calls() -> str:
    return ", ".join(f"{name}()" for name in CONVERTERS)


def _literal(node: ast.AST, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ActionParseError(f"{name}: arguments must be literal strings or numbers, e.g. {name}('12')") from None


def parse_browsergym_action(text: str) -> Action:
    """Read one BrowserGym call into an :class:`~dynaweb_env.actions.Action`, without evaluating anything.

    Args:
        text: One call, e.g. ``"fill('12', 'hello')"`` (whitespace and surrounding backticks ignored).

    Returns:
        The action, as :func:`~dynaweb_env.actions.parse_action` would give it for its paper form.

    Raises:
        ActionParseError: If the text is not one call of this grammar, or asks what this env cannot do exactly.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"action must be a string, got {type(text).__name__}")
    stripped = text.strip().strip("`").strip()
    if not stripped:
        raise ActionParseError("empty action")
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        several = "\n" in stripped and all(line.strip().endswith(")") for line in stripped.splitlines() if line.strip())
        reason = "one action at a time" if several else "a single call such as click('12')"
        raise ActionParseError(f"not a BrowserGym action: write {reason}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        shown = stripped[:40]
        raise ActionParseError(f"not a BrowserGym action: write a single call such as click('12'); got {shown!r}")
    name = call.func.id
    if name in REFUSED_CALLS:
        raise ActionParseError(REFUSED_CALLS[name])
    if name not in CONVERTERS:
        raise ActionParseError(f"unknown action {name[:40]!r}; valid actions: {_valid_calls()}")
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(kw.arg is None for kw in call.keywords):
        raise ActionParseError(f"{name}: write the arguments out, without * or **")
    args = [_literal(arg, name) for arg in call.args]
    kwargs = {kw.arg: _literal(kw.value, name) for kw in call.keywords}
    try:
        bound = _signatures()[name].bind(*args, **kwargs)
    except TypeError as error:
        raise ActionParseError(f"{name}: {error}; signature {name}{_signatures()[name]}") from None
    action_name, action_args = CONVERTERS[name](**bound.arguments)
    return _as_action(name, action_name, action_args)


def _as_action(call: str, name: str, args: tuple[str, ...]) -> Action:
    """The action, checked by the paper grammar's rules; refused if its paper form would not read back the same
    (a text with unbalanced square brackets), so that what is recorded is what was done."""
    spec = ACTION_SPECS[name]
    try:
        expected = check_arguments(spec, [arg if spec.keep_spacing else arg.strip() for arg in args])
    except ValueError as error:  # the rule's words name the paper action ("press_on: ..."): name the call instead
        reason = str(error).removeprefix(f"{name}:").removeprefix(f"{name} ").strip()
        raise ActionParseError(f"{call}: {reason}") from None
    try:
        action = parse_action(format_action(Action(name, expected)))
    except ActionParseError:
        action = None
    if action is None or action.args != expected:
        raise ActionParseError(f"{call}: this text cannot be recorded as an action (unbalanced square brackets)")
    return action


def extract_browsergym_action(response: str) -> str:
    """The call inside a whole policy response: the last ``<action>...</action>`` (AgentLab's agents), else the
    ``ACTION:`` section (:func:`~dynaweb_env.actions.extract_action`)."""
    start = response.rfind("<action>")
    if start >= 0:
        end = response.find("</action>", start)
        return response[start + len("<action>") : end if end >= 0 else len(response)].strip()
    return extract_action(response)


#: What the policy prompt adds after BrowserGym's description: how the calls behave here.
BROWSERGYM_NOTES = (
    "In this environment: send_msg_to_user(text) ends the task, with your answer (or 'N/A'); click and dblclick "
    "use the left button without modifiers; select_option takes one option; fill cannot open an autocomplete "
    "menu; scroll is vertical and moves most of a window in the direction of delta_y."
)


def describe_browsergym_actions() -> str:
    """The action section of the policy prompt: BrowserGym's ``describe()`` of this set (its closing example
    replaced by one this env performs), then :data:`BROWSERGYM_NOTES`."""
    description = browsergym_action_set().describe(with_long_description=False, with_examples=True)
    description = description.rsplit(" Example:", 1)[0].strip()
    return f"{description} Example:\nfill('b534', 'Montre')\n{BROWSERGYM_NOTES}"


__all__ = [
    "ACTION_SETS",
    "BROWSERGYM_NOTES",
    "BROWSERGYM_SUBSETS",
    "CONVERTERS",
    "REFUSED_CALLS",
    "browsergym_action_set",
    "check_action_set",
    "describe_browsergym_actions",
    "extract_browsergym_action",
    "parse_browsergym_action",
]
