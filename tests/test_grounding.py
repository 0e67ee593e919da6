"""Objective grounding for the judge: the notes of the ``"grounded"`` prompt style, on made-up and real pages."""

from __future__ import annotations

import collections

import pytest

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.world_model.grounding import (
    MAX_OBJECTIVE_ELEMENTS,
    mentioned_in_objective,
    named_in_objective,
    objective_elements,
    row_named_in_objective,
    step_grounding,
)
from dynaweb_env.world_model.judge import (
    COMPACT_JUDGE_SYSTEM_PROMPT,
    JudgeRequest,
    JudgeStep,
    build_judge_messages,
    format_judge_target,
)
from dynaweb_env.world_model.judge_cases import EARLY_FINAL_CASE, judge_cases
from dynaweb_env.world_model.prompts import continues_prompt_style, is_compact_style, world_model_system_prompt
from dynaweb_env.world_model.requirements import (
    first_word,
    objective_dates,
    objective_progress,
    objective_requirements,
    objective_value_lists,
    ordinal_references,
    submitted_early,
    unmet_objective,
)

PAGE = """RootWebArea 'Click Checkboxes Task', focused
\t[18] checkbox 'nBT', checked='true'
\tStaticText 'nBT'
\t[21] checkbox 'cp', checked='true'
\t[24] checkbox 'z5I', checked='false'
\t[27] textbox '' value='cheree'
\t[30] button 'Submit'"""
GOAL = 'Select nBT, z5I and click Submit. Type "cheree".'


@pytest.mark.parametrize(
    ("text", "objective", "named"),
    [
        ("Tab #2", "Click on Tab #2.", True),
        ("Tab #1", "Click on Tab #12.", False),  # a whole phrase, not a prefix
        ("cp", "Select cpu and click Submit.", False),
        ("SUBMIT", "click  submit", True),  # case and spacing do not matter
        ("Log  in", "Press log in.", True),
        ("x", "Close the box with x.", False),  # one-letter names are never matched
        ("", "anything", False),
        ("'nBT'", "Select nBT.", True),  # quotes around the name do not count
    ],
)
def test_a_name_is_named_when_the_objective_holds_it_as_a_whole_phrase(text, objective, named):
    assert named_in_objective(text, objective) is named


def test_each_action_is_noted_with_whether_the_objective_names_its_element_and_text():
    assert step_grounding("click [18]", "[18] checkbox 'nBT', checked='false'", GOAL) == "NAMED IN OBJECTIVE: yes"
    assert step_grounding("click [21]", "[21] checkbox 'cp', checked='false'", GOAL) == "NAMED IN OBJECTIVE: no"
    assert step_grounding("type [27] [cheree] [0]", "[27] textbox ''", GOAL) == "TEXT IN OBJECTIVE: yes"
    assert step_grounding("type [30] [chere] [0]", "[30] button 'Submit'", GOAL) == (
        "NAMED IN OBJECTIVE: yes; TEXT IN OBJECTIVE: no"
    )
    assert step_grounding("scroll [down]", "", GOAL) == ""  # nothing to ground
    assert step_grounding("click [9]", "", GOAL) == ""  # an element the page lacks
    assert step_grounding("click [", "", GOAL) == ""  # malformed: no note, no error


def test_the_final_pages_elements_the_objective_names_are_listed_with_their_state():
    assert objective_elements(PAGE, GOAL) == [
        "[18] checkbox 'nBT', checked='true'",  # the StaticText 'nBT' under it has no id: left out
        "[24] checkbox 'z5I', checked='false'",
        "[27] textbox '' value='cheree'",  # named by its value
        "[30] button 'Submit'",
    ]
    many = "\n".join(f"[{i}] checkbox 'box{i}'" for i in range(30))
    goal = "Select " + ", ".join(f"box{i}" for i in range(30))
    assert len(objective_elements(many, goal)) == MAX_OBJECTIVE_ELEMENTS
    assert objective_elements(PAGE, "Scroll down.") == []


