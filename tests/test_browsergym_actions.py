"""The BrowserGym grammar (``action_set="browsergym"``): its parser, hostile input, prompts, and DreamWeb-v0 with it."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.actions import Action, ActionParseError, read_action
from dynaweb_env.agent import policy_system_prompt
from dynaweb_env.browsergym_actions import (
    CONVERTERS,
    browsergym_action_set,
    describe_browsergym_actions,
    parse_browsergym_action,
)
from dynaweb_env.data.start_states import StartState
from dynaweb_env.envs.dream_episode import NOT_SELECTABLE_ERROR
from dynaweb_env.llm.base import Generation
from dynaweb_env.spaces import web_action_space, web_observation_space
from dynaweb_env.world_model import format_world_model_target

pytest.importorskip("browsergym.core", reason="needs the browser extra: pip install 'dynaweb[browser]'")

MAPPED = [
    ("click('12')", "click [12]"),
    ("click(bid='12', button='left', modifiers=[])", "click [12]"),
    ("fill('12', 'hello world')", "type [12] [hello world] [0]"),
    ("fill('12', '  spaced  ')", "type [12] [  spaced  ] [0]"),
    ("fill('12', '[x]')", "type [12] [[x]] [0]"),
    ("select_option('13', 'Arielle')", "select [13] [Arielle]"),
    ("select_option('13', ['Arielle'])", "select [13] [Arielle]"),
    ("press('12', 'Enter')", "press_on [12] [Enter]"),
    ("press('12', 'ctrl+a')", "press_on [12] [ctrl+a]"),
    ("scroll(0, 200)", "scroll [down]"),
    ("scroll(0.0, -50.5)", "scroll [up]"),
    ("go_back()", "go_back"),
    ("go_forward()", "go_forward"),
    ("goto('http://localhost/a?b=1')", "goto [http://localhost/a?b=1]"),
    ("send_msg_to_user('5h 47min')", "stop [5h 47min]"),
    ("send_msg_to_user(text='N/A')", "stop [N/A]"),
    ("dblclick('4')", "dblclick [4]"),
    ("hover('b8')", "hover [b8]"),
    ("focus('4')", "focus [4]"),
    ("clear('4')", "type [4] [] [0]"),
    ("noop()", "noop [1000]"),
    ("noop(250)", "noop [250]"),
    ("  `click('12')`  ", "click [12]"),
]


@pytest.mark.parametrize("text, paper", MAPPED)
def test_calls_become_the_paper_grammars_actions(text: str, paper: str) -> None:
    action = parse_browsergym_action(text)
    assert str(action) == paper
    assert read_action(paper).action == action  # one internal form: the paper text reads back the same action


HOSTILE = [
    ("", "empty action"),
    ("click [12]", "not a BrowserGym action"),
    ("__import__('os').system('touch /tmp/pwned')", "not a BrowserGym action"),
    ("click(open('/etc/passwd').read())", "arguments must be literal"),
    ("click(__import__('os').getcwd())", "arguments must be literal"),
    ("exec('print(1)')", "unknown action 'exec'"),
    ("eval('1')", "unknown action 'eval'"),
    ("click('1'); click('2')", "not a BrowserGym action"),
    ("click('1')\nclick('2')", "one action at a time"),
    ("(" * 500 + ")" * 500, "not a BrowserGym action"),
    ("click(" + "[" * 300 + "]" * 300 + ")", "not a BrowserGym action"),
    ("lambda: click('1')", "not a BrowserGym action"),
    ("click(*['1'])", "without * or **"),
    ("click(**{'bid': '1'})", "without * or **"),
    ("fill('1', 'a' * 9)", "arguments must be literal"),
    ("click(12)", "bid must be a string"),
    ("click(True)", "bid must be a string"),
    ("click()", "missing a required argument: 'bid'"),
    ("click('1', '2', '3', '4')", "too many positional arguments"),
    ("click('1', bogus=2)", "unexpected keyword argument 'bogus'"),
    ("click('1', button='right')", "only the left button"),
    ("click('1', modifiers=5)", "only the left button"),
    ("dblclick('1', modifiers=['Shift'])", "only the left button"),
    ("click('a b')", "element id must be the id shown"),
    ("fill('1', 'x', True)", "enable_autocomplete_menu=True is not supported"),
    ("fill('1', 'a]b')", "cannot be recorded"),
    ("fill('1', 5)", "value must be a string"),
    ("select_option('1', ['a', 'b'])", "several options"),
    ("select_option('1', '')", "option must not be empty"),
    ("press('1', 'Foo+Bar')", "unknown key 'Foo'"),
    ("scroll(10, 0)", "only vertical scrolling"),
    ("scroll(0, 0)", "only vertical scrolling"),
    ("scroll('0', 'down')", "delta_x must be a number"),
    ("noop(99999)", "wait_ms must be a number of milliseconds from 0 to 10000"),
    ("goto('')", "goto: argument must not be empty"),
    ("drag_and_drop('1', '2')", "drag_and_drop is not supported"),
    ("upload_file('1', '/etc/passwd')", "upload_file is not supported"),
    ("keyboard_press('Enter')", "unknown action 'keyboard_press'"),
    ("new_tab()", "unknown action 'new_tab'"),
    ("mouse_click(10, 20)", "unknown action 'mouse_click'"),
    ("click('" + "9" * 5000 + "')", None),  # a long but valid id: a missing element, the env's business
]


@pytest.mark.parametrize("text, message", HOSTILE)
def test_hostile_and_malformed_calls_are_refused_with_a_clear_error(text: str, message: str | None) -> None:
    if message is None:
        assert parse_browsergym_action(text).name == "click"
        return
    with pytest.raises(ActionParseError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_browsergym_action(text)


def test_read_action_finds_the_call_in_a_response_and_never_raises() -> None:
    read = read_action("REASON: the list holds it.\nACTION: select_option('13', 'Red')", action_set="browsergym")
    assert (read.action, read.shown) == (Action("select", ("13", "Red")), "select [13] [Red]")
    assert read.reasoning == "the list holds it."
    agentlab = read_action("<think>the button</think>\n<action>\nclick('7')\n</action>", action_set="browsergym")
    assert agentlab.action == Action("click", ("7",))
    for text in (None, 5, "x" * 5000, "REASON: hm\nACTION: rm -rf /", "ACTION: click('1'"):
        read = read_action(text, action_set="browsergym")
        assert read.action is None and read.error.startswith("invalid action: ")
    with pytest.raises(ValueError, match="action_set must be one of"):
        read_action("click('1')", action_set="selenium")


def test_the_policy_prompt_describes_browsergyms_actions_with_browsergyms_words() -> None:
    prompt = policy_system_prompt("compact", action_set="browsergym")
    description = describe_browsergym_actions()
    assert description in prompt and "click [id]" not in prompt
    own = browsergym_action_set().describe(with_long_description=False, with_examples=True)
    assert description.startswith(own.rsplit(" Example:", 1)[0].strip())  # BrowserGym's own text, as it writes it
    assert sorted(browsergym_action_set().action_set) == sorted(CONVERTERS)  # it describes exactly what is read
    assert parse_browsergym_action(description.split("Example:\n")[-1].splitlines()[0]).name == "type"
    assert policy_system_prompt("compact") == policy_system_prompt("compact", action_set="paper")


#: MiniWoB++ choose-list (seed 3) as RealWeb-v0 showed it.
CHOOSE_LIST = StartState(
    "miniwob.choose-list",
    "Select Deonne from the list and click Submit.",
    "file:///miniwob/choose-list.html",
    "RootWebArea 'Choose List Task', focused\n\t[13] combobox '' value='Arielle', hasPopup='menu', expanded=False\n"
    "\t\tMenuListPopup ''\n\t\t\t[14] option 'Arielle', selected=True\n\t\t\t[15] option 'Brunhilde', selected=False\n"
    "\t\t\t[16] option 'Deonne', selected=False\n\t[21] button 'Submit'",
    "real/choose-list/3",
    0,
    [],
)


class EchoWorldModel:
    """A world model that keeps the page and a judge that always says FAILURE; records what it was asked."""

    model_name = "echo"

    def __init__(self) -> None:
        self.actions: list[str] = []

    def generate(self, conversations, params):
        outputs = []
        for conversation in conversations:
            user = conversation[-1]["content"]
            if "CURRENT ACTION: " not in user:
                outputs.append(Generation(text="REASONING: no.\nVERDICT: FAILURE"))
                continue
            self.actions.append(user.rsplit("CURRENT ACTION: ", 1)[1])
            tree = user.split("CURRENT ACCESSIBILITY TREE:\n", 1)[1].split("\nPREVIOUS ACTION:", 1)[0]
            outputs.append(Generation(text=format_world_model_target("Nothing changes.", "", tree)))
        return outputs

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError


def test_check_env_passes_on_dreamweb_with_the_browsergym_grammar() -> None:
    env = gym.make("DreamWeb-v0", action_set="browsergym")
    assert env.observation_space == web_observation_space() and env.action_space == web_action_space()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    assert not env.unwrapped.dynamics.models_loaded
    with pytest.raises(ValueError, match="action_set must be one of"):
        gym.make("DreamWeb-v0", action_set="webarena")


def test_dreamweb_reads_calls_into_the_paper_form_the_world_model_sees() -> None:
    backend = EchoWorldModel()
    env = gym.make("DreamWeb-v0", world_model=backend, judge="world_model", action_set="browsergym", dream_length=5)
    observation, _ = env.reset(seed=0, options={"start_state": CHOOSE_LIST})
    listbox, button, option = "13", "21", "Deonne"

    observation, *_ = env.step(f"REASON: pick it.\nACTION: select_option('{listbox}', '{option}')")
    assert observation["last_action"] == f"select [{listbox}] [{option}]" and observation["last_action_error"] == ""
    assert backend.actions == [f"select [{listbox}] [{option}]"]
    observation, *_ = env.step(f"select_option('{button}', 'x')")  # not a list: the real env's words, no model call
    assert observation["last_action_error"] == NOT_SELECTABLE_ERROR and len(backend.actions) == 1
    observation, *_ = env.step(f"select [{listbox}] [{option}]")  # the paper grammar is not this env's
    assert observation["last_action_error"].startswith("invalid action: not a BrowserGym action")
    _, reward, terminated, _, info = env.step("send_msg_to_user('done')")
    assert terminated and info["end_reason"] == "stop" and reward == 0.0
