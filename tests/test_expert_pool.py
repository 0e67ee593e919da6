"""The expert-interleaving pool's default: the experts of the run's own start states, so every task has some."""

from __future__ import annotations

from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES
from dynaweb_env.data.start_states import load_start_states
from dynaweb_trainer.expert_pool import ExpertPool, load_expert_trajectories


def test_the_default_pool_has_experts_for_every_default_start_state_task():
    """`dynaweb-train --env dream --expert-frac 0.5` with no flags: no task a group draws lacks an expert."""
    pool = ExpertPool(load_expert_trajectories(None), max_turns=5)
    start_tasks = {state.task_id for state in load_start_states(None, include_intermediate=False)}
    assert len(start_tasks) == 24
    assert start_tasks <= set(pool.by_task)
    assert all(trajectory.metadata.get("split") == "train" for items in pool.by_task.values() for trajectory in items)


def test_the_pool_follows_the_start_states_unless_a_file_is_given(tmp_path):
    small = str(EXPERT_TRAJECTORIES)
    from_start_states = ExpertPool(load_expert_trajectories(None, start_states=small), max_turns=5)
    assert set(from_start_states.by_task) == {state.task_id for state in load_start_states(small, False)}
    assert len(from_start_states.by_task) == 9

    one_task = tmp_path / "experts.jsonl"
    lines = [line for line in EXPERT_TRAJECTORIES.read_text().splitlines() if '"miniwob.click-tab"' in line]
    one_task.write_text("\n".join(lines) + "\n")
    explicit = ExpertPool(load_expert_trajectories(str(one_task), start_states=small), max_turns=5)
    assert set(explicit.by_task) == {"miniwob.click-tab"}