def test_the_grounded_prompt_is_the_compact_prompt_plus_the_grounding_lines():
    request = JudgeRequest(
        GOAL,
        (
            JudgeStep("click [18]", "I tick nBT.", "[18] checkbox 'nBT', checked='false'"),
            JudgeStep("click [21]", "I tick cp.", "[21] checkbox 'cp', checked='false'"),
            JudgeStep("click [30]", "", "[30] button 'Submit'"),
        ),
        "miniwob:///click-checkboxes.html",
        PAGE,
    )
    compact = build_judge_messages(request, prompt_style="compact")
    grounded = build_judge_messages(request, prompt_style="grounded")
    assert grounded[0] == compact[0] == {"role": "system", "content": COMPACT_JUDGE_SYSTEM_PROMPT}
    lines = grounded[1]["content"].splitlines()
    section = lines.index("OBJECTIVE'S ELEMENTS ON THE FINAL PAGE:")
    answer = lines.index("AGENT ANSWER: None")
    notes = [line for line in lines[:section] if "IN OBJECTIVE:" in line]
    assert notes == ["   NAMED IN OBJECTIVE: yes", "   NAMED IN OBJECTIVE: no", "   NAMED IN OBJECTIVE: yes"]
    assert lines[section + 1 : answer] == objective_elements(PAGE, GOAL)
    # Take the notes and the section away, and the compact prompt is left, in order.
    kept = [line for line in lines[:section] if line not in notes] + lines[answer:]
    assert "\n".join(kept) == compact[1]["content"]
    assert "I tick" not in grounded[1]["content"]  # no agent reasoning, as in compact
    assert format_judge_target(True, "grounded") == format_judge_target(True, "compact") == "VERDICT: SUCCESS"


def test_grounded_text_reads_an_unnamed_element_by_its_text_and_grounded_does_not():
    goal = 'For the user @jerald, click on the "Block" button.'
    request = JudgeRequest(
        goal,
        (
            JudgeStep("click [105]", "", "[105] image ''"),
            JudgeStep("click [111]", "", "[111] listitem ''", "Block @jerald"),
            JudgeStep("click [110]", "", "[110] listitem ''", "Mute @jerald"),
        ),
        "miniwob:///social-media.html",
        "RootWebArea 'Social Media Task'",
    )
    grounded = build_judge_messages(request, prompt_style="grounded")[1]["content"]
    text = build_judge_messages(request, prompt_style="grounded-text")
    lines = text[1]["content"].splitlines()
    assert "   ELEMENT: [111] listitem '', text='Block @jerald'" in lines
    assert "   ELEMENT: [105] image ''" in lines  # no text: the line as it was
    notes = [line for line in lines if "IN OBJECTIVE:" in line]
    assert notes == ["   NAMED IN OBJECTIVE: yes", "   NAMED IN OBJECTIVE: no"]
    # The grounded style's judges read their inputs as they were trained: no text, no notes for unnamed elements.
    assert "text=" not in grounded and "IN OBJECTIVE:" not in grounded.split("FINAL URL")[0]
    assert text[0] == build_judge_messages(request, prompt_style="grounded")[0]
    assert format_judge_target(False, "grounded-text") == "VERDICT: FAILURE"


@pytest.mark.parametrize(
    ("label", "objective", "mentioned"),
    [
        ("Block @jerald", 'For the user @jerald, click on the "Block" button.', True),
        ("Mute @jerald", 'For the user @jerald, click on the "Block" button.', False),
        ("Marcella", 'Find and click on the folder or file named "Marcella".', True),
        ("Marcel", 'Find and click on the folder or file named "Marcella".', False),
    ],
)
def test_an_elements_text_is_mentioned_when_named_or_holding_a_quoted_phrase(label, objective, mentioned):
    assert mentioned_in_objective(label, objective) is mentioned


@pytest.mark.parametrize(
    ("row", "objective", "named"),
    [
        ("Zabrina Mi. Elementum condi..", "Find the email by Zabrina and click the star icon.", True),
        ("Simonette Enim. Ultrices laoree..", "Find the email by Zabrina and click the star icon.", False),
        ("Hayes @jerald · 6h ago Nibh nisi.", 'For the user @jerald, click on the "Block" button.', True),
        ("Courtnay @sem · 17h ago Vulputate.", 'For the user @jerald, click on the "Block" button.', False),
        ("the star and the icon", "Find the email by Zabrina and click the star icon.", False),  # no name-like word
    ],
)
def test_a_row_is_named_by_a_proper_name_handle_or_number_the_objective_holds(row, objective, named):
    assert row_named_in_objective(row, objective) is named


