"""dynaweb-build-data: every expert task, expert + exploration, split by task seed, resumable, checksummed."""

from __future__ import annotations

import json

import pytest

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import split_of
from dynaweb_trainer.build_data import MANIFEST_FILE, main, parse_seeds, split_of_seed, verify
from dynaweb_trainer.collect import expert_tasks


def test_seeds_split_three_ways_and_agree_with_collect_on_test():
    assert [split_of_seed(seed) for seed in range(10)] == ["train"] * 3 + ["validation", "test"] + ["train"] * 3 + [
        "validation",
        "test",
    ]
    assert all((split_of_seed(seed) == "test") == (split_of(seed) == "test") for seed in range(100))
    assert parse_seeds("0-3,7") == [0, 1, 2, 3, 7]
    for bad in ("a-3", "1-", "1,1", ""):
        with pytest.raises(ValueError, match="seed"):
            parse_seeds(bad)


def test_every_expert_task_is_collected_by_default_multistep_included():
    tasks = expert_tasks()
    assert len(tasks) >= 24 and "miniwob.login-user" in tasks


def test_bad_arguments_and_a_missing_manifest(tmp_path, capsys):
    assert main(["--output-dir", str(tmp_path), "--tasks", "miniwob.no-such-task"]) == 2
    assert "no scripted expert" in capsys.readouterr().err
    assert main(["--output-dir", str(tmp_path), "--seeds", "x"]) == 2
    assert main(["--verify", str(tmp_path)]) == 1 and verify(tmp_path) == [f"no {MANIFEST_FILE} in {tmp_path}"]


@pytest.mark.slow
def test_tiny_real_build_splits_resumes_and_verifies(tmp_path, require_browser):
    out = tmp_path / "data"
    command = ["--output-dir", str(out), "--tasks", "miniwob.click-button", "miniwob.login-user", "--seeds", "0,4"]
    command += ["--epsilons", "0.5", "--num-envs", "2", "--tokenizer", "tiny-random"]
    assert main(command) == 0
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert sorted(manifest["files"]) == [
        "test/expert.jsonl",
        "test/explore-e0.5-s0.jsonl",
        "train/expert.jsonl",
        "train/explore-e0.5-s0.jsonl",
    ]
    for name, entry in manifest["files"].items():
        split = name.split("/")[0]
        trajectories = read_trajectories(out / name, on_error="raise")
        assert len(trajectories) == entry["records"] == 2  # 2 tasks x the split's 1 seed
        assert {t.metadata["split"] for t in trajectories} == {split}
        assert {t.metadata["seed"] for t in trajectories} == {0 if split == "train" else 4}
        if name.endswith("expert.jsonl"):
            assert all(t.success for t in trajectories) and entry["successes"] == 2
    assert manifest["totals"]["records"] == 8 and manifest["totals"]["transitions"] >= 8
    # Actions per episode, per task and policy, over both splits: click-button's expert clicks once, then stops.
    expert_counts = manifest["per_task"]["miniwob.click-button"]["expert"]
    assert expert_counts == {"episodes": 2, "successes": 2, "median_actions": 1, "max_actions": 1}
    assert manifest["per_task"]["miniwob.login-user"]["expert"]["median_actions"] == 3
    assert set(manifest["per_task"]["miniwob.login-user"]) == {"expert", "explore-e0.5-s0"}
    assert verify(out) == []
    # Re-running collects nothing new: the files, and so their checksums, stay as they were.
    assert main(command) == 0
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] == manifest["files"]
    # A changed file is caught.
    with (out / "test/expert.jsonl").open("a") as handle:
        handle.write((out / "test/expert.jsonl").read_text().splitlines()[0] + "\n")
    assert any("test/expert.jsonl: sha256" in problem for problem in verify(out))
    assert main(["--verify", str(out)]) == 1


def test_the_shipped_all_tasks_dataset_matches_its_manifest_and_covers_every_expert_task():
    """``dynaweb_env/data/miniwob-all``: each xz file decompresses to the checksum and counts of the manifest, every
    task with a scripted expert is in it, and the experts' episodes all succeed."""
    import hashlib
    import lzma

    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_env.data.tasks import LONG_TASKS

    manifest = json.loads((ALL_TASKS_DATA_DIR / MANIFEST_FILE).read_text())
    for name, recorded in manifest["files"].items():
        raw = lzma.decompress((ALL_TASKS_DATA_DIR / f"{name}.xz").read_bytes())
        assert hashlib.sha256(raw).hexdigest() == recorded["sha256"], name
        trajectories = read_trajectories(ALL_TASKS_DATA_DIR / f"{name}.xz", on_error="raise")
        assert len(trajectories) == recorded["records"] and {t.metadata["split"] for t in trajectories} == {
            name.split("/")[0]
        }
    assert set(manifest["per_task"]) == set(manifest["tasks"]) == set(expert_tasks())
    for task, counts in manifest["per_task"].items():
        assert counts["expert"]["successes"] == counts["expert"]["episodes"] == 10, task
    assert all(manifest["per_task"][task]["expert"]["max_actions"] >= 5 for task in LONG_TASKS)
