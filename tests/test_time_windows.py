"""The objective check's time rule: a time range shown on the page the last action was taken on fits the
objective's window and length (``dynaweb_env/world_model/time_windows.py``), on made-up pages, on every shipped real
daily-calendar trajectory, and in a dream."""

from __future__ import annotations

import pytest

from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.llm import Generation
from dynaweb_env.world_model.judge import JudgeVerdict, check_objective
from dynaweb_env.world_model.judge_cases import judge_cases, last_acted_page
from dynaweb_env.world_model.requirements import objective_progress, objective_requirements, unmet_objective
from dynaweb_env.world_model.time_windows import (
    objective_length,
    objective_window,
    parse_time,
    range_fits,
    shown_ranges,
    time_range_requirement,
)

GOAL = 'Create a 60 mins event named "Gym", between 4PM and 8PM.'
# daily-calendar's form as the real page shows it (seed 9), before Create; its final page shows the event's name only.
FORM = """RootWebArea 'Daily Calendar Task', focused
\tStaticText '4pm'
\t[96] generic, clickable=True
\t[137] generic, clickable=True
\t\tStaticText 'New event'
\t[140] textbox 'Event name' value='Gym', focused
\t\tStaticText 'Gym'
\t[142] LabelText ''
\t\tStaticText '{start}'
\tStaticText ''
\t[143] LabelText ''
\t\tStaticText 'to'
\t[144] LabelText ''
\t\tStaticText '{end}'
\t[147] button 'Cancel'
\t[148] button 'Create'"""
SAVED = """RootWebArea 'Daily Calendar Task', focused
\tStaticText '4pm'
\t[96] generic, clickable=True
\tStaticText 'Food'
\t[137] generic, clickable=True
\t\tStaticText 'Gym'"""
CREATE = (["type [140] [Gym] [0]", "click [148]"], ["[140] textbox 'Event name'", "[148] button 'Create'"])


def test_times_and_windows_and_lengths_are_read_as_pages_and_objectives_write_them():
    assert [parse_time(t) for t in ("12am", "12pm", "4PM", "8:30 pm", "4:75pm", "13pm", "4pm party")] == [
        0, 720, 960, 1230, None, None, None,
    ]  # fmt: skip
    assert objective_window(GOAL) == (960, 1200) and objective_length(GOAL) == 60
    assert objective_length('Create a 1.5 hours event named "Party", between 12PM and 4PM.') == 90
    assert objective_length('Create a 1 hour event named "Food", between 8AM and 12PM.') == 60
    assert objective_window("Click the button.") is None and objective_length("Click the button.") is None
    # The calendar's hour labels ('4pm' alone) are no range; 'X' 'to' 'Y' with empty texts between is.
    assert shown_ranges(FORM.format(start="4:30am", end="5am")) == [(270, 300)]
    assert shown_ranges(FORM.format(start="11:30pm", end="12am")) == [(1410, 1440)]
    assert shown_ranges(SAVED) == []


def test_a_range_fits_when_it_ends_inside_the_window_and_lasts_the_length():
    window = (960, 1200)  # 4PM to 8PM
    assert range_fits((960, 1020), window, 60)  # 4pm to 5pm
    assert not range_fits((990, 1020), window, 60)  # 30 minutes, not 60
    assert not range_fits((270, 330), window, 60)  # 4:30am to 5:30am: the right length, the wrong half of the day
    assert range_fits((930, 990), window, 60)  # 3:30pm to 4:30pm ends inside: MiniWoB++'s own test passes it
    assert not range_fits((1230, 510), (480, 720), 30)  # 8:30pm to 8:30am (a real failure) fits nothing
    assert range_fits((960, 990), window, None) and range_fits((960, 990), None, 30)