def test_a_row_grounds_an_icon_in_the_grounded_text_style():
    goal = "Find the email by Zabrina and click the star icon to mark it as important."
    steps = (
        JudgeStep("click [27]", "", "[27] image ''", row="Zabrina Mi."),
        JudgeStep("click [17]", "", "[17] image ''"),
    )
    lines = build_judge_messages(JudgeRequest(goal, steps), prompt_style="grounded-text")[1]["content"].splitlines()
    assert lines[2:6] == [
        "1. click [27]",
        "   ELEMENT: [27] image '', row='Zabrina Mi.'",
        "   NAMED IN OBJECTIVE: yes",
        "2. click [17]",
    ]
    assert lines[6] == "   ELEMENT: [17] image ''"


def test_grounded_is_compact_for_the_world_model_and_continues_a_compact_adapter():
    assert is_compact_style("grounded") and is_compact_style("compact") and not is_compact_style("paper")
    assert world_model_system_prompt("grounded") == world_model_system_prompt("compact")
    assert continues_prompt_style("compact", "grounded")
    assert not continues_prompt_style("grounded", "compact")  # a grounded judge would lose lines it reads
    assert not continues_prompt_style("paper", "grounded")
    assert continues_prompt_style("grounded", "grounded-text") and continues_prompt_style("compact", "grounded-text")
    assert not continues_prompt_style("grounded-text", "grounded")
    assert is_compact_style("grounded-text") and world_model_system_prompt(
        "grounded-text"
    ) == world_model_system_prompt("compact")
    with pytest.raises(ValueError, match="prompt_style must be one of"):
        is_compact_style("terse")


def test_on_real_pages_the_expert_clicks_only_what_the_objective_names_and_near_misses_do_not():
    """On the shipped real trajectories: the scripted expert's clicks on click-button and click-tab are all
    named in the objective; the near misses' failures on those tasks all click something it does not name."""
    notes = collections.Counter()
    tasks = ("miniwob.click-button", "miniwob.click-tab")
    for path in (
        "dynaweb_env/data/miniwob-large/train/expert.jsonl.xz",
        "dynaweb_env/data/judge-dreamed/train/near-miss-final-pages.jsonl.xz",
    ):
        for trajectory in read_trajectories(path):
            if trajectory.task_id not in tasks:
                continue
            request, reward, name = judge_cases([trajectory])[0]
            named = [step_grounding(s.action, s.target, request.goal) for s in request.steps]
            notes[(reward, any("NAMED IN OBJECTIVE: no" in note for note in named))] += 1
    assert notes[(1.0, False)] >= 80  # successes: every click named
    assert notes[(0.0, True)] >= 50  # failures: a click on an element the objective does not name
    assert notes[(1.0, True)] == 0
    assert notes[(0.0, False)] <= 1  # one click-button failure clicked the right name twice (not a near miss)


def test_objective_progress_is_the_share_of_explicit_requirements_met():
    # PAGE: nBT checked, z5I unchecked, "cheree" held by the text field; cp is checked but not named.
    requirements = objective_requirements(GOAL, ["click [18]"], ["[18] checkbox 'nBT'"], PAGE)
    # The quoted text, then nBT, z5I, and the Submit button, which the objective names and no action clicked.
    assert [met for _, met in requirements] == [True, True, False, False]
    assert unmet_objective(GOAL, ["click [18]"], ["[18] checkbox 'nBT'"], PAGE) == [
        requirement for requirement, met in requirements if not met
    ]
    assert objective_progress(GOAL, ["click [18]"], ["[18] checkbox 'nBT'"], PAGE) == pytest.approx(2 / 4)
    empty = PAGE.replace("value='cheree'", "value=''").replace("checked='true'", "checked='false'")
    assert objective_progress(GOAL, [], [], empty) == 0.0
    typed = objective_progress(GOAL, ["type [27] [cheree] [0]"], ["[27] textbox ''"], empty)
    assert typed == pytest.approx(1 / 4)  # typing the quoted text is progress before any box is ticked


