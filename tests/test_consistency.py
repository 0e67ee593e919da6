"""Page consistency and typed text kept: the rules on plain trees, on every shipped real transition, and as
DreamWeb-v0 guards."""

from __future__ import annotations

import pytest
from test_dream_env import start_file  # noqa: F401  (fixture)

from dynaweb_env.axtree import nodes_by_bid, parse_axtree, replace_line_fields
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import real_trajectory_files
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.envs.dream_guards import RewardGuards
from dynaweb_env.llm.base import Generation
from dynaweb_env.observation import axtree_element_ids
from dynaweb_env.world_model import format_world_model_target
from dynaweb_env.world_model.consistency import (
    Inconsistency,
    page_inconsistencies,
    repair_page,
    same_page_transitions,
    typed_text_left_out,
)

PAGE = """RootWebArea 'Enter Password Task', focused
\t[16] textbox '' value='••', focused
\t\tStaticText '••'
\t[18] checkbox '0ntVvBZ', checked='false'
\t[19] textbox ''
\t[20] button 'Submit'"""
# The world model's page after `click [18]`: the clicked box took the objective's name, and [19] filled itself.
DREAMED = """RootWebArea 'Enter Password Task', focused
\t[16] textbox '' value='••'
\t\tStaticText '••'
\t[18] checkbox 'dhjq', checked='true', focused
\t[19] textbox '' value='•••'
\t\tStaticText '•••'
\t\tStaticText 'Verify'
\t[20] button 'Send'"""


def test_a_renamed_control_and_an_untyped_field_are_found_and_repaired():
    found = page_inconsistencies(PAGE, "click [18]", DREAMED)
    assert found == [Inconsistency("renamed", "18", "0ntVvBZ", "dhjq"), Inconsistency("untyped_value", "19", "", "•••")]
    assert found[0].describe() == "[18] renamed: '0ntVvBZ' -> 'dhjq'"
    repaired = repair_page(DREAMED, found)
    # The click's own effects (checked, focus), the untouched lines and the button's new label stay.
    assert repaired.splitlines() == [
        "RootWebArea 'Enter Password Task', focused",
        "\t[16] textbox '' value='••'",
        "\t\tStaticText '••'",
        "\t[18] checkbox '0ntVvBZ', checked='true', focused",
        "\t[19] textbox ''",
        "\t\tStaticText 'Verify'",
        "\t[20] button 'Send'",
    ]
    assert page_inconsistencies(PAGE, "click [18]", repaired) == []


def test_typing_fills_its_own_field_and_a_key_press_may_fill_any():
    typed = page_inconsistencies(PAGE, "type [19] [abc] [0]", DREAMED)
    assert [item.kind for item in typed] == ["renamed"]
    assert [item.kind for item in page_inconsistencies(PAGE, "press [a]", DREAMED)] == ["renamed"]
    assert [item.kind for item in page_inconsistencies(PAGE, "type [16] [abc] [0]", DREAMED)] == [
        "renamed",
        "untyped_value",
    ]
    assert page_inconsistencies(PAGE, "not an action", PAGE) == []


def test_replace_line_fields_keeps_the_rest_of_the_line():
    line = "\t[5] textbox 'it\\'s' value='x, y', focused, required"
    assert replace_line_fields(line, name="a'b") == "\t[5] textbox \"a'b\" value='x, y', focused, required"
    assert replace_line_fields(line, remove_value=True) == "\t[5] textbox 'it\\'s', focused, required"
    assert replace_line_fields("\t[6] textbox value='v'", name="n") == "\t[6] textbox 'n' value='v'"
    assert replace_line_fields("", name="n") == ""


LOGIN = """RootWebArea 'Login User Task', focused
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t[16] textbox '' value='annis', focused
\t\t\tStaticText 'annis'
\t[17] paragraph ''
\t\t[18] LabelText ''
\t\t\tStaticText 'Password'
\t\t[19] textbox ''
\t[20] button 'Login'"""


