"""Scripted experts for MiniWoB++ tasks, one small class per task.

To add a task: subclass :class:`~dynaweb_env.experts.base.ExpertPolicy`, set ``task_id``, read
the goal and tree with the helpers of :mod:`dynaweb_env.experts.base`, return ``(reasoning,
action)``, and decorate the class with ``@register_expert``. ``tests/test_experts.py`` then runs it
on real pages for a few seeds.
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


@register_expert
class ClickButtonExpert(ExpertPolicy):
    """``Click on the "submit" button.``"""

    task_id = "miniwob.click-button"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        name = goal_match(r'button\s+"([^"]*)"|"([^"]*)"\s+button', observation["goal"])
        name = name.group(1) if name.group(1) is not None else name.group(2)
        button = self.require(
            find_by_role_and_name(self.nodes(observation), "button", name), f"button {name!r}", observation
        )
        return f"The task asks to click the button labelled '{name}', which is [{button.bid}].", f"click [{button.bid}]"


@register_expert
class ClickDialogExpert(ExpertPolicy):
    """``Close the dialog box by clicking the "x".``"""

    task_id = "miniwob.click-dialog"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        close = self.require(
            find_by_role_and_name(self.nodes(observation), "button", "close", case_sensitive=False),
            "the dialog's close button",
            observation,
        )
        return (
            f"The dialog's 'x' is the Close button [{close.bid}]; clicking it closes the dialog.",
            f"click [{close.bid}]",
        )


@register_expert
class ClickTabExpert(ExpertPolicy):
    """``Click on Tab #2.``"""

    task_id = "miniwob.click-tab"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        name = goal_match(r"Click on (Tab #\d+)", observation["goal"]).group(1)
        nodes = self.nodes(observation)
        target = find_by_role_and_name(nodes, "link", name) or find_by_role_and_name(nodes, "tab", name)
        target = self.require(target, f"tab {name!r}", observation)
        return f"'{name}' is the tab link [{target.bid}]; I click it.", f"click [{target.bid}]"


@register_expert
class FocusTextExpert(ExpertPolicy):
    """``Focus into the textbox.``"""

    task_id = "miniwob.focus-text"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        boxes = find_all_by_role(self.nodes(observation), "textbox")
        box = self.require(boxes[0] if boxes else None, "a textbox", observation)
        return f"Clicking the only textbox [{box.bid}] gives it the focus.", f"click [{box.bid}]"


@register_expert
class EnterTextExpert(ExpertPolicy):
    """``Enter "Kanesha" into the text field and press Submit.``"""

    task_id = "miniwob.enter-text"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        return self.fill_single_field(observation, goal_match(r'Enter "([^"]*)"', observation["goal"]).group(1))


@register_expert
class EnterPasswordExpert(ExpertPolicy):
    """``Enter the password "rJcwP" into both text fields and press submit.``"""

    task_id = "miniwob.enter-password"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        password = goal_match(r'password "([^"]*)"', observation["goal"]).group(1)
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        if len(boxes) < 2:
            raise ExpertError(f"expected two password fields, found {len(boxes)}")
        submit = self.button(nodes, "Submit", observation)
        return _fill_password_fields(observation, [(boxes[0], password), (boxes[1], password)], submit)


@register_expert
class LoginUserExpert(ExpertPolicy):
    """``Enter the username "juan" and the password "Jc" into the text fields and press login.``"""

    task_id = "miniwob.login-user"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        username, password = quoted_strings(observation["goal"])[:2]
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "textbox")
        if len(boxes) < 2:
            raise ExpertError(f"expected username and password fields, found {len(boxes)} text fields")
        login = self.button(nodes, "Login", observation)
        return _fill_password_fields(observation, [(boxes[0], username), (boxes[1], password)], login)


def _fill_password_fields(
    observation: dict[str, str], fields: list[tuple[AxNode, str]], submit: AxNode
) -> tuple[str, str]:
    # A password field's value is not in the tree: it counts as filled once an earlier field is, or
    # once the previous action typed into it (fields are filled in order).
    typed_last = last_action_targets(observation, "type")
    order = [field.bid for field, _ in fields]
    done_up_to = order.index(typed_last) if typed_last in order else -1
    for index, (field, text) in enumerate(fields):
        value = field.value or ""
        masked = bool(text) and value == "\u2022" * len(text)  # Chromium shows a password as bullets
        wrong = bool(value.strip("\u2022")) and value != text  # visible text that is not the goal's: retype it
        filled = not wrong and (value == text or masked or index <= done_up_to)
        if not filled:
            return f"The field [{field.bid}] must contain {text!r}; I type it.", f"type [{field.bid}] [{text}] [0]"
    return f"Both fields are filled; I click '{submit.name}'.", f"click [{submit.bid}]"


@register_expert
class ClickOptionExpert(ExpertPolicy):
    """``Select Ycj0QW and click Submit.`` (radio buttons)"""

    task_id = "miniwob.click-option"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        name = goal_match(r"^Select (.+) and click Submit\.?$", observation["goal"]).group(1)
        nodes = self.nodes(observation)
        radio = self.require(find_by_role_and_name(nodes, "radio", name), f"option {name!r}", observation)
        if not radio.checked:
            return f"The option '{name}' is the radio button [{radio.bid}]; I select it.", f"click [{radio.bid}]"
        submit = self.button(nodes, "Submit", observation)
        return f"'{name}' is selected; I click Submit.", f"click [{submit.bid}]"


@register_expert
class ClickCheckboxesExpert(ExpertPolicy):
    """``Select Jc, s6WcI, XMHY and click Submit.`` / ``Select nothing and click Submit.``"""

    task_id = "miniwob.click-checkboxes"

    def act(self, observation: dict[str, str]) -> tuple[str, str]:
        listed = goal_match(r"^Select (.*?) and click Submit\.?$", observation["goal"]).group(1)
        wanted = set() if listed == "nothing" else {name.strip() for name in re.split(r",\s*(?:and\s+)?", listed)}
        nodes = self.nodes(observation)
        boxes = find_all_by_role(nodes, "checkbox")
        missing = wanted - {box.name for box in boxes}
        if missing:  # checked before any click: on a page that is not the task's, touch nothing
            raise ExpertError(f"checkboxes {sorted(missing)} are not on the page")
        for box in boxes:
            if (box.name in wanted) != box.checked:
                verb = "tick" if box.name in wanted else "untick"
                return f"The checkbox '{box.name}' [{box.bid}] is not as asked; I {verb} it.", f"click [{box.bid}]"
        submit = self.button(nodes, "Submit", observation)
        return "Exactly the requested boxes are ticked; I click Submit.", f"click [{submit.bid}]"


__all__ = [
    "ClickButtonExpert",
    "ClickCheckboxesExpert",
    "ClickDialogExpert",
    "ClickOptionExpert",
    "ClickTabExpert",
    "EnterPasswordExpert",
    "EnterTextExpert",
    "FocusTextExpert",
    "LoginUserExpert",
]