LOGIN_PAGE = """RootWebArea 'Login User Task', focused
\t[16] textbox '' value='tora'
\t[19] textbox '' value='{password}'
\t[20] button 'Login'"""
LOGIN_GOAL = 'Enter the username "tora" and the password "C6vT" into the text fields and press login.'


def _login(password: str) -> tuple[list[str], list[str], str]:
    """``(actions, targets, final page)`` of a login form filled with ``tora`` and ``password``, Login unclicked."""
    actions = ["type [16] [tora] [0]", f"type [19] [{password}] [0]"]
    return actions, ["[16] textbox ''", "[19] textbox ''"], LOGIN_PAGE.format(password=password)


def test_progress_reads_quoted_text_in_its_case_and_the_veto_does_not():
    """A real planning run (benchmarks/results/planning/runs/sft-multistep/K2-d1-seed2.json, login-user seed 114)
    tied ``type [19] [c6vT]`` with ``type [19] [C6vT]``; MiniWoB++'s login-user compares the password exactly."""
    assert objective_progress(LOGIN_GOAL, *_login("C6vT")) > objective_progress(LOGIN_GOAL, *_login("c6vT"))
    # The veto stays as loose as before: some sites compare text ignoring case, so a case slip is not withheld.
    assert not any("C6vT" in unmet for unmet in unmet_objective(LOGIN_GOAL, *_login("c6vT")))
    # An objective that asks for a case is not typed as quoted: both cases count there.
    goal = 'Type "KELLY" in all lower case letters in the text field and press Submit.'
    for typed in ("kelly", "KELLY"):
        assert (
            objective_progress(
                goal,
                [f"type [5] [{typed}] [0]"],
                ["[5] textbox ''"],
                f"RootWebArea 'Enter Text 2'\n\t[5] textbox '' value='{typed}'",
            )
            == 1.0
        )


@pytest.mark.parametrize(
    "task",
    [
        "miniwob.login-user",
        "miniwob.enter-text-2",
        "miniwob.enter-password",
        "miniwob.login-user-popup",
        "miniwob.use-autocomplete",
    ],
)
def test_on_real_pages_reading_case_lowers_the_progress_of_no_success(task):
    """On the shipped real successes, quoted text read in its case gives the same progress as read ignoring case
    (enter-text-2 asks for a case, so it is read ignoring case there)."""
    trajectories = [t for t in read_trajectories("dynaweb_env/data/miniwob-all/test") if t.task_id == task]
    checked = 0
    for request, reward, _ in judge_cases(trajectories):
        if reward != 1.0:
            continue
        args = ([s.action for s in request.steps], [s.target for s in request.steps], request.final_axtree)
        folded = objective_requirements(request.goal, *args)
        assert objective_progress(request.goal, *args) == pytest.approx(sum(m for _, m in folded) / len(folded))
        checked += 1
    assert checked >= 3


SEQUENCE_PAGE = """RootWebArea 'Click Button Sequence Task', focused
\t[12] button 'ONE'
\t[13] button 'TWO'"""


def test_named_controls_must_be_acted_on():
    goal = "Click button ONE, then click button TWO."
    # The wrong click of benchmarks/default_rewards.py: TWO alone, which the trained judge paid as SUCCESS.
    assert unmet_objective(goal, ["click [13]", "stop [N/A]"], ["[13] button 'TWO'", ""], SEQUENCE_PAGE) == [
        "button 'ONE', which the objective names, was never acted on"
    ]
    assert unmet_objective(goal, ["click [12]", "click [13]"], ["[12] button 'ONE'", "[13] button 'TWO'"],
                           SEQUENCE_PAGE) == []  # fmt: skip
    # A hover acts on a menu item as a click does (click-menu's expert hovers its way to the item).
    menu = "RootWebArea 'Menu'\n\t[19] menuitem 'Chery'\n\t[55] menuitem 'Lainey'"
    targets = ["[19] menuitem 'Chery'", "[55] menuitem 'Lainey'"]
    assert unmet_objective("Select Chery>Lainey", ["hover [19]", "click [55]"], targets, menu) == []
    assert unmet_objective("Select Chery>Lainey", ["click [55]"], targets[1:], menu) == [
        "menuitem 'Chery', which the objective names, was never acted on"
    ]


