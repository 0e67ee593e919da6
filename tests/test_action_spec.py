"""The action table generates the parser, both prompts, the BrowserGym translation and the TRL tools.

The golden file holds the twelve-action strings as they were before the table existed (the prompts the shipped
world model and judge were trained on): the table must still produce them byte for byte.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from dynaweb_env.action_spec import ACTION_SPECS, OFFERED_ACTIONS, PAPER_ACTIONS, tool_method
from dynaweb_env.actions import ACTION_ARGUMENTS, ACTION_DESCRIPTIONS, Action, describe_actions, parse_action
from dynaweb_env.agent import DEFAULT_POLICY_ACTIONS, policy_system_prompt
from dynaweb_env.envs.browsergym_adapter import to_browsergym_call
from dynaweb_env.world_model.judge import judge_system_prompt
from dynaweb_env.world_model.patch import patch_system_prompt
from dynaweb_env.world_model.prompts import (
    PROMPT_STYLES,
    WORLD_MODEL_SYSTEM_PROMPT,
    _action_block,
    world_model_system_prompt,
)

GOLDEN = json.loads((Path(__file__).parent / "golden" / "action_grammar_v1.json").read_text(encoding="utf-8"))
SELECT_LINE = f"- {ACTION_SPECS['select'].description}\n"


def test_the_paper_grammar_is_the_first_twelve_and_select_is_offered_after_it() -> None:
    assert PAPER_ACTIONS == tuple(GOLDEN["trl_tool_schemas"][name]["function"]["name"] for name in PAPER_ACTIONS)
    assert len(PAPER_ACTIONS) == 12 and OFFERED_ACTIONS == (*PAPER_ACTIONS, "select") == DEFAULT_POLICY_ACTIONS
    assert list(ACTION_ARGUMENTS) == list(ACTION_SPECS) == list(ACTION_DESCRIPTIONS)


@pytest.mark.parametrize("style", ["compact", "paper"])
def test_policy_prompt_of_the_twelve_is_unchanged_and_the_default_appends_select(style: str) -> None:
    old = GOLDEN[f"policy_system_prompt/{style}"]
    assert policy_system_prompt(style, PAPER_ACTIONS) == old
    stop_line_end = old.index("\n", old.index("- `stop [answer]`")) + 1
    assert policy_system_prompt(style) == old[:stop_line_end] + SELECT_LINE + old[stop_line_end:]
    assert describe_actions(PAPER_ACTIONS) == GOLDEN["describe_actions"]


@pytest.mark.parametrize("style", PROMPT_STYLES)
def test_world_model_and_judge_prompts_are_unchanged_in_every_style(style: str) -> None:
    # "grounded-text" adds fields to the judge's user message only: its system prompts are "grounded"'s.
    golden = "grounded" if style == "grounded-text" else style
    assert WORLD_MODEL_SYSTEM_PROMPT == GOLDEN["WORLD_MODEL_SYSTEM_PROMPT"]
    assert world_model_system_prompt(style) == GOLDEN[f"world_model_system_prompt/{golden}"]
    assert patch_system_prompt(style) == GOLDEN[f"patch_system_prompt/{golden}"]
    assert judge_system_prompt(style) == GOLDEN[f"judge_system_prompt/{golden}"]


def test_world_model_wording_of_new_actions_sits_in_its_group() -> None:
    block = _action_block((*PAPER_ACTIONS, "select"))
    page_group = block[: block.index("Tab Management Actions:")]
    assert page_group.endswith(ACTION_SPECS["select"].world_model_wording + "\n\n")
    assert block.replace(ACTION_SPECS["select"].world_model_wording + "\n\n", "") == _action_block()


def test_trl_tool_schemas_of_the_twelve_are_unchanged_and_select_is_a_tool() -> None:
    from transformers.utils import get_json_schema

    from dynaweb_env.integrations.trl import DreamWebTools

    # TRL lists an environment's tools as its public functions (inspect.getmembers on the class).
    tools = [
        name
        for name, _ in inspect.getmembers(DreamWebTools, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]
    assert tools == sorted([*GOLDEN["trl_tool_names"], "select"])
    for name in GOLDEN["trl_tool_names"]:
        assert get_json_schema(getattr(DreamWebTools, name)) == GOLDEN["trl_tool_schemas"][name], name
    select = get_json_schema(DreamWebTools.select)["function"]
    assert select["parameters"]["required"] == ["element_id", "option"]


def test_tool_methods_write_the_action_string_from_their_arguments() -> None:
    acted: list[str] = []

    class Recorder:
        pass

    for name in OFFERED_ACTIONS:
        setattr(Recorder, name, tool_method(ACTION_SPECS[name], lambda recorder, text: acted.append(text)))
    recorder = Recorder()
    recorder.type("5", "hi there")  # the tool's own default: no Enter
    recorder.type(element_id="5", text="x", press_enter=True)
    recorder.tab_focus(2)
    recorder.select("7", "Red")
    recorder.go_back()
    assert acted == ["type [5] [hi there] [0]", "type [5] [x] [1]", "tab_focus [2]", "select [7] [Red]", "go_back"]
    assert all(parse_action(text) for text in acted)
    with pytest.raises(TypeError):
        recorder.click("1", "2")
    with pytest.raises(ValueError, match="not offered as a tool"):
        tool_method(ACTION_SPECS["noop"], lambda recorder, text: text)


def test_browsergym_calls_of_the_twelve_are_unchanged_and_new_actions_have_theirs() -> None:
    for text, call in GOLDEN["browsergym_calls"].items():
        assert to_browsergym_call(parse_action(text), 720) == call, text
    new_calls = {
        "select [13] [Arielle]": "select_option('13', 'Arielle')",
        "dblclick [4]": "dblclick('4')",
        "focus [4]": "focus('4')",
        "press_on [4] [enter]": "press('4', 'Enter')",
        "noop": "noop(1000)",
        "noop [250]": "noop(250)",
    }
    for text, call in new_calls.items():
        assert to_browsergym_call(parse_action(text), 720) == call, text


@pytest.mark.parametrize(
    "text, message",
    [
        ("select [13]", "select takes 2"),
        ("select [13] []", "select: option must not be empty"),
        ("select [a b] [x]", "element id must be the id shown"),
        ("press_on [4] [Foo+Bar]", "press_on: unknown key 'Foo' in [Foo+Bar]"),
        ("press_on [4] []", "press_on: argument must not be empty"),
        ("noop [1] [2]", "noop takes 1"),
        ("noop [20000]", "noop: wait_ms must be a whole number of milliseconds from 0 to 10000, got [20000]"),
        ("noop [-1]", "noop: wait_ms must be"),
        ("dblclick", "dblclick takes 1"),
    ],
)
def test_new_actions_are_checked_by_the_same_rules(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_action(text)


def test_new_actions_round_trip() -> None:
    for text in ("select [13] [Red Car]", "dblclick [4]", "focus [x9]", "press_on [4] [Control+a]", "noop [1000]"):
        action = parse_action(text)
        assert str(action) == text and parse_action(str(action)) == action
    assert parse_action("select [ 13 ] [ Red ]") == Action("select", ("13", "Red"))
    assert parse_action("noop") == Action("noop", ("1000",))


def test_no_second_copy_of_the_grammar_in_the_package() -> None:
    """Every prompt line, world-model wording and tool summary is written once, in action_spec.py."""
    package = Path(__file__).parent.parent / "dynaweb_env"
    sources = {path: path.read_text(encoding="utf-8") for path in package.rglob("*.py")}
    for spec in ACTION_SPECS.values():
        phrases = [spec.description[:50], spec.world_model_wording[:50]]
        phrases += [spec.tool.summary] if spec.tool is not None else []
        for phrase in phrases:
            holders = sorted(path.name for path, text in sources.items() if phrase in text)
            assert holders == ["action_spec.py"], (spec.name, phrase, holders)
