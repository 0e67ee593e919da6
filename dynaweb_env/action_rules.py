"""What both envs refuse or end beyond the grammar: unknown keys, tabs that do not exist, pages a task forbids.

RealWeb-v0 and DreamWeb-v0 apply these rules with these words, so a policy cannot tell a dream from
the real web by what an impossible action does:

* :func:`key_combination_error`: a ``press`` whose keys Playwright does not know (``press [Foo+Bar]``);
  :func:`~dynaweb_env.actions.parse_action` refuses it, so both envs report it as an invalid action.
* :func:`tab_refusal`: ``tab_focus`` to a tab that is not open, ``close_tab`` on the last tab, ``new_tab``
  beyond the most tabs an env allows.
* :func:`left_page_error`: the actions that end the episode of a task living on one page in one tab
  (MiniWoB++): BrowserGym's MiniWoB++ task ends it, with reward 0, as soon as the active tab is another
  one (``new_tab``) or shows another address (``goto``, ``go_back`` to the blank page the tab opened on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .actions import Action

#: Key names a policy may write in any case, mapped to Playwright's spelling.
KEY_ALIASES = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "escape": "Escape", "esc": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": "Space", "home": "Home",
    "end": "End", "pageup": "PageUp", "pagedown": "PageDown", "insert": "Insert",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "ctrl": "Control", "control": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta", "cmd": "Meta",
    "controlormeta": "ControlOrMeta",
}  # fmt: skip

#: The key names longer than one character that Playwright's ``keyboard.press`` knows: the codes of its US
#: keyboard layout (``usKeyboardLayout.js``), the modifier aliases, and ``ControlOrMeta``. Any printable
#: ASCII character is a key too; anything else is ``Unknown key`` in Playwright.
PLAYWRIGHT_KEY_NAMES = frozenset(
    "AltGraph AltLeft AltRight ArrowDown ArrowLeft ArrowRight ArrowUp Backquote Backslash Backspace BracketLeft "
    "BracketRight CapsLock Comma ContextMenu ControlLeft ControlRight Delete End Enter Equal Escape Home Insert "
    "MetaLeft MetaRight Minus NumLock NumpadAdd NumpadDecimal NumpadDivide NumpadEnter NumpadMultiply "
    "NumpadSubtract PageDown PageUp Pause Period PrintScreen Quote ScrollLock Semicolon ShiftLeft ShiftRight "
    "Slash Space Tab Shift Control Alt Meta ControlOrMeta".split()
    + [f"F{n}" for n in range(1, 13)]
    + [f"Digit{n}" for n in range(10)]
    + [f"Numpad{n}" for n in range(10)]
    + [f"Key{chr(code)}" for code in range(ord("A"), ord("Z") + 1)]
)


def split_key_combination(keys: str) -> list[str]:
    """The keys of a combination as Playwright splits it: on ``+``, where a ``+`` that starts a key is the key.

    ``"Control+a"`` -> ``["Control", "a"]``, ``"Control++"`` -> ``["Control", "+"]``, ``"+"`` -> ``["+"]``.
    """
    keys_found: list[str] = []
    building = ""
    for char in keys:
        if char == "+" and building:
            keys_found.append(building)
            building = ""
        else:
            building += char
    keys_found.append(building)
    return keys_found


def _playwright_name(key: str) -> str:
    key = key.strip() if key.strip() else key
    return KEY_ALIASES.get(key.lower(), key) if len(key) > 1 else key


def normalize_key_combination(keys: str) -> str:
    """Playwright's spelling of a key combination: ``"ctrl+a"`` -> ``"Control+a"``, ``"enter"`` -> ``"Enter"``."""
    return "+".join(_playwright_name(key) for key in split_key_combination(keys))


def key_combination_error(keys: str) -> str:
    """Why Playwright would refuse to press ``keys`` (an unknown key), or "" if every key is known."""
    for key in split_key_combination(keys):
        name = _playwright_name(key)
        if name in PLAYWRIGHT_KEY_NAMES or (len(name) == 1 and (" " <= name <= "~" or name in "\n\r")):
            continue
        return (
            f"press: unknown key {key.strip() or key!r} in [{keys}]; keys are Playwright's names joined by '+', "
            "e.g. [Enter], [Tab], [ArrowDown], [Control+a], or one printable character"
        )
    return ""


#: Most tabs open at once, by default, in both envs (``RealWeb-v0``'s ``max_tabs``).
DEFAULT_MAX_TABS = 8


def tab_refusal(action: Action, open_tabs: int, max_tabs: int = DEFAULT_MAX_TABS) -> str:
    """Why a tab action may not run with ``open_tabs`` tabs open (no such tab, the last tab, too many), or ""."""
    if action.name == "new_tab" and open_tabs >= max_tabs:
        return f"new_tab refused: {open_tabs} tabs are open, the most this environment allows; close_tab first"
    if action.name == "close_tab" and open_tabs <= 1:
        return "close_tab refused: the last open tab cannot be closed"
    if action.name == "tab_focus" and int(action.args[0]) >= open_tabs:
        indexes = "0" if open_tabs == 1 else f"0 to {open_tabs - 1}"
        return f"tab_focus: there is no tab {action.args[0]}; the open tabs are {indexes}"
    return ""


#: Benchmarks whose tasks live on one page in one tab (BrowserGym's MiniWoB++ tasks check both at every step).
SINGLE_PAGE_BENCHMARKS = ("miniwob",)
#: The accessibility tree of a blank tab, as RealWeb-v0 shows it (after ``new_tab``, or ``go_back`` from a first page).
BLANK_PAGE_AXTREE = "RootWebArea '', focused, url='about:blank'"
#: BrowserGym MiniWoB++'s words when the active tab is not the task's (``task_info["error"]``).
INVALID_PAGE_ERROR = "invalid page, terminating task"
#: ... and when the task's tab shows another address.
INVALID_URL_ERROR = "invalid url, terminating task"


def single_page_task(task_id: str) -> bool:
    """Whether the task lives on one page in one tab, so that leaving it ends the episode."""
    return isinstance(task_id, str) and task_id.split(".", 1)[0] in SINGLE_PAGE_BENCHMARKS


def left_page_error(action: Action, task_id: str, current_url: str, target_url: str = "") -> str:
    """The task's reason for ending the episode when ``action`` leaves its page, or "" if it does not.

    Args:
        action: The action about to run (already allowed by the navigation policy).
        task_id: The task's id.
        current_url: The page the task is on.
        target_url: For ``goto``, the absolute address it goes to.
    """
    if not single_page_task(task_id):
        return ""
    if action.name == "new_tab":
        return INVALID_PAGE_ERROR
    if action.name == "go_back":  # the task's page is the first of its tab after the blank one it opened in
        return INVALID_URL_ERROR
    if action.name == "goto" and target_url.split("#", 1)[0] != current_url.split("#", 1)[0]:
        return INVALID_URL_ERROR
    return ""


__all__ = [
    "BLANK_PAGE_AXTREE",
    "DEFAULT_MAX_TABS",
    "INVALID_PAGE_ERROR",
    "INVALID_URL_ERROR",
    "KEY_ALIASES",
    "PLAYWRIGHT_KEY_NAMES",
    "SINGLE_PAGE_BENCHMARKS",
    "key_combination_error",
    "left_page_error",
    "normalize_key_combination",
    "single_page_task",
    "split_key_combination",
    "tab_refusal",
]
