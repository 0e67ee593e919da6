"""The long-task MiniWoB++ experts (five actions and more): decisions on small trees, then episodes on real pages."""

from __future__ import annotations

import gymnasium as gym
import pytest

from dynaweb_env.actions import parse_action
from dynaweb_env.data.tasks import TASK_STEP_LIMITS, step_limit
from dynaweb_env.experts import ExpertError, get_expert
from dynaweb_env.experts.miniwob_long import DIGIT_PATTERNS, slider_key
from dynaweb_trainer.collect import record_episode


def _act(task: str, goal: str, tree: str, last_action: str = "", error: str = "") -> str:
    observation = {"goal": goal, "url": "file:///x.html", "axtree": tree, "last_action": last_action,
                   "last_action_error": error}  # fmt: skip
    reasoning, action = get_expert(f"miniwob.{task}").act(observation)
    assert reasoning and parse_action(action)
    return action


def test_step_limit_raises_the_default_only_for_long_tasks() -> None:
    assert step_limit("miniwob.click-button", 10) == 10 and step_limit(None, 7) == 7
    assert step_limit("miniwob.click-checkboxes-large", 10) == TASK_STEP_LIMITS["miniwob.click-checkboxes-large"] > 10
    assert step_limit("miniwob.click-checkboxes-large", 50) == 50


# ---------------------------------------------------------------------------- decisions on small trees

NUMBER_GOAL = 'Draw the number "{}" in the checkboxes using the example on the right and press Submit when finished.'


def _grid(ticked: str) -> str:
    rows = [
        f"\t[{10 + i}] checkbox '', checked='{'true' if tick == '1' else 'false'}'" for i, tick in enumerate(ticked)
    ]
    return "RootWebArea 'Number Checkboxes Task'\n" + "\n".join(rows) + "\n\t[77] button 'Submit'"


def test_number_checkboxes_ticks_the_digit_then_submits() -> None:
    seven = "".join(DIGIT_PATTERNS["7"])
    assert _act("number-checkboxes", NUMBER_GOAL.format(7), _grid("0" * 28)) == "click [10]"
    almost = seven[:25] + "0" + seven[26:]  # the last tick of 7 is the 26th box (last row: 0100), [35]
    assert _act("number-checkboxes", NUMBER_GOAL.format(7), _grid(almost)) == "click [35]"
    wrong = "1" + seven[1:] if seven[0] == "0" else "0" + seven[1:]
    assert _act("number-checkboxes", NUMBER_GOAL.format(7), _grid(wrong)) == "click [10]"
    assert _act("number-checkboxes", NUMBER_GOAL.format(7), _grid(seven)) == "click [77]"
    with pytest.raises(ExpertError):
        _act("number-checkboxes", NUMBER_GOAL.format(7), _grid("0" * 20))


DATE_GOAL = "Select 10/17/2016 as the date and hit submit."
DATE_PAGE = "RootWebArea 'Choose Date Task'\n\t[16] paragraph ''\n\t\t[17] textbox ''{value}\n\t[19] button 'Submit'"
CALENDAR = """
\t[22] link 'Prev'
\t{next}
\tStaticText '{month}'
\tStaticText '2016'
\t[29] table ''
\t\t[86] cell '17'
\t\t\t[87] link '17'"""


def test_choose_date_opens_the_picker_turns_months_and_picks_the_day() -> None:
    closed = DATE_PAGE.format(value="")
    assert _act("choose-date", DATE_GOAL, closed) == "click [17]"
    december = closed + CALENDAR.format(next="StaticText 'Next'", month="December")
    assert _act("choose-date", DATE_GOAL, december) == "click [22]"
    october = closed + CALENDAR.format(next="[24] link 'Next'", month="October")
    assert _act("choose-date", DATE_GOAL, october) == "click [87]"
    september = closed + CALENDAR.format(next="[24] link 'Next'", month="September")
    assert _act("choose-date", DATE_GOAL, september) == "click [24]"
    assert _act("choose-date", DATE_GOAL, DATE_PAGE.format(value=" value='10/17/2016'")) == "click [19]"


