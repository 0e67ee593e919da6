"""Scripted experts for more MiniWoB++ tasks, most of them several steps long.

Forms with popups (``login-user-popup``), autocompletion (``use-autocomplete``), hover menus
(``click-menu``), file trees (``navigate-tree``), accordions, social-media and inbox rows, and a
few one-step tasks that round out the set. Like :mod:`dynaweb_env.experts.miniwob`, every expert
reads only the observation (goal, tree, last action and its error) and is stateless: progress is
read off the page (a textbox's ``value``, an ``expanded`` section, an open submenu), or, where the
page does not show it, off ``last_action``.

Tasks whose targets are clickable ``<span>``/``<div>`` elements or ``<select>`` lists (``click-link``,
``click-tab-2``, ``click-collapsible-2``, ``multi-orderings``, ``multi-layouts``, ``choose-list``,
``social-media-some``/``-all``) have their experts in :mod:`dynaweb_env.experts.miniwob_clickable`, the
email inbox's reply and forward tasks in :mod:`dynaweb_env.experts.miniwob_email`. ``search-engine`` is
left out: its result links are ``href="#"``, and BrowserGym ends any episode whose URL changed (even by
a fragment) with reward 0, though the page itself scores the click 1.
"""

from __future__ import annotations

import re

from .base import (
    AxNode,
    ExpertError,
    ExpertPolicy,
    find_all_by_role,
    find_by_role_and_name,
    goal_match,
    last_action_targets,
    quoted_strings,
    register_expert,
)
from .miniwob import ClickCheckboxesExpert

_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")


def _ordinal(text: str) -> int:
    """``"3rd"`` -> 3."""
    match = _ORDINAL.fullmatch(text.strip())
    if match is None:
        raise ExpertError(f"{text!r} is not an ordinal such as '3rd'")
    return int(match.group(1))


def _text(nodes: list[AxNode], index: int) -> str:
    """A node's name, or else the text of its first ``StaticText`` descendant (list items carry none)."""
    node = nodes[index]
    if node.name:
        return node.name
    for child in nodes[index + 1 :]:
        if child.depth <= node.depth:
            break
        if child.role == "StaticText" and child.name.strip():
            return child.name
    return ""


def _children(nodes: list[AxNode], index: int) -> list[int]:
    """Indices of the nodes below ``nodes[index]`` (its subtree, in page order)."""
    depth, below = nodes[index].depth, []
    for position in range(index + 1, len(nodes)):
        if nodes[position].depth <= depth:
            break
        below.append(position)
    return below


# ---------------------------------------------------------------------------- one- and two-step tasks


def _focused(node: AxNode) -> bool:
    return node.attributes.get("focused", "").lower() == "true"


def _press(observation: dict[str, str], button: AxNode) -> tuple[str, str]:
    """Click ``button``, or, once a click on it failed, focus it with Tab and press Enter.

    Buttons placed at random can overlap: a click on the centre of a covered one times out, and
    only the keyboard reaches it.
    """
    last = observation.get("last_action", "")
    blocked = last == f"click [{button.bid}]" and observation.get("last_action_error", "")
    if blocked or last == "press [Tab]":
        if _focused(button):
            return f"'{button.name}' [{button.bid}] has the focus; Enter presses it.", "press [Enter]"
        return (
            f"A click cannot reach '{button.name}' [{button.bid}] (another element covers it); Tab moves the "
            "focus towards it.",
            "press [Tab]",
        )
    return f"The button labelled '{button.name}' is [{button.bid}]; I click it.", f"click [{button.bid}]"


@register_expert
class ClickTest2Expert(ExpertPolicy):
    """``Click button ONE.`` (two buttons at random places, which may overlap)"""

    task_id = "miniwob.click-test-2"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        name = goal_match(r"Click button (\S+?)\.?$", observation["goal"]).group(1)
        button = self.require(find_by_role_and_name(self.nodes(observation), "button", name), name, observation)
        return _press(observation, button)


@register_expert
class ClickButtonSequenceExpert(ExpertPolicy):
    """``Click button ONE, then click button TWO.`` (buttons at random places, which may overlap)"""

    task_id = "miniwob.click-button-sequence"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        first, second = goal_match(r"Click button (\S+), then click button (\S+?)\.?$", observation["goal"]).groups()
        nodes = self.nodes(observation)
        first_button = self.require(find_by_role_and_name(nodes, "button", first), f"button {first!r}", observation)
        second_button = self.require(find_by_role_and_name(nodes, "button", second), f"button {second!r}", observation)
        # The page does not show which buttons were pressed: the previous action tells, and a
        # pressed button keeps the focus (a click reported as failed may still have landed).
        last = observation.get("last_action", "")
        clicked = last == f"click [{first_button.bid}]" and (
            not observation.get("last_action_error") or _focused(first_button)
        )
        if clicked or (last == "press [Enter]" and _focused(first_button)):
            return f"'{first}' was pressed last; now '{second}' [{second_button.bid}].", f"click [{second_button.bid}]"
        return _press(observation, first_button)


