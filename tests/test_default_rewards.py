"""``benchmarks/default_rewards.py``: the wrong-action rule, a smoke run, and the default dream's rewards agreeing
with the real outcomes on a subset of tasks."""

from __future__ import annotations

import json

import pytest

from benchmarks import default_rewards
from benchmarks.default_rewards import STOP, held_out_starts, wrong_action

TINY = {"world_model": "tiny-random", "judge": "world_model", "max_new_tokens": 8, "judge_max_new_tokens": 4}


def test_held_out_starts_and_the_wrong_action_rule():
    starts = dict((start.task_id, (start, expert)) for start, expert in held_out_starts())
    assert len(starts) == 24 and {start.task_seed for start, _ in starts.values()} == {4}
    start, expert = starts["miniwob.click-test-2"]
    assert expert == ["click [13]"] and wrong_action(start.axtree, expert) == "click [14]"  # the other button
    start, expert = starts["miniwob.enter-text"]
    assert wrong_action(start.axtree, expert) == expert[-1]  # every element is the expert's: Submit first
    start, expert = starts["miniwob.focus-text"]
    assert wrong_action(start.axtree, expert) == STOP  # the page's only element is the expert's: nothing done
    with pytest.raises(ValueError, match="no held-out recording"):
        held_out_starts(["miniwob.no-such-task"])


@pytest.mark.browser
def test_smoke_run_writes_its_report(tmp_path, require_browser):
    output = tmp_path / "report.json"
    argv = ["--tasks", "miniwob.click-test-2", "--env-kwargs", json.dumps(TINY), "--output", str(output)]
    assert default_rewards.main(argv) == 0
    report = json.loads(output.read_text())
    assert report["overall"]["episodes"] == 2 and report["real_starts_reproduced"] == 2
    expert, wrong = report["episodes"]
    assert (expert["kind"], expert["real_reward"], wrong["kind"], wrong["real_reward"]) == ("expert", 1.0, "wrong", 0.0)
    assert wrong["actions"] == ["click [14]"]  # the wrong button ends the real task
    assert wrong["dream_actions"][0] == "click [14]" and not expert["judged"]  # the random judge gives no verdict
    assert report["overall"]["judge_errors"] == 2 and expert["attribution"] == "no_verdict"


@pytest.mark.slow
@pytest.mark.browser
def test_default_dream_rewards_agree_with_the_real_outcomes_on_a_subset(tmp_path, require_browser):
    """The default DreamWeb-v0 (trained judge, objective check) on three tasks: the expert's episode and a wrong action.

    On the full run (``benchmarks/results/default_rewards/default_rewards.json``) both episodes of each of these
    tasks agreed with the real outcome. Without the objective check the two form tasks' wrong Submits were paid,
    without its named-control rule click-button-sequence's TWO clicked alone, without its position rule
    focus-text-2's first textbox for "the 2nd", and without its row rule email-inbox-important's search icon for
    Zabrina's star; without the judge's recorded threshold social-media's Block was refused."""
    output = tmp_path / "report.json"
    tasks = ["miniwob.click-test-2", "miniwob.enter-text", "miniwob.click-checkboxes", "miniwob.click-button-sequence",
             "miniwob.focus-text-2", "miniwob.email-inbox-important", "miniwob.social-media"]  # fmt: skip
    assert default_rewards.main(["--tasks", *tasks, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["overall"]["episodes"] == 14 and report["overall"]["judge_errors"] == 0
    assert report["wrong"]["agreement"] == 1.0 and report["overall"]["agreement"] >= 13 / 14