def test_typed_text_the_world_model_left_out_is_written_in():
    # The world model drew `type [19] [4DVK] [0]` as a page where the password field stayed empty and the
    # username vanished: the commonest miss of the shipped patch world model on login forms.
    forgetful = LOGIN.replace("[16] textbox '' value='annis', focused\n\t\t\tStaticText 'annis'", "[16] textbox ''")
    found = typed_text_left_out(LOGIN, "type [19] [4DVK] [0]", forgetful)
    assert found == [
        Inconsistency("changed", "16", "annis", "", "annis"),
        Inconsistency("not_typed", "19", "", "", "••••"),  # its label names a password: masked
    ]
    assert found[1].describe() == "[19] typed into but shown '', a real page shows '••••'"
    repaired = repair_page(forgetful, found)
    assert "\t\t[16] textbox '' value='annis'\n\t\t\tStaticText 'annis'\n" in repaired
    assert "\t\t[19] textbox '' value='••••'\n\t\t\tStaticText '••••'\n\t[20] button 'Login'" in repaired
    assert typed_text_left_out(LOGIN, "type [19] [4DVK] [0]", repaired) == []
    # A field whose text the world model masked, or showed twice, is redrawn with one StaticText child.
    masked = LOGIN.replace("value='annis', focused", "value='•••', disabled=True")
    found = typed_text_left_out(LOGIN, "click [20]", masked)
    assert found == [Inconsistency("changed", "16", "annis", "•••", "annis")]
    assert "[16] textbox '' value='annis', disabled=True\n\t\t\tStaticText 'annis'\n\t[17]" in repair_page(
        masked, found
    )
    twice = forgetful.replace("[16] textbox ''", "[16] textbox ''\n\t\t\tStaticText 'annis'")
    repaired = repair_page(twice, typed_text_left_out(LOGIN, "type [19] [4DVK] [0]", twice))
    assert repaired.count("StaticText 'annis'") == 1 and repaired.count("StaticText '••••'") == 1
    # Wrong text is replaced with its own StaticText; a plain field shows the text as typed.
    wrong = LOGIN.replace("value='annis', focused\n\t\t\tStaticText 'annis'", "value='anni'\n\t\t\tStaticText 'anni'")
    fixed = repair_page(wrong, typed_text_left_out(LOGIN, "type [16] [annis] [0]", wrong))
    assert fixed == LOGIN.replace("value='annis', focused", "value='annis'")


def test_typed_text_rules_spare_what_a_real_page_does():
    emptied = LOGIN.replace(" value='annis', focused\n\t\t\tStaticText 'annis'", ", focused")
    assert typed_text_left_out(LOGIN, "press [Control+a]", emptied) == []  # a key press may clear the focus
    assert typed_text_left_out(LOGIN, "type [16] [] [0]", emptied) == []  # nothing typed, nothing expected
    ended = LOGIN.replace("[19] textbox ''", "[19] textbox '', disabled=True")
    assert typed_text_left_out(LOGIN, "type [19] [ab] [0]", ended) == []  # keystrokes after the end do not land
    assert [item.kind for item in typed_text_left_out(LOGIN, "click [20]", emptied)] == ["changed"]
    # Text extended without a keystroke on it is an autocompletion (or keystrokes drawn late): spared.
    assert typed_text_left_out(LOGIN, "click [20]", LOGIN.replace("'annis'", "'annisa'")) == []
    assert (
        typed_text_left_out(LOGIN, "type [19] [ab] [0]", LOGIN.replace("[19] textbox ''", "[19] textbox '' value='ab'"))
        == []
    )
    assert typed_text_left_out(LOGIN, "not an action", emptied) == []


def test_a_select_sets_its_list_and_enter_ends_a_textarea_line():
    # choose-list: a <select> shows the chosen option as its name and value (real transitions of miniwob-all).
    before = "RootWebArea 'Choose List Task'\n\t[13] combobox 'Madelene' value='Madelene'\n\t[15] button 'Submit'"
    after = before.replace("'Madelene' value='Madelene'", "'Teddy' value='Teddy'")
    assert page_inconsistencies(before, "select [13] [Teddy]", after) == []
    assert typed_text_left_out(before, "select [13] [Teddy]", after) == []
    assert [item.kind for item in page_inconsistencies(before, "click [15]", after)] == ["renamed"]
    # email-inbox reply: `type ... [1]` into a textarea ends with the newline Enter typed.
    reply = "RootWebArea 'Email Inbox Task'\n\t[89] textbox '' value='Dear'"
    assert typed_text_left_out(reply, "type [89] [thanks] [1]", reply.replace("'Dear'", "'thanks\\n'")) == []
    assert typed_text_left_out(reply, "type [89] [thanks] [1]", reply.replace("'Dear'", "'thank'")) != []