@register_expert
class ClickDialog2Expert(ExpertPolicy):
    """``Click the button in the dialog box labeled "Cancel".`` (``"x"`` is the dialog's Close button)"""

    task_id = "miniwob.click-dialog-2"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        label = goal_match(r'labeled "([^"]+)"', observation["goal"]).group(1)
        name = "Close" if label == "x" else label
        button = self.require(find_by_role_and_name(self.nodes(observation), "button", name), name, observation)
        where = "the dialog's 'x' is its Close button" if label == "x" else f"the dialog's '{label}' button"
        return f"The task wants {where}, [{button.bid}].", f"click [{button.bid}]"


@register_expert
class FocusText2Expert(ExpertPolicy):
    """``Focus into the 2nd input textbox.``"""

    task_id = "miniwob.focus-text-2"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        position = _ordinal(goal_match(r"Focus into the (\w+) input textbox", observation["goal"]).group(1))
        boxes = find_all_by_role(self.nodes(observation), "textbox")
        if not 1 <= position <= len(boxes):
            raise ExpertError(f"asked for textbox {position}, the page has {len(boxes)}")
        box = boxes[position - 1]
        return f"Textbox number {position} is [{box.bid}]; clicking it gives it the focus.", f"click [{box.bid}]"


@register_expert
class EnterText2Expert(ExpertPolicy):
    """``Type "KANESHA" in all lower case letters in the text input and press Submit.``"""

    task_id = "miniwob.enter-text-2"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        text, case = goal_match(r'Type "([^"]*)" in all (lower|upper) case', observation["goal"]).groups()
        return self.fill_single_field(observation, text.lower() if case == "lower" else text.upper())


@register_expert
class EnterTextDynamicExpert(ExpertPolicy):
    """``Enter "wP" into the text field and press Submit.`` (random strings)"""

    task_id = "miniwob.enter-text-dynamic"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        text = goal_match(r'Enter "([^"]*)" into the text field', observation["goal"]).group(1)
        return self.fill_single_field(observation, text)


@register_expert
class ClickCollapsibleExpert(ExpertPolicy):
    """``Expand the section below and click submit.`` (an accordion hides the Submit button's section)"""

    task_id = "miniwob.click-collapsible"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        nodes = self.nodes(observation)
        sections = [node for node in find_all_by_role(nodes, "tab") if node.name.startswith("Section")]
        section = self.require(sections[0] if sections else None, "a collapsible section", observation)
        if not section.expanded:
            return f"The section '{section.name}' [{section.bid}] is collapsed; I expand it.", f"click [{section.bid}]"
        submit = self.button(nodes, "Submit", observation)
        return f"'{section.name}' is expanded; I click Submit [{submit.bid}].", f"click [{submit.bid}]"


@register_expert
class ClickCheckboxesTransferExpert(ClickCheckboxesExpert):
    """``Select IqnX, cwPs6W and click Submit.`` (the test split of click-checkboxes: more boxes to tick).

    The page and the goal read as click-checkboxes' do, so the logic is that expert's.
    """

    task_id = "miniwob.click-checkboxes-transfer"


# ---------------------------------------------------------------------------- forms, searches, menus


@register_expert
class LoginUserPopupExpert(ExpertPolicy):
    """``Enter the username "juan" and the password "Jc" into the text fields and press login.``

    Focusing a field may open a "session expiring" popup that disables the form: its Cancel button
    closes it (its OK button fails the task). The password's value is not in the tree, so it counts
    as typed only when the previous action typed it and no popup interrupted.
    """

    task_id = "miniwob.login-user-popup"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        username, password = quoted_strings(observation["goal"])[:2]
        nodes = self.nodes(observation)
        cancel = find_by_role_and_name(nodes, "button", "Cancel")
        if cancel is not None:
            return (
                f"A popup disabled the form; its Cancel button [{cancel.bid}] closes it without leaving.",
                f"click [{cancel.bid}]",
            )
        boxes = find_all_by_role(nodes, "textbox")
        if len(boxes) < 2:
            raise ExpertError(f"expected username and password fields, found {len(boxes)} text fields")
        user_box, password_box = boxes[:2]
        buttons = find_all_by_role(nodes, "button")
        login = self.require(buttons[0] if buttons else None, "the login button", observation)
        if (user_box.value or "") != username:
            reasoning = f"The username field [{user_box.bid}] must hold {username!r}."
            return reasoning, f"type [{user_box.bid}] [{username}] [0]"
        if last_action_targets(observation, "type") != password_box.bid:
            return f"Next the password into [{password_box.bid}].", f"type [{password_box.bid}] [{password}] [0]"
        return f"Both fields are filled; I press '{login.name}' [{login.bid}].", f"click [{login.bid}]"