def test_the_form_the_last_action_was_taken_on_is_checked_where_the_final_page_shows_no_time():
    wrong, right = FORM.format(start="4:30am", end="5am"), FORM.format(start="4pm", end="5pm")
    # The final page alone cannot tell: no requirement, as before this rule.
    assert unmet_objective(GOAL, *CREATE, SAVED) == []
    assert unmet_objective(GOAL, *CREATE, SAVED, last_page=wrong) == [
        "the time range shown (4:30am to 5am) does not fit the objective's time window and length"
    ]
    assert unmet_objective(GOAL, *CREATE, SAVED, last_page=right) == []
    # An unfinished form is read on the final page: progress for the planner and the progress reward. Of the
    # name typed, Create (named by the objective) clicked and the time, the right form before Create meets two.
    assert objective_progress(GOAL, CREATE[0][:1], CREATE[1][:1], right) == pytest.approx(2 / 3)
    assert objective_progress(GOAL, CREATE[0][:1], CREATE[1][:1], wrong) == pytest.approx(1 / 3)
    # An objective that names no window or length makes no time requirement, whatever the page shows.
    assert time_range_requirement("Type Gym.", [wrong]) is None
    assert objective_requirements("Type Gym.", [], [], wrong) == []


def test_the_last_acted_page_skips_a_closing_stop():
    pages = [Step("u", "form", "click [148]"), Step("u", "saved", "stop [done]"), Step("u", "saved", "")]
    assert last_acted_page(pages) == "form" and last_acted_page(pages[:1]) == "form" and last_acted_page([]) == ""


def test_on_every_shipped_real_daily_calendar_trajectory_the_rule_withholds_the_failures_and_no_success():
    paths = [f"dynaweb_env/data/miniwob-all/{split}" for split in ("train", "validation", "test")]
    said_success = JudgeVerdict(1.0, "the event was created")
    outcomes = {1.0: [], 0.0: []}
    for trajectory in (t for path in paths for t in read_trajectories(path) if t.task_id == "miniwob.daily-calendar"):
        request, reward, _ = judge_cases([trajectory])[0]  # as recorded, as the judge reads it
        outcomes[reward].append(check_objective(request, said_success).reward)
    assert len(outcomes[1.0]) >= 5 and len(outcomes[0.0]) >= 5
    assert outcomes[1.0] == [1.0] * len(outcomes[1.0])  # no real success withheld
    assert outcomes[0.0] == [0.0] * len(outcomes[0.0])  # every real failure withheld


class _SavesTheEvent:
    """World model: the saved calendar (``SAVED``) whatever the action. Judge: SUCCESS to everything."""

    def generate(self, conversations, params):
        return [
            Generation("VERDICT: SUCCESS")
            if "VERDICT" in conversation[0]["content"]
            else Generation(f"[Web state changes]\nthe event is saved\n[Next page accessibility tree]\n{SAVED}")
            for conversation in conversations
        ]


@pytest.mark.parametrize(("start", "end", "paid"), [("4:30am", "5am", 0.0), ("4pm", "5pm", 1.0)])
def test_a_dream_that_creates_the_event_is_paid_only_for_the_objective_s_time(tmp_path, start, end, paid):
    form = FORM.format(start=start, end=end)
    steps = [
        Step("miniwob:///daily-calendar.html", form, "click [148]"),
        Step("miniwob:///daily-calendar.html", SAVED, ""),
    ]
    write_trajectories(
        tmp_path / "s.jsonl", [Trajectory("t", "miniwob.daily-calendar", GOAL, "expert", steps, True, 1.0)]
    )
    backend = _SavesTheEvent()
    env = DreamWebEnv(world_model=backend, judge=backend, start_states=str(tmp_path / "s.jsonl"), dream_length=3)
    env.reset(seed=0)
    env.step("click [148]")
    _, reward, terminated, _, info = env.step("stop [done]")  # a closing stop: the form is still what is checked
    assert terminated and info["judged"] and reward == paid
    assert bool(info.get("objective_unmet")) == (paid == 0.0)
