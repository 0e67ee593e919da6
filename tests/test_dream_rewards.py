"""benchmarks/dream_rewards.py: a dream's actions replayed on the real page give the reward it should have had."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

from dynaweb_env.data.io import iter_trajectories, write_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.start_states import builtin_start_states_path, load_start_states


def dream_from_demonstration(reward: float, actions: list[str] | None = None) -> Trajectory:
    """A dream record as the episode log writes it: an intermediate start state of a shipped
    click-checkboxes demonstration (the one box to tick already ticked), then the expert's own
    remaining actions (or ``actions``), judged ``reward``."""
    state = next(s for s in load_start_states(None) if s.step_index == 1 and s.task_id == "miniwob.click-checkboxes")
    demo = next(t for t in iter_trajectories(builtin_start_states_path()) if t.id == state.trajectory_id)
    steps = demo.steps[1:]
    if actions is not None:  # only the first page and the actions matter to a replay
        steps = [dataclasses.replace(steps[0], action=action) for action in actions] + [steps[-1]]
    start = {key: value for key, value in state.to_dict().items() if key != "axtree"}
    metadata = {"global_step": 0, "options": {"start_state": start}, "judge_reasoning": "r"}
    return Trajectory("step-0/call-0/slot-0", demo.task_id, demo.goal, "dream", steps, reward >= 1, reward, metadata)


def test_compare_counts_the_judge_against_the_real_outcome():
    bench = load_benchmark("dream_rewards")
    rows = [
        {"replayed": True, "start_reproduced": True, "dream_reward": 1.0, "real_reward": 1.0},
        {"replayed": True, "start_reproduced": True, "dream_reward": 1.0, "real_reward": 0.0},
        {"replayed": True, "start_reproduced": False, "dream_reward": 0.0, "real_reward": 1.0},
        {"replayed": True, "start_reproduced": True, "dream_reward": 0.0, "real_reward": 0.0},
        {"replayed": False, "dream_reward": 1.0},  # not rebuilt: counted apart, not compared
    ]
    summary = bench.compare(rows)
    counted = [summary[key] for key in ("dreams", "compared", "not_replayed", "start_reproduced")]
    assert counted == [5, 4, 1, 3]
    assert summary["agreement"] == 0.5
    assert summary["judge_success_precision"] == 0.5 and summary["real_success_recall"] == 0.5
    assert bench.compare([])["agreement"] is None


def test_replaying_dreams_on_real_pages(tmp_path, require_browser):
    bench = load_benchmark("dream_rewards")
    log = tmp_path / "run" / "episodes.jsonl"
    # The expert's own continuation succeeds for real: judged 0, the judge was wrong. Ticking the two
    # other boxes too makes it fail (MiniWoB++ scores this task by the majority of boxes right, and
    # BrowserGym counts a positive score as success): judged 1, wrong again.
    wrong = ["click [18]", "click [24]", "click [27]"]
    write_trajectories(log, [dream_from_demonstration(0.0), dream_from_demonstration(1.0, actions=wrong)])
    output = tmp_path / "dream_rewards.json"
    assert bench.main(["--episodes", str(log), "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["overall"]["compared"] == 2 and report["overall"]["start_reproduced"] == 2
    assert [row["real_reward"] for row in report["dreams"]] == [1.0, 0.0]
    assert report["overall"]["agreement"] == 0.0
    assert report["overall"]["counts"]["judged_failure_real_success"] == 1
    assert bench.main(["--episodes", str(tmp_path / "missing.jsonl"), "--output", str(output)]) == 2

    # --resume: the replays already in the report are kept (marked here to tell them apart), new dreams replayed.
    for row in report["dreams"]:
        row["marker"] = "replayed before"
    output.write_text(json.dumps(report))
    other = tmp_path / "other" / "episodes.jsonl"
    write_trajectories(other, [dream_from_demonstration(1.0)])
    assert bench.main(["--episodes", str(log), str(other), "--output", str(output), "--resume"]) == 0
    resumed = json.loads(output.read_text())
    assert [row.get("marker") for row in resumed["dreams"]] == ["replayed before", "replayed before", None]
    assert resumed["overall"]["compared"] == 3 and resumed["dreams"][2]["real_reward"] == 1.0


def test_guard_settings_parse_and_are_summarised_against_the_real_reward():
    bench = load_benchmark("dream_rewards")
    guards = bench.parse_guards(["none", '{"judge_votes": 3}', '{"gate_termination": true}'])
    assert list(guards) == ["none", '{"judge_votes":3}', '{"gate_termination":true}']
    with pytest.raises(ValueError, match="unknown reward_guards"):
        bench.parse_guards(['{"votes": 3}'])
    real = {"replayed": True, "start_reproduced": True}
    rows = [
        real | {"real_reward": 1.0, "guards": {"g": {"reward": 0.0, "end_reason": "stop", "judge_abstained": True}}},
        real | {"real_reward": 0.0, "guards": {"g": {"reward": 0.0, "end_reason": "uncertain"}}},
        real | {"real_reward": 1.0, "guards": {"g": {"reward": 1.0, "end_reason": "x", "termination_gated": True}}},
    ]
    summary = bench.guard_summary(rows, "g")
    assert summary["compared"] == 3 and summary["agreement"] == 2 / 3
    assert (summary["abstained"], summary["cut_uncertain"], summary["gated"]) == (1, 1, 1)


def test_demonstration_dreams_pair_a_success_with_its_unfinished_cut():
    bench = load_benchmark("dream_rewards")
    dreams = bench.demonstration_dreams(2)
    assert len(dreams) == 4 and [d.metadata["demonstration"] for d in dreams] == ["full", "cut"] * 2
    for full, cut in zip(dreams[::2], dreams[1::2], strict=True):
        assert len(cut.actions) == len(full.actions) - 1 >= 1
        assert full.metadata["options"]["start_state"]["task_seed"] % 5 == 4  # held-out seeds only


def test_demonstration_prefixes_are_real_failures_of_graded_length_and_ordered_by_progress():
    bench = load_benchmark("dream_rewards")
    long = Path(__file__).resolve().parents[1] / "dynaweb_env" / "data" / "miniwob-all" / "test" / "expert.jsonl.xz"
    dreams = bench.demonstration_dreams(1, long, prefixes=3, tasks=["miniwob.number-checkboxes"])
    assert [(d.metadata["demonstration"], len(d.actions)) for d in dreams] == [
        ("full", 14), ("cut", 13), ("cut5", 5), ("cut10", 10)
    ]  # fmt: skip
    assert bench.demonstration_dreams(1, long, tasks=["miniwob.number-checkboxes"])[1].id.endswith("/cut")
    rows = [
        {"group": "g", "real_reward": 1.0, "real_progress": 1.0, "r": 1.0},
        {"group": "g", "real_reward": 0.0, "real_progress": 0.8, "r": 0.3},
        {"group": "g", "real_reward": 0.0, "real_progress": 0.4, "r": 0.1},
        {"group": "g", "real_reward": 0.0, "real_progress": 0.2, "r": 0.1},
        {"group": "h", "real_reward": 0.0, "real_progress": 0.9, "r": 0.0},  # alone in its group: no pair
        {"group": "g", "real_reward": 0.0, "real_progress": None, "r": 0.5},  # no explicit requirement: left out
    ]
    ordered = load_benchmark("dream_rewards_guards").progress_ordering(rows, "r")
    assert (ordered["progress_pairs"], ordered["progress_ordered_right"], ordered["progress_tied"]) == (3, 2, 1)
    assert ordered["progress_ordering_accuracy"] == 2 / 3


@pytest.mark.slow
def test_redreaming_demonstrations_with_guards_on_real_pages_and_models(tmp_path, require_browser):
    bench = load_benchmark("dream_rewards")
    output = tmp_path / "guards.json"
    assert bench.main(["--demonstrations", "1", "--guards", "none", '{"judge_votes": 2}', "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert [row["real_reward"] for row in report["dreams"]] == [1.0, 0.0]  # the expert's actions, then cut short
    assert report["overall"]["compared"] == 0  # demonstrations have no recorded dream reward
    for name in ("none", '{"judge_votes":2}'):
        assert report["guards"][name]["compared"] == 2
    votes = [row["guards"]['{"judge_votes":2}'] for row in report["dreams"]]
    assert all(outcome["reward"] in (0.0, 1.0) and "judge_abstained" in outcome for outcome in votes)


def test_redreams_batch_every_dream_and_judge_only_guards_rejudge_the_same_pages():
    """Re-dreaming with a scripted world model and judge (no browser): one model call per step for all dreams,
    judge-only settings judge the unguarded run's pages again, group judging scores each demonstration's pair."""
    from test_group_judging import GroupBackend

    bench = load_benchmark("dream_rewards")
    dreams = bench.demonstration_dreams(2)
    dreams = [
        dataclasses.replace(d, metadata={**d.metadata, "group": f"g{i // 2}"}) for i, d in enumerate(dreams)
    ]  # fmt: skip
    backend = GroupBackend(("SUCCESS",), group_text="ATTEMPT 1: SCORE 0.9\nATTEMPT 2: SCORE 0.2")
    models = {"world_model": backend, "judge": backend}
    base: list = []
    # The scripted world model never types the demonstrations' text: the objective check (on by default) is off here.
    plain = bench.redream_all(dreams, {"objective_check": False}, models, seed=0, keep=base)
    steps = max(len([s for s in d.steps if s.action]) for d in dreams)
    world_model_calls = [size for kind, size in backend.calls if kind == "wm"]
    assert len(world_model_calls) <= steps and world_model_calls[0] == 4  # all four dreams in one call
    assert [outcome["reward"] for outcome in plain] == [1.0] * 4 and len(base) == 4
    backend.calls.clear()
    listwise = bench.rejudge_all(dreams, base, {"group_judging": "listwise", "objective_check": False}, models, seed=0)
    assert backend.calls == [("group", 2)]  # one prompt per pair, one call, no world model
    assert [outcome["reward"] for outcome in listwise] == [0.9, 0.2, 0.9, 0.2]
    assert [outcome["group_rank"] for outcome in listwise] == [1, 2, 1, 2]
    rows = [
        {"replayed": True, "start_reproduced": True, "real_reward": float(d.metadata["demonstration"] == "full"),
         "group": d.metadata["group"], "guards": {"listwise": listwise[i], "none": plain[i]}}
        for i, d in enumerate(dreams)
    ]  # fmt: skip
    ranked, flat = bench.guard_summary(rows, "listwise"), bench.guard_summary(rows, "none")
    assert (ranked["pairs"], ranked["ordering_accuracy"], ranked["agreement"]) == (2, 1.0, 1.0)
    assert (flat["ordering_accuracy"], flat["tied"], flat["reward_gap"]) == (0.0, 2, 0.0)
    assert ranked["reward_gap"] == pytest.approx(0.7)


def test_uncertainty_modes_are_read_exactly_from_one_discounted_redream():
    bench = load_benchmark("dream_rewards")
    real = {"replayed": True, "start_reproduced": True}
    outcomes = [
        ({"judge_reward": 1.0, "world_model_uncertain_steps": 1}, 1.0, "a"),  # a success, uncertain once
        ({"judge_reward": 1.0}, 0.0, "a"),  # a failure judged SUCCESS, certain
        ({"judge_reward": 0.0, "world_model_uncertain_steps": 2}, 0.0, "b"),
    ]
    rows = [real | {"real_reward": r, "group": g, "guards": {"w": {"end_reason": "stop", **o}}} for o, r, g in outcomes]
    modes = bench.uncertainty_modes(rows, "w", 0.5)
    assert modes["cut"] == modes["no_reward"] and modes["cut"]["agreement"] == 1 / 3
    assert modes["discount"]["agreement"] == 2 / 3 and modes["discount"]["ordering_accuracy"] == 0.0
    assert modes["discount"]["mean_reward_real_success"] == 0.5
