"""The action grammar: one parser for both envs, errors written for the policy."""

import pytest

from dynaweb_env.actions import (
    ACTION_ARGUMENTS,
    Action,
    ActionParseError,
    describe_actions,
    extract_action,
    extract_reasoning,
    format_action,
    parse_action,
)

GOOD = [
    ("click [13]", Action("click", ("13",))),
    ("  `click [a13]`  ", Action("click", ("a13",))),
    ("type [5] [hello world] [0]", Action("type", ("5", "hello world", "0"))),
    ("type [5] [hi]", Action("type", ("5", "hi", "1"))),
    ("type [5] [ two spaces ] [1]", Action("type", ("5", " two spaces ", "1"))),
    ("hover [7]", Action("hover", ("7",))),
    ("press [Control+a]", Action("press", ("Control+a",))),
    ("scroll [Down]", Action("scroll", ("down",))),
    ("new_tab", Action("new_tab")),
    ("tab_focus [2]", Action("tab_focus", ("2",))),
    ("close_tab", Action("close_tab")),
    ("goto [http://localhost:7770/a?b=c]", Action("goto", ("http://localhost:7770/a?b=c",))),
    ("go_back", Action("go_back")),
    ("go_forward", Action("go_forward")),
    ("stop [5h 47min]", Action("stop", ("5h 47min",))),
    ("stop [N/A]", Action("stop", ("N/A",))),
    ("stop", Action("stop", ("",))),
    ("stop [the list [a, b]]", Action("stop", ("the list [a, b]",))),
    ("type [5] [café ☕] [0]", Action("type", ("5", "café ☕", "0"))),
]

BAD = [
    ("", "empty action"),
    ("   ", "empty action"),
    ("clack [1]", "unknown action"),
    ("click", "click takes 1"),
    ("click [1] [2]", "click takes 1"),
    ("click 13", "square brackets"),
    ("click [a b]", "element id"),
    ("type [5] [x] [2]", "press_enter_after must be 0 or 1"),
    ("type [5]", "type takes 3"),
    ("scroll [left]", "up or down"),
    ("tab_focus [first]", "non-negative integer"),
    ("goto []", "must not be empty"),
    ("CLICK [1]", "unknown action"),
]


@pytest.mark.parametrize(("text", "expected"), GOOD)
def test_parse_good_actions(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize(("text", "message"), BAD)
def test_parse_bad_actions_raise_readable_errors(text, message):
    with pytest.raises(ActionParseError, match=message):
        parse_action(text)


def test_non_string_is_a_parse_error():
    with pytest.raises(ActionParseError):
        parse_action(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "_"), GOOD)
def test_format_inverts_parse(text, _):
    action = parse_action(text)
    assert parse_action(format_action(action)) == action


def test_element_id_and_named_args():
    action = parse_action("type [12] [abc] [0]")
    assert action.element_id == "12"
    assert action.arg("text") == "abc"
    assert parse_action("go_back").element_id is None
    assert parse_action("stop [x]").is_stop


def test_descriptions_cover_the_whole_grammar():
    text = describe_actions(tuple(ACTION_ARGUMENTS))
    for name in ACTION_ARGUMENTS:
        assert f"- `{name}" in text
    default = describe_actions()  # what the policy is offered: the paper's twelve, then select
    assert "- `select [id] [option]`" in default and "dblclick" not in default


RESPONSES = [
    ("REASON: The ONE button is [13].\nACTION: click [13]", "click [13]"),
    ("REASON: x\nACTION:\n`type [4] [hello] [0]`\n", "type [4] [hello] [0]"),
    ("**REASON:** x\n**ACTION:** `click [7]`\n**OBSERVATION HIGHLIGHT:** 7, 8", "click [7]"),
    (
        "INTERACTION HISTORY SUMMARY:\nnone\n\nOBSERVATION DESCRIPTION:\na page\n\nREASON:\nclick it\n\n"
        "ACTION:\nclick [21]\n\nOBSERVATION HIGHLIGHT:\n21, 3",
        "click [21]",
    ),
    ("REASON: done\nACTION: I will do stop [42]", "stop [42]"),
    ("I think I should click [5] now", "click [5]"),
    ("click [5]", "click [5]"),
    ("no idea", "no idea"),
]


@pytest.mark.parametrize(("response", "action"), RESPONSES)
def test_extract_action_from_policy_response(response, action):
    assert extract_action(response) == action


def test_extract_reasoning():
    assert extract_reasoning("REASON: because.\nACTION: click [1]") == "because."
    assert extract_reasoning("click [1]") == ""