FOCUS_PAGE = """RootWebArea 'Focus Text Task', focused
\t[12] textbox ''
\t[13] textbox ''
\t[14] textbox ''"""


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        ("Focus into the 2nd input textbox.", [(2, "2nd input textbox")]),
        ("Select -8 with the slider, click the 2nd checkbox, then hit Submit.", [(2, "2nd checkbox")]),
        ("Focus the third textbox and type", [(3, "third textbox")]),
        ("click the first two checkboxes", []),  # a count, not one control
        ("Enter the first name into the field", []),
        ("Find the last email Elva sent", []),
    ],
)
def test_ordinal_references_read_a_control_named_by_its_position(objective, expected):
    assert [(rank, phrase) for rank, phrase, _ in ordinal_references(objective)] == expected


def test_a_control_named_by_position_must_be_the_one_acted_on():
    goal = "Focus into the 2nd input textbox."
    # The wrong click of benchmarks/default_rewards.py on focus-text-2: the 1st box, which the judge paid.
    assert unmet_objective(goal, ["click [12]", "stop [N/A]"], ["[12] textbox ''", ""], FOCUS_PAGE) == [
        "the 2nd input textbox ([13]), which the objective names by its position, was never acted on"
    ]
    assert unmet_objective(goal, ["click [13]"], ["[13] textbox ''"], FOCUS_PAGE) == []
    # A page with fewer such controls than the rank cannot be checked: no requirement.
    assert objective_requirements("Focus into the 5th input textbox.", [], [], FOCUS_PAGE) == []


def _flagged_on_real_pages(task: str, *paths: str) -> collections.Counter:
    """``(real reward, flagged by the objective check)`` counts over the task's real trajectories in ``paths``."""
    flagged = collections.Counter()
    for trajectory in (t for path in paths for t in read_trajectories(path) if t.task_id == task):
        request, reward, _ = judge_cases([trajectory])[0]
        actions = [step.action for step in request.steps]
        targets = [step.target for step in request.steps]
        unmet = unmet_objective(request.goal, actions, targets, request.final_axtree, None, request.last_action_axtree)
        flagged[reward, bool(unmet)] += 1  # with the page the last action was taken on, as the judge checks
    return flagged


def test_on_real_pages_the_position_rule_flags_no_success_of_focus_text_2():
    flagged = _flagged_on_real_pages("miniwob.focus-text-2", "dynaweb_env/data/miniwob-large/train/expert.jsonl.xz")
    assert flagged[1.0, False] >= 5 and flagged[1.0, True] == 0


DATE_PAGE = """RootWebArea 'Choose Date Task', focused
\t[16] paragraph ''
\t\tStaticText 'Date:'
\t\t[17] textbox '' value='{value}'
\t[19] button 'Submit', focused"""


def test_a_date_the_objective_names_must_be_on_the_final_page():
    goal = "Select 01/03/2016 as the date and hit submit."
    assert objective_dates(goal) == ["01/03/2016"] and objective_dates('Type "01/03/2016".') == []
    actions = ["click [17]", "click [108]", "click [19]"]
    targets = ["[17] textbox ''", "[108] link '27'", "[19] button 'Submit'"]
    # A real choose-date failure: the picker filled another date, which the judge paid as SUCCESS.
    assert unmet_objective(goal, actions, targets, DATE_PAGE.format(value="12/27/2016")) == [
        "the objective's date '01/03/2016' is held by no field"
    ]
    assert unmet_objective(goal, actions, targets, DATE_PAGE.format(value="01/03/2016")) == []
    typed = unmet_objective(goal, ["type [17] [01/03/2016] [0]"], ["[17] textbox ''"], DATE_PAGE.format(value=""))
    assert typed == ["button 'Submit', which the objective names, was never acted on"]  # the date is met
    # A final page without a field (book-flight's results) is not checked: the form is gone, not unfilled.
    assert unmet_objective("Book a flight on 12/05/2016.", [], [], "RootWebArea 'Results'\n\t[9] button 'Go'") == []


SLIDER_PAGE = """RootWebArea 'Use Slider Task', focused
\t[16] generic, clickable=True
\tStaticText '{}'
\t[19] generic, clickable=True
\tStaticText '{}'
\t[22] generic, clickable=True
\tStaticText '{}'
\t[25] button 'Submit', focused"""