@register_expert
class UseAutocompleteExpert(ExpertPolicy):
    """``Enter an item that starts with "Ti" and ends with "este".`` (the "ends with" part is optional)"""

    task_id = "miniwob.use-autocomplete"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        goal = observation["goal"]
        start = goal_match(r'starts with "([^"]*)"', goal).group(1)
        end_match = re.search(r'ends with "([^"]*)"', goal)
        end = end_match.group(1) if end_match else ""
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        box = self.require(boxes[0] if boxes else None, "the input field", observation)
        submit = self.button(nodes, "Submit", observation)
        suggestions = [i for i, node in enumerate(nodes) if node.role == "listitem" and node.bid is not None]
        for index in suggestions:
            text = _text(nodes, index)
            if text.startswith(start) and text.endswith(end):
                item = nodes[index]
                return f"The suggestion '{text}' [{item.bid}] starts and ends as asked.", f"click [{item.bid}]"
        if box.value and box.value.startswith(start) and box.value.endswith(end):
            return f"The field holds '{box.value}', which fits; I click Submit.", f"click [{submit.bid}]"
        return (
            f"Typing {start!r} into [{box.bid}] makes the field suggest the items that start with it.",
            f"type [{box.bid}] [{start}] [0]",
        )


@register_expert
class ClickMenuExpert(ExpertPolicy):
    """``Select Amandi>Olga>Ashlee`` (hovering an item opens its submenu)."""

    task_id = "miniwob.click-menu"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        path = [part.strip() for part in goal_match(r"^Select (.+?)\.?$", observation["goal"]).group(1).split(">")]
        nodes = self.nodes(observation)
        # Item names are unique, and a submenu is in the tree only while open: the deepest item of
        # the path that is shown is where the walk has got to.
        shown = [find_by_role_and_name(nodes, "menuitem", name) for name in path]
        if shown[0] is None:
            raise ExpertError(f"menu item {path[0]!r} is not on the page")
        depth = max(index for index, item in enumerate(shown) if item is not None)
        item = shown[depth]
        if depth == len(path) - 1:
            return f"'{item.name}' [{item.bid}] ends the path {'>'.join(path)}; I click it.", f"click [{item.bid}]"
        return (
            f"Hovering '{item.name}' [{item.bid}] opens its submenu, where '{path[depth + 1]}' is.",
            f"hover [{item.bid}]",
        )


@register_expert
class NavigateTreeExpert(ExpertPolicy):
    """``Navigate through the file tree. Find and click on the folder or file named "Augus".``

    A click on a folder toggles it, a click on a wrong file fails the task. An open folder shows a
    ``list`` below it. A closed folder shows its toggle and name as clickable ``generic`` elements
    in the observation that keeps them (RealWeb-v0's default); in the one that drops them (``clickable=False``,
    the shipped data) a closed folder and a file look alike, except that a folder's hidden content
    takes element ids: the id after a file's is its neighbour's plus two, a closed folder's leaves a
    wider gap (its toggle, name and hidden list have ids too).
    """

    task_id = "miniwob.navigate-tree"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        name = goal_match(r'named "([^"]+)"', observation["goal"]).group(1)
        nodes = self.nodes(observation)
        items = [i for i, node in enumerate(nodes) if node.role == "listitem" and node.bid is not None]
        if not items:
            raise ExpertError("no file tree on the page")
        for index in items:
            if _text(nodes, index) == name and not self._is_open(nodes, index):
                return f"'{name}' is the item [{nodes[index].bid}]; I click it.", f"click [{nodes[index].bid}]"
        closed = [index for index in items if not self._is_open(nodes, index) and self._is_folder(nodes, index)]
        if not closed:
            raise ExpertError(f"{name!r} is not shown and no closed folder is left")
        folder = nodes[closed[0]]
        return (
            f"'{name}' is not shown; the closed folder '{_text(nodes, closed[0])}' [{folder.bid}] may hold it.",
            f"click [{folder.bid}]",
        )

    @staticmethod
    def _is_open(nodes: list[AxNode], index: int) -> bool:
        depth = nodes[index].depth + 1
        return any(nodes[i].role == "list" and nodes[i].depth == depth for i in _children(nodes, index))

    @staticmethod
    def _is_folder(nodes: list[AxNode], index: int) -> bool:
        if any(nodes[i].role == "generic" and nodes[i].bid is not None for i in _children(nodes, index)):
            return True  # its toggle, kept by the observation that keeps clickable generics
        later = [int(node.bid) for node in nodes[index + 1 :] if node.bid is not None and node.bid.isdigit()]
        if not later:  # the last item of the page: a folder iff nothing else can hold the target
            return True
        return later[0] - int(nodes[index].bid) > 2