def test_no_shipped_real_transition_breaks_page_consistency_or_leaves_typed_text_out():
    """The rules' premise, on every real same-URL transition the package ships (24 tasks, experts and
    ε-exploration): a real page never renames a control or fills a field no action typed into, and always
    shows the text typed into an enabled field, and keeps it until an action targets the field."""
    checked, typings, broken = 0, 0, []
    for trajectory in read_trajectories(real_trajectory_files()):
        for step, following in same_page_transitions(trajectory.steps):
            checked += 1
            typings += step.action.startswith("type")
            found = page_inconsistencies(step.axtree, step.action, following.axtree)
            found += typed_text_left_out(step.axtree, step.action, following.axtree)
            if found:
                broken.append((trajectory.id, step.action, found))
    assert checked > 3500 and typings > 700 and broken == []


class InconsistentWorldModel:
    """World model that renames the form's textbox and fills it, whatever the action; judge: SUCCESS."""

    model_name = "inconsistent"

    def __init__(self):
        self.calls: list[str] = []

    def generate(self, conversations, params):
        kind = "judge" if "VERDICT" in conversations[0][0]["content"] else "wm"
        self.calls.append(kind)
        if kind == "judge":
            return [Generation("VERDICT: SUCCESS") for _ in conversations]
        tree = "RootWebArea 'Enter Text', focused\n\t[5] textbox 'Kay' value='Kay'\n\t[7] button 'Submit', focused"
        return [Generation(format_world_model_target("The form changed.", "", tree, False)) for _ in conversations]


def form_dream(start_file, **guards) -> tuple[DreamWebEnv, InconsistentWorldModel]:  # noqa: F811
    backend = InconsistentWorldModel()
    env = DreamWebEnv(world_model=backend, judge="world_model", start_states=start_file, dream_length=3,
                      reward_guards=guards)  # fmt: skip
    env.reset(seed=0, options={"task": "miniwob.enter-text", "task_seed": 3, "step_index": 0})
    return env, backend


def test_guard_off_shows_the_page_as_dreamed(start_file):  # noqa: F811
    env, _ = form_dream(start_file)
    observation, _, _, _, info = env.step("click [7]")
    assert "[5] textbox 'Kay' value='Kay'" in observation["axtree"] and "world_model_inconsistencies" not in info


def test_guard_repair_undoes_the_inconsistency_and_the_dream_goes_on(start_file):  # noqa: F811
    env, _ = form_dream(start_file, consistency="repair")
    observation, reward, terminated, truncated, info = env.step("click [7]")
    assert "\t[5] textbox 'name'\n" in observation["axtree"] + "\n"
    assert "[7] button 'Submit', focused" in observation["axtree"]
    assert info["world_model_inconsistencies"] == [
        "[5] renamed: 'name' -> 'Kay'",
        "[5] filled without typing: '' -> 'Kay'",
    ]
    assert (reward, terminated, truncated) == (0.0, False, False)
    observation, _, _, _, info = env.step("type [5] [Kay] [0]")  # typed now: only the renaming is undone
    assert "[5] textbox 'name' value='Kay'" in observation["axtree"]
    assert info["world_model_inconsistencies"] == ["[5] renamed: 'name' -> 'Kay'"]


def test_guard_cut_ends_the_dream_unjudged(start_file):  # noqa: F811
    env, backend = form_dream(start_file, consistency="cut")
    observation, reward, terminated, truncated, info = env.step("click [7]")
    assert "[5] textbox 'Kay' value='Kay'" in observation["axtree"]  # the page as dreamed, for the record
    assert (reward, terminated, truncated, info["end_reason"]) == (0.0, False, True, "inconsistent")
    assert backend.calls == ["wm"] and len(info["world_model_inconsistencies"]) == 2
    assert RewardGuards.parse({"consistency": "cut"}).active == ["consistency", "objective_check"]
    with pytest.raises(ValueError, match="consistency must be one of"):
        RewardGuards.parse({"consistency": "fix"})


class ForgetfulWorldModel:
    """World model that never draws typed text: the form comes back empty, whatever the action."""

    model_name = "forgetful"

    def generate(self, conversations, params):
        if "VERDICT" in conversations[0][0]["content"]:
            return [Generation("VERDICT: FAILURE") for _ in conversations]
        tree = "RootWebArea 'Enter Text', focused\n\t[5] textbox 'name'\n\t[7] button 'Submit'"
        return [Generation(format_world_model_target("", "", tree, False)) for _ in conversations]