def test_a_list_of_values_the_objective_names_must_be_shown_in_order():
    goal = "Set the sliders to the combination [1,6,5] and submit."
    assert objective_value_lists(goal) == [["1", "6", "5"]] and objective_value_lists("Click [13].") == []
    submit = (["click [25]"], ["[25] button 'Submit'"])
    # A real use-slider-2 failure: the third slider one step off, paid as SUCCESS by the judge.
    assert unmet_objective(goal, *submit, SLIDER_PAGE.format(1, 6, 6)) == [
        "the objective's values [1,6,5] is not what the page shows, in order"
    ]
    assert unmet_objective(goal, *submit, SLIDER_PAGE.format(6, 5, 1)) != []  # the right values, wrong order
    assert unmet_objective(goal, *submit, SLIDER_PAGE.format(1, 6, 5)) == []
    # A page showing fewer numbers than the list (the sliders gone) is not checked.
    assert unmet_objective(goal, *submit, "RootWebArea 'Done'\n\t[25] button 'Submit'") == []


def test_a_submit_sends_the_values_of_the_page_it_was_clicked_on():
    """A dream where Submit moved the sliders: the world model showed the goal's values after the click, but the page
    the Submit was clicked on showed others (use-slider-2, scored 0.96 by the planner's judge before)."""
    goal = "Set the sliders to the combination [1,6,5] and submit."
    submit = (["click [25]"], ["[25] button 'Submit'"])
    before, after = SLIDER_PAGE.format(0, 0, 0), SLIDER_PAGE.format(1, 6, 5)
    assert unmet_objective(goal, *submit, after, None, before) == [
        "the objective's values [1,6,5] is not what the page shows, in order"
    ]
    # Progress (planning's floor, progress rewards) reads the same two pages: the values unmet when the Submit, the
    # objective's final step, was clicked, so no progress at all (a failed attempt).
    assert objective_progress(goal, *submit, after) == 1.0 and objective_progress(goal, *submit, after, before) == 0.0
    assert unmet_objective(goal, *submit, after, None, after) == []  # set, then submitted
    stopped = (["click [25]", "stop"], ["[25] button 'Submit'", ""])  # a stop after the Submit reads the same
    assert unmet_objective(goal, *stopped, after, None, before) == unmet_objective(goal, *submit, after, None, before)
    assert unmet_objective(goal, *submit, "RootWebArea 'Done'", None, after) == []  # the form gone after the click
    # A last action that is not a button's click (a slider moved) is read on the final page alone.
    slide = (["press [22] [ArrowRight]"], ["[22] generic, clickable=True"])
    assert not [line for line in unmet_objective(goal, *slide, after, None, before) if "values" in line]


def test_on_real_pages_the_values_rule_flags_every_use_slider_2_failure_and_no_success():
    splits = [f"dynaweb_env/data/miniwob-all/{split}" for split in ("train", "validation", "test")]
    flagged = _flagged_on_real_pages("miniwob.use-slider-2", *splits)
    assert flagged[1.0, False] >= 10 and flagged[1.0, True] == 0
    assert flagged[0.0, True] >= 5 and flagged[0.0, False] == 0


RESULTS_PAGE = """RootWebArea 'Book Flight Task', focused
\t[40] button 'Search'
\tStaticText '$388'
\t[71] button 'Book flight for $388'
\tStaticText '$412'
\t[97] button 'Book flight for $412'"""