FLIGHT_GOAL = "Book the {} one-way flight from: Corpus Christi, TX to: SHG on 12/05/2016."
FLIGHT_FORM = """RootWebArea 'Book Flight Task'
\t[19] textbox 'From:'{origin}
\t[21] textbox 'To:'{destination}
\t[25] textbox ''
\t[27] button 'Search'{suggestions}"""
SUGGESTIONS = """
\t[29] list ''
\t\t[34] listitem ''
\t\t\tStaticText 'Shungnak, AK (SHG)'"""
RESULTS = """RootWebArea 'Book Flight Task'
\tStaticText '13h 16m'
\t[21] button 'Book flight for $450'
\tStaticText '6h 5m'
\t[37] button 'Book flight for $912'
\tStaticText '8h 1m'
\t[45] button 'Book flight for $135'"""


def test_book_flight_fills_each_airport_through_its_suggestions_then_books_the_best() -> None:
    goal = FLIGHT_GOAL.format("shortest")
    empty = FLIGHT_FORM.format(origin="", destination="", suggestions="")
    assert _act("book-flight", goal, empty) == "type [19] [Corpus Christi, TX] [0]"
    origin = " value='Corpus Christi, TX (CRP)'"
    typed = FLIGHT_FORM.format(origin=origin, destination=" value='SHG', focused", suggestions=SUGGESTIONS)
    assert _act("book-flight", goal, typed) == "click [34]"
    unfocused = FLIGHT_FORM.format(origin=origin, destination=" value='SHG'", suggestions=SUGGESTIONS)
    assert _act("book-flight", goal, unfocused) == "type [21] [SHG] [0]"
    filled = FLIGHT_FORM.format(origin=origin, destination=" value='Shungnak, AK (SHG)'", suggestions="")
    assert _act("book-flight", goal, filled) == "click [25]"  # the date picker next
    assert _act("book-flight", goal, RESULTS) == "click [37]"
    assert _act("book-flight", FLIGHT_GOAL.format("cheapest"), RESULTS) == "click [45]"


SLIDER_GOAL = "Select {} with the slider, click the 2nd checkbox, then hit Submit."
SLIDER_PAGE = """RootWebArea 'Form Sequence Task'
\t[16] generic, clickable=True{handle}
\tStaticText '{value}'
\t[20] checkbox '', checked='false'
\t[21] checkbox '', checked='{second}'
\t[22] checkbox '', checked='false'
\t[24] button 'Submit'"""


def test_form_sequence_focuses_the_slider_moves_it_by_keys_then_ticks_and_submits() -> None:
    focused = "\n\t\t[17] generic, focused"
    assert _act("form-sequence", SLIDER_GOAL.format(7), SLIDER_PAGE.format(handle="", value=-1, second="false")) == (
        "click [16]"
    )
    page = SLIDER_PAGE.format(handle=focused, value=-1, second="false")
    assert _act("form-sequence", SLIDER_GOAL.format(7), page) == "press [PageUp]"
    assert _act("form-sequence", SLIDER_GOAL.format(-3), page) == "press [ArrowLeft]"
    assert _act("form-sequence", SLIDER_GOAL.format(-1), page) == "click [21]"
    done = SLIDER_PAGE.format(handle=focused, value=-1, second="true")
    assert _act("form-sequence", SLIDER_GOAL.format(-1), done) == "click [24]"


CALENDAR_GOAL = 'Create a 1 hour event named "Gym", between 12PM and 4PM.'


def _day(extra: str = "") -> str:
    lines = ["RootWebArea 'Daily Calendar Task'"]
    for hour in ("11am", "12pm", "1pm", "2pm", "3pm", "4pm"):
        base = {"11am": 70, "12pm": 75, "1pm": 80, "2pm": 85, "3pm": 90, "4pm": 95}[hour]
        lines += [
            f"\tStaticText '{hour}'",
            f"\t[{base}] generic, clickable=True",
            f"\t[{base + 1}] generic, clickable=True",
        ]
    return "\n".join(lines) + extra