# ---------------------------------------------------------------------------- rows of icons


def _row_icons(nodes: list[AxNode], label: str, label_matches: str = "exact") -> tuple[int, list[AxNode]]:
    """The first row whose text is ``label``: its index and the bid-carrying images after it, up to the next row.

    Rows of feeds and inboxes are text lines followed by unnamed icons; the next row starts at the
    first text after an icon.
    """
    for start, node in enumerate(nodes):
        if node.role == "StaticText" and node.name == label:
            icons: list[AxNode] = []
            for later in nodes[start + 1 :]:
                if later.role == "image" and later.bid is not None:
                    icons.append(later)
                elif icons and later.role == "StaticText" and later.name.strip():
                    break
            return start, icons
    raise ExpertError(f"no row with the text {label!r}")


@register_expert
class SocialMediaExpert(ExpertPolicy):
    """``For the user @alan, click on the "Copy link to Tweet" button.``

    Each post ends in four icons: Reply, Retweet, Like and More; More opens a menu (Share via DM,
    Copy link to Tweet, Embed Tweet, Mute, Block, Report).
    """

    task_id = "miniwob.social-media"
    ICONS = ("Reply", "Retweet", "Like")

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        user, label = goal_match(r'For the user (\S+), click on the "([^"]+)" button', observation["goal"]).groups()
        nodes = self.nodes(observation)
        start, icons = _row_icons(nodes, user)
        if len(icons) < 4:
            raise ExpertError(f"the post by {user} shows {len(icons)} icons, expected 4")
        if label in self.ICONS:
            icon = icons[self.ICONS.index(label)]
            why = f"the icons under {user}'s post are Reply, Retweet, Like, More; '{label}' is"
            return self._click(observation, icon, why)
        more, menu = icons[3], []
        for node in nodes[nodes.index(more) + 1 :]:  # the open menu is a list right after the icon
            if node.depth <= more.depth and node.role != "list":
                break
            if node.role == "listitem" and node.bid is not None:
                menu.append(node)
        for item in menu:
            text = _text(nodes, nodes.index(item))
            if text == label or text.startswith(label + " "):
                return f"{user}'s menu is open; '{text}' is [{item.bid}].", f"click [{item.bid}]"
        why = f"'{label}' is in the More menu of {user}'s post, opened by its last icon"
        return self._click(observation, more, why)

    @staticmethod
    def _click(observation: dict[str, str], icon: AxNode, why: str) -> tuple[str, str]:
        if last_action_targets(observation, "click") == icon.bid:
            # The feed scrolls to bring a post into view, and a click during the scroll can miss.
            return f"My click on [{icon.bid}] changed nothing; {why} [{icon.bid}], so I click it again.", (
                f"click [{icon.bid}]"
            )
        return f"{why[0].upper()}{why[1:]} [{icon.bid}].", f"click [{icon.bid}]"


class _EmailRowExpert(ExpertPolicy):
    """``Find the email by Anne and click the <icon> icon ...``: each inbox row ends in a trash and a star icon."""

    ICON = ""  # "trash" or "star"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        sender = goal_match(rf"Find the email by (.+?) and click the {self.ICON} icon", observation["goal"]).group(1)
        _, icons = _row_icons(self.nodes(observation), sender)
        if len(icons) < 2:
            raise ExpertError(f"the email by {sender} shows {len(icons)} icons, expected trash and star")
        icon = icons[0 if self.ICON == "trash" else 1]
        return (
            f"The row of the email by {sender} ends in a trash and a star icon; the {self.ICON} is [{icon.bid}].",
            f"click [{icon.bid}]",
        )


@register_expert
class EmailInboxDeleteExpert(_EmailRowExpert):
    """``Find the email by Misty and click the trash icon to delete it.``"""

    task_id = "miniwob.email-inbox-delete"
    ICON = "trash"


@register_expert
class EmailInboxImportantExpert(_EmailRowExpert):
    """``Find the email by Anne and click the star icon to mark it as important.``"""

    task_id = "miniwob.email-inbox-important"
    ICON = "star"


__all__ = [
    "ClickButtonSequenceExpert",
    "ClickCheckboxesTransferExpert",
    "ClickCollapsibleExpert",
    "ClickDialog2Expert",
    "ClickMenuExpert",
    "ClickTest2Expert",
    "EmailInboxDeleteExpert",
    "EmailInboxImportantExpert",
    "EnterText2Expert",
    "EnterTextDynamicExpert",
    "FocusText2Expert",
    "LoginUserPopupExpert",
    "NavigateTreeExpert",
    "SocialMediaExpert",
    "UseAutocompleteExpert",
]