def test_guard_keep_typed_text_writes_the_typed_text_in(start_file):  # noqa: F811
    env = DreamWebEnv(
        world_model=ForgetfulWorldModel(), judge="world_model", start_states=start_file, dream_length=3,
        reward_guards={"keep_typed_text": True, "consistency": "cut"},
    )  # fmt: skip
    env.reset(seed=0, options={"task": "miniwob.enter-text", "task_seed": 3, "step_index": 0})
    observation, _, _, truncated, info = env.step("type [5] [Kay] [0]")
    assert "\t[5] textbox 'name' value='Kay'\n\t\tStaticText 'Kay'\n" in observation["axtree"]
    assert info["world_model_omissions"] == ["[5] typed into but shown '', a real page shows 'Kay'"]
    assert not truncated and "world_model_inconsistencies" not in info  # written in before the check
    observation, _, _, _, info = env.step("click [7]")  # drawn empty again: the text stays
    assert "[5] textbox 'name' value='Kay'" in observation["axtree"]
    assert info["world_model_omissions"] == ["[5] changed without an action on it to '', a real page shows 'Kay'"]
    assert RewardGuards.parse({"keep_typed_text": True}).active == ["keep_typed_text", "objective_check"]
    with pytest.raises(ValueError, match="keep_typed_text must be a bool"):
        RewardGuards.parse({"keep_typed_text": "yes"})


# --- real models: the shipped patch world model, sampled hot so that it errs ---------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["repair", "cut"])
def test_real_world_model_pages_are_held_to_consistency(mode):
    import gymnasium as gym

    env = gym.make(
        "DreamWeb-v0", world_model="smollm2-135m-wm-patch", judge="smollm2-135m-judge", max_new_tokens=384,
        world_model_temperature=1.0, dream_length=2, reward_guards={"consistency": mode},
    ).unwrapped  # fmt: skip
    for seed, task in enumerate(("miniwob.click-checkboxes", "miniwob.login-user", "miniwob.click-option")):
        observation, _ = env.reset(seed=seed, options={"task": task, "step_index": 0})
        element = sorted(axtree_element_ids(observation["axtree"]))[1]
        after, reward, terminated, truncated, info = env.step(f"click [{element}]")
        listed = info.get("world_model_inconsistencies", [])
        if after["url"] != observation["url"]:
            continue  # a navigation may replace every element: the rules hold within one page
        found = page_inconsistencies(observation["axtree"], f"click [{element}]", after["axtree"])
        if mode == "repair":  # whatever the world model drew, the page the policy sees is consistent
            assert found == [] and not truncated
        else:  # a cut dream ends unjudged, with the page as drawn; any other page is consistent
            assert [item.describe() for item in found] == listed
            assert (info.get("end_reason") == "inconsistent") == bool(listed)
            assert not listed or (reward == 0.0 and truncated and not terminated)


@pytest.mark.slow
def test_real_world_model_pages_keep_the_typed_text():
    import gymnasium as gym

    env = gym.make(
        "DreamWeb-v0", world_model="smollm2-135m-wm-patch", judge="smollm2-135m-judge", max_new_tokens=384,
        world_model_temperature=1.0, dream_length=3, reward_guards={"keep_typed_text": True},
    ).unwrapped  # fmt: skip
    same_page = 0
    typings = (("miniwob.login-user", "19", "4DVK", "••••"), ("miniwob.enter-text", "14", "Kay", "Kay"))
    for seed, (task, field, text, shown) in enumerate(typings):
        observation, _ = env.reset(seed=seed, options={"task": task, "step_index": 0})
        assert field in axtree_element_ids(observation["axtree"])
        after, _, _, _, info = env.step(f"type [{field}] [{text}] [0]")
        if after["url"] == observation["url"]:  # whatever the world model drew, the field shows the text
            same_page += 1
            assert typed_text_left_out(observation["axtree"], f"type [{field}] [{text}] [0]", after["axtree"]) == []
            drawn = nodes_by_bid(parse_axtree(after["axtree"]))[0].get(field)
            assert drawn is None or "disabled" in drawn.attributes or drawn.value == shown  # masked for a password
    assert same_page  # typing leaves the URL as it was: the rule had a page to act on
