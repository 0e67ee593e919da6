"""Tests of the judge's dreamed data (`dynaweb-dream-judge-data`): final pages dreamed by a real (tiny) world
model with real labels, and policy dreams relabelled by their real replays."""

from __future__ import annotations

import json

from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.world_model.judge_cases import judge_cases
from dynaweb_trainer.dreamed_judge_data import (
    FINAL_PAGE,
    POLICY_DREAM,
    final_page_cases,
    main,
    replayed_policy_dreams,
)

FORM = "RootWebArea 'Login', focused\n\t[3] textbox 'Username'\n\t[4] button 'Log in'"
TYPED = "RootWebArea 'Login', focused\n\t[3] textbox 'Username' value='bob', focused\n\t[4] button 'Log in'"
GREYED = "RootWebArea 'Login'\n\t[3] textbox 'Username' value='bob', disabled=True\n\t[4] button 'Log in'"


def login(name: str, success: bool = True, actions: int = 2) -> Trajectory:
    steps = [Step("http://site/login", FORM, "type [3] [bob] [0]"), Step("http://site/login", TYPED, "click [4]")]
    steps = steps[:actions] + [Step("http://site/home", "RootWebArea 'Welcome'")]
    metadata = {"split": "train"}
    return Trajectory(name, "site.login", "Log in as bob.", "expert", steps, success, float(success), metadata)


def test_final_page_cases_are_the_judges_cases_that_end_on_an_action():
    trajectories = [login("s"), login("f", False), login("one", actions=1)]
    cases = [(t.id, kept, reward) for t, kept, reward in final_page_cases(trajectories)]
    # A success as recorded and cut before its last action; a failure as recorded; a one-action cut would end on
    # the real start page, which there is nothing to dream about.
    assert cases == [("s", 2, 1.0), ("s", 1, 0.0), ("f", 2, 0.0), ("one", 1, 1.0)]


def test_dream_final_pages_with_a_real_world_model_labels_and_resumes(tmp_path):
    data, out = tmp_path / "real.jsonl", tmp_path / "dreamed.jsonl"
    write_trajectories(data, [login("s"), login("f", False)])
    args = ["--dataset_path", str(data), "--world_model", "tiny-random", "--output", str(out), "--batch_size", "2"]
    args += ["--max_new_tokens", "16"]  # a random model's page is noise at any length
    summary = main(args)
    assert summary["cases"] == summary["dreamed"] == 3 and summary["done_before"] == 0
    records = {record.id: record for record in read_trajectories([out])}
    assert set(records) == {"s/dreamed-final-2", "s/dreamed-final-1", "f/dreamed-final-2"}
    cut = records["s/dreamed-final-1"]
    # The real page and action it was taken on, then the page the world model drew; the label is the real one.
    assert cut.source == "dream" and not cut.success and cut.actions == ["type [3] [bob] [0]"]
    assert cut.steps[0].axtree == FORM and cut.steps[-1].action == ""
    assert cut.metadata["dreamed"] == FINAL_PAGE and cut.metadata["split"] == "train"
    assert records["s/dreamed-final-2"].success and not records["f/dreamed-final-2"].success
    # Interrupted or not, a rerun dreams only what is missing.
    assert main(args)["dreamed"] == 0 and len(read_trajectories([out])) == 3


def test_dreamed_records_teach_the_judge_and_never_the_world_model(tmp_path):
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model
    from dynaweb_trainer.world_model_data import build_world_model_dataset
    from dynaweb_trainer.world_model_sft import WorldModelSFTConfig

    real = login("s")
    dreamed = Trajectory("d", real.task_id, real.goal, "dream", [real.steps[0], Step("http://site/login", GREYED)])
    config = WorldModelSFTConfig(output_dir=str(tmp_path), model_name_or_path="tiny-random", examples="both")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random"))
    stats = build_world_model_dataset(tokenizer, [real, dreamed], config).stats
    assert stats["transitions"] == 2 and stats["dreamed_trajectories_not_transitions"] == 1
    assert stats["judge_examples"] == len(judge_cases([real, dreamed], every_prefix=True)) == 4


def _episode(actions: list[str], step: int) -> dict:
    pages = [FORM, TYPED, GREYED, GREYED][: len(actions) + 1]
    steps = [
        {"url": "http://site/login", "axtree": page, "action": action}
        for page, action in zip(pages, [*actions, ""], strict=True)
    ]
    start = {"task_id": "site.login", "task_seed": 7, "trajectory_id": "site.login/seed-7/expert"}
    return {
        "id": "step-0/call-0/slot-0", "task_id": "site.login", "goal": "Log in as bob.", "source": "dream",
        "steps": steps, "success": True, "reward": 1.0,
        "metadata": {"global_step": step, "options": {"start_state": start}},
    }  # fmt: skip


def test_replayed_policy_dreams_carry_the_real_outcome(tmp_path):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    acts = ["type [3] [bob] [0]", "click [4]", "click [4]"]
    episodes = [_episode(acts[:n], step) for n, step in ((2, 0), (3, 1), (2, 2))]
    (run / "episodes.jsonl").write_text("".join(json.dumps(episode) + "\n" for episode in episodes))

    def dream(step, real_reward, real_actions, **extra):
        return {
            "run": "runs/r", "id": "step-0/call-0/slot-0", "global_step": step, "dream_reward": 1.0,
            "real_reward": real_reward, "real_actions": real_actions, "dream_actions": acts[: 3 if step == 1 else 2],
            "replayed": True, "start_reproduced": True, **extra,
        }  # fmt: skip

    report = {
        "dreams": [
            dream(0, 0.0, acts[:2]),  # judged SUCCESS, really a failure: the record says failure
            dream(1, 1.0, acts[:2]),  # the real task ended at the second action: the dream is kept up to it
            dream(2, 0.0, [], replayed=False),  # never replayed: no label, left out
        ]
    }
    records, left_out = replayed_policy_dreams(report, tmp_path)
    assert left_out == 1 and [r.success for r in records] == [False, True]
    failure, ended_early = records
    assert failure.actions == acts[:2] and failure.steps[-1].axtree == GREYED and failure.source == "dream"
    assert ended_early.actions == acts[:2] and ended_early.steps[-1].axtree == GREYED
    assert failure.metadata["dreamed"] == POLICY_DREAM and failure.metadata["split"] == "train"  # seed 7 -> train


def test_a_dream_that_starts_mid_way_keeps_its_recorded_history(tmp_path):
    """The judge reads the actions before a dream's start page (DreamWebEnv.judge_request): so do the records."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    episode = _episode(["click [4]"], 0)
    episode["steps"][0]["axtree"] = TYPED
    episode["metadata"]["options"]["start_state"].update(step_index=1, history=["type [3] [bob] [0]"])
    (run / "episodes.jsonl").write_text(json.dumps(episode) + "\n")
    dream = {
        "run": "runs/r", "id": "step-0/call-0/slot-0", "global_step": 0, "dream_reward": 1.0, "real_reward": 1.0,
        "dream_actions": ["click [4]"], "real_actions": ["click [4]"], "replayed": True, "start_reproduced": True,
    }  # fmt: skip
    source = login("site.login/seed-7/expert")
    (record,), left_out = replayed_policy_dreams({"dreams": [dream]}, tmp_path, [source])
    assert left_out == 0 and record.actions == ["type [3] [bob] [0]", "click [4]"]
    assert record.steps[0].axtree == FORM  # the history's real page
    # Without the start trajectory the history's pages are unknown: left out, not judged without them.
    assert replayed_policy_dreams({"dreams": [dream]}, tmp_path) == ([], 1)