def test_a_control_named_as_the_objective_begins_must_be_acted_on():
    goal = "Book the shortest one-way flight from: LEB to: RDG on 10/15/2016."
    assert first_word(goal) == "book" and first_word("OK, go") == "" and first_word("  Submit") == "submit"
    # A real book-flight cut, paid by the all-tasks judge: the results are shown, no flight was booked.
    searched = (["click [40]"], ["[40] button 'Search'"])
    assert unmet_objective(goal, *searched, RESULTS_PAGE) == [
        "button 'Book flight for $388', named as the objective begins, was never acted on"
    ]
    # A click on the heading "Book Your One-Way Flight" is no booking: only a control counts.
    heading = (["click [17]", "click [40]"], ["[17] heading 'Book Your One-Way Flight'", "[40] button 'Search'"])
    assert unmet_objective(goal, *heading, RESULTS_PAGE) != []
    booked = (["click [40]", "click [97]"], ["[40] button 'Search'", "[97] button 'Book flight for $412'"])
    assert unmet_objective(goal, *booked, RESULTS_PAGE) == []  # which flight is the judge's to read
    # A page offering no such control (the form before the search) is not checked.
    assert objective_requirements(goal, [], [], "RootWebArea 'Book Flight Task'\n\t[40] button 'Search'") == []
    # A control the objective names is checked once, by the named-control rule.
    assert unmet_objective("Submit the form.", [], [], "RootWebArea 'Form'\n\t[9] button 'Submit'") == [
        "button 'Submit', which the objective names, was never acted on"
    ]


def test_on_real_pages_the_first_word_rule_flags_every_book_flight_cut_and_no_success():
    splits = [f"dynaweb_env/data/miniwob-all/{split}" for split in ("train", "validation", "test")]
    flagged = collections.Counter()
    for trajectory in (t for path in splits for t in read_trajectories(path) if t.task_id == "miniwob.book-flight"):
        for request, reward, name in judge_cases([trajectory]):
            actions, targets = [step.action for step in request.steps], [step.target for step in request.steps]
            unmet = unmet_objective(request.goal, actions, targets, request.final_axtree)
            flagged[reward, name.endswith("/cut"), any("named as the objective begins" in line for line in unmet)] += 1
    assert flagged[1.0, False, False] >= 10 and flagged[1.0, False, True] == 0  # no success flagged
    assert flagged[0.0, True, True] >= 10 and flagged[0.0, True, False] == 0  # every cut (a search, no booking)


def test_pressing_the_objectives_final_button_early_is_no_progress():
    login = 'Enter the username "kanesha" and the password "C6vT" into the text fields and press login.'
    page = "\n".join(
        ["RootWebArea 'Login'", "\t[14] textbox 'Username' value='kanesha'", "\t[16] textbox 'Password'"]
        + ["\t[17] button 'Login'"]
    )
    typed = ["type [14] [kanesha] [0]"], ["[14] textbox 'Username'"]
    assert objective_progress(login, *typed, page) == pytest.approx(1 / 3)  # the username: a third of the way
    early = [*typed[0], "click [17]"], [*typed[1], "[17] button 'Login'"]
    assert submitted_early(login, *early) and objective_progress(login, *early, page) == 0.0
    # A button the objective names but does not end with is a step of the task, not its end.
    sequence = "Click button ONE, then click button TWO."
    assert not submitted_early(sequence, ["click [3]"], ["[3] button 'ONE'"])
    assert submitted_early(sequence, ["click [4]", "stop"], ["[4] button 'TWO'", ""])
    # Only a press submits: a hover on Login is no attempt (its progress stays that of the named control acted on).
    hovered = [*typed[0], "hover [17]"], [*typed[1], "[17] button 'Login'"]
    assert not submitted_early(login, *hovered) and objective_progress(login, *hovered, page) == pytest.approx(2 / 3)
    assert submitted_early(login, [*typed[0], "press_on [17] [Enter]"], early[1])


def test_on_real_pages_the_final_button_rule_zeroes_no_success_and_early_presses():
    """Every task of the shipped test split: no real success pressed its objective's final button early, and a
    success's final press replayed after a shorter prefix (judge_cases' early-final failures) is no progress."""
    counts = collections.Counter()
    test_split = read_trajectories("dynaweb_env/data/miniwob-all/test")
    for request, reward, name in judge_cases(test_split, early_final=True):
        args = ([s.action for s in request.steps], [s.target for s in request.steps], request.final_axtree)
        if not submitted_early(request.goal, *args[:2]):
            continue
        progress = objective_progress(request.goal, *args, request.last_action_axtree)
        counts[reward, EARLY_FINAL_CASE in name, progress == 0.0] += 1
    assert counts[1.0, False, True] == 0 and counts[1.0, False, False] >= 50  # successes keep their progress
    assert counts[0.0, True, True] >= 100  # early presses of the final button with a requirement unmet: no progress
