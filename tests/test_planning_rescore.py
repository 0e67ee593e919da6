"""`benchmarks.planning_rescore`: recorded plans re-scored under another rule, without dreaming again."""

from __future__ import annotations

import json

from benchmarks import planning_rescore


def _candidate(action: str, own: bool, probability: float, ended: bool, progress: float | None) -> dict:
    return {
        "action": action, "own": own, "dream": [action], "success_probability": probability, "verdict": None,
        "ended": ended, "end_reason": "stop" if ended else "", "leaves_site": False, "error": "", "final_url": "",
        "steps": 1, "progress": progress,
    }  # fmt: skip


def _run(success: bool, chosen: str, candidates: list[dict]) -> dict:
    plan = {"task": "miniwob.login-user", "task_seed": 144, "turn": 1, "chosen": chosen, "candidates": candidates}
    episode = {"task_id": "miniwob.login-user", "task_seed": 144, "success": success, "plans": [plan]}
    return {"summary": {"success_rate": float(success)}, "episodes": [episode]}


def test_the_cap_demotes_an_ended_dream_that_missed_a_requirement(tmp_path):
    # login-user 144 at d=2 (docs/planning.md): the wrong case typed and submitted outscored the right one.
    wrong = _candidate("type [19] [dapg] [0]", False, 0.973, True, 2 / 3)
    right = _candidate("type [19] [DApg] [0]", True, 0.969, True, 1.0)
    runs = tmp_path / "runs" / "sft"
    runs.mkdir(parents=True)
    (runs / "K2-d2-seed0.json").write_text(json.dumps(_run(False, wrong["action"], [right, wrong])))
    unlikely = {**wrong, "success_probability": 0.1}
    (runs / "K2-d2-seed1.json").write_text(json.dumps(_run(True, right["action"], [right, unlikely])))
    (runs / "K0-d0-seed0.json").write_text(json.dumps(_run(True, right["action"], [])))  # no planning: skipped

    result = planning_rescore.main(["--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "out.json")])

    totals = result["totals"]
    assert totals["runs"] == 2 and totals["planned_steps"] == 2 and totals["shipped_rule_mismatches"] == 0
    cap = totals["ended_progress_cap"]
    assert cap["changed_steps"] == 1 and cap["may_gain_episodes"] == 1 and cap["may_lose_episodes"] == 0
    changed = result["by_run"]["sft/K2-d2-seed0.json"]["rules"]["ended_progress_cap"]["changed_steps"]
    page = "miniwob.login-user 144 turn 1"
    assert changed == [{"page": page, "from": wrong["action"], "to": right["action"], "episode_success": False}]
    arm = result["by_arm"]["sft/K2-d2"]
    assert arm["spread"] > 0 and arm["ended_progress_cap"]["mean_gain_at_most"] == 0.5
    assert cap["arms_whose_bound_reaches_the_spread"] == []  # 0.5 < the spread of 0 and 1 (0.707)
    # An unfinished dream is never capped: the shipped progress floor lifts it instead.
    assert planning_rescore.ended_progress_cap(planning_rescore.outcome_of({**wrong, "ended": False})) == 0.973


def test_a_record_the_shipped_rule_does_not_reproduce_is_counted(tmp_path):
    low, high = _candidate("click [1]", True, 0.1, True, None), _candidate("click [2]", False, 0.9, True, None)
    runs = tmp_path / "runs" / "p"
    runs.mkdir(parents=True)
    (runs / "K2-d1-seed0.json").write_text(json.dumps(_run(True, low["action"], [low, high])))
    result = planning_rescore.main(["--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "out.json")])
    assert result["totals"]["shipped_rule_mismatches"] == 1