def test_daily_calendar_probes_the_last_slot_drags_and_moves_past_a_covered_slot() -> None:
    assert _act("daily-calendar", CALENDAR_GOAL, _day()) == "hover [76]"  # 12pm-1pm: is its last slot free?
    assert _act("daily-calendar", CALENDAR_GOAL, _day(), "hover [76]") == "click [75]"
    assert _act("daily-calendar", CALENDAR_GOAL, _day(), "click [75]") == "hover [76]"
    covered = "TimeoutError: Locator.hover: Timeout 2000ms exceeded."
    assert _act("daily-calendar", CALENDAR_GOAL, _day(), "hover [76]", covered) == "hover [81]"  # from 1pm on
    assert _act("daily-calendar", CALENDAR_GOAL, _day(), "click [80]", covered) == "hover [85]"  # from 1:30pm on
    drawn = _day("\n\t[136] generic, clickable=True\n\t\tStaticText 'New event'")
    assert _act("daily-calendar", CALENDAR_GOAL, drawn, "hover [76]") == "click [136]"
    named = drawn + "\n\t[139] textbox ''\n\t[147] button 'Create'"
    assert _act("daily-calendar", CALENDAR_GOAL, named) == "type [139] [Gym] [0]"
    with pytest.raises(ExpertError):  # every block of the window is covered
        _act("daily-calendar", CALENDAR_GOAL, _day(), "hover [95]", covered)


def test_slider_keys_take_the_fewest_presses() -> None:
    assert [slider_key(-1, wanted, -10, 10) for wanted in (0, 7, 10, -9)] == ["ArrowRight", "PageUp", "End", "Home"]
    assert slider_key(12, 20, 0, 20) in {"End", "PageUp"} and slider_key(3, 4, 0, 20) == "ArrowRight"
    with pytest.raises(ExpertError):
        slider_key(0, 30, 0, 20)


SLIDERS_PAGE = """RootWebArea 'Use Slider Task'
\t[16] generic, clickable=True{handle}
\tStaticText '{first}'
\t[19] generic, clickable=True
\tStaticText '9'
\t[22] generic, clickable=True
\tStaticText '17'
\t[25] button 'Submit'"""


def test_use_slider_2_sets_each_slider_in_turn() -> None:
    goal = "Set the sliders to the combination [2,9,16] and submit."
    assert _act("use-slider-2", goal, SLIDERS_PAGE.format(handle="", first=10)) == "click [16]"
    focused = SLIDERS_PAGE.format(handle="\n\t\t[17] generic, focused", first=10)
    assert _act("use-slider-2", goal, focused) == "press [PageDown]"
    assert _act("use-slider-2", goal, SLIDERS_PAGE.format(handle="\n\t\t[17] generic, focused", first=2)) == (
        "click [22]"  # the second slider already shows 9
    )
    assert _act("use-slider-2", "Set the sliders to the combination [2,9,17] and submit.",
                SLIDERS_PAGE.format(handle="", first=2)) == "click [25]"  # fmt: skip


# ---------------------------------------------------------------------------- whole episodes on real pages

#: One seed per expert family, with the fewest actions its episode takes on that page (seeds checked by hand).
REAL_EPISODES = [
    ("miniwob.click-checkboxes-large", 1, 11),  # 12 boxes and Submit: past the 10-step default
    ("miniwob.choose-date", 8, 5),
    ("miniwob.form-sequence", 3, 5),
    ("miniwob.daily-calendar", 5, 6),  # a covered slot on the way
]
SLOW_EPISODES = [("miniwob.number-checkboxes", 0, 11), ("miniwob.book-flight", 1, 8), ("miniwob.use-slider-2", 0, 9)]


def _solve(env: gym.Env, task_id: str, seed: int, fewest_actions: int) -> None:
    trajectory = record_episode(env, get_expert(task_id), task_id, seed)
    trace = [(step.action, step.last_action_error) for step in trajectory.steps]
    assert trajectory.success and len(trajectory.actions) >= fewest_actions, trace


@pytest.mark.browser
@pytest.mark.parametrize(("task_id", "seed", "fewest_actions"), REAL_EPISODES)
def test_long_expert_solves_a_real_page(real_web_env: gym.Env, task_id: str, seed: int, fewest_actions: int) -> None:
    """The env keeps its 10-step default: a long task's own limit (step_limit) lets the episode finish."""
    _solve(real_web_env, task_id, seed, fewest_actions)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize(("task_id", "seed", "fewest_actions"), SLOW_EPISODES)
def test_long_expert_solves_a_long_real_page(
    real_web_env: gym.Env, task_id: str, seed: int, fewest_actions: int
) -> None:
    _solve(real_web_env, task_id, seed, fewest_actions)
