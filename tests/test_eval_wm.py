"""dynaweb-eval-wm: fidelity metrics, judge cases and the side-by-side run (tiny models only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES as BUILTIN_TRAJECTORIES
from dynaweb_env.data.shipped import EXPLORATION_TRAJECTORIES as BUILTIN_EXPLORATION
from dynaweb_env.world_model.judge_cases import judge_cases
from dynaweb_trainer.evaluate_world_model import main, parse_args, per_task_sample, summarise, tree_scores
from dynaweb_trainer.world_model_sft import load_trajectories

TREE = "RootWebArea 'x'\n\t[1] button 'a'\n\t[2] button 'b'"


def test_tree_scores_are_multiset_precision_recall():
    assert tree_scores(TREE, TREE) == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "exact": 1.0}
    scores = tree_scores("RootWebArea 'x'\n   [1]   button 'a'", TREE)  # whitespace-normalised
    assert scores["precision"] == 1.0 and scores["recall"] == pytest.approx(2 / 3) and scores["exact"] == 0.0
    assert tree_scores("[9] link 'z'", TREE)["f1"] == 0.0


def test_strict_f1_scores_invalid_outputs_zero():
    records = [
        {"valid": True, "f1": 0.8, "precision": 0.8, "recall": 0.8, "exact": 0.0},
        {"valid": False, "f1": 0.6, "precision": 0.6, "recall": 0.6, "exact": 0.0},  # a fallback to the page
    ]
    extra = {"url_correct": True, "terminal_correct": True, "tokens": 10, "seconds": 1.0}
    summary = summarise([r | extra for r in records], {1: records}, None)
    assert summary["f1"] == pytest.approx(0.7) and summary["strict_f1"] == pytest.approx(0.4)
    assert summary["valid"] == 0.5 and summary["drift"]["1"]["strict_f1"] == pytest.approx(0.4)


def test_judge_cases_pair_each_success_with_a_truncated_failure():
    trajectories = load_trajectories([BUILTIN_TRAJECTORIES], "test")  # experts: all successes
    cases = judge_cases(trajectories)
    assert len(cases) == 2 * len(trajectories) and all(t.success for t in trajectories)
    for (request, reward, name), trajectory in zip(cases[::2], trajectories, strict=True):
        cut_request, cut_reward, cut_name = cases[trajectories.index(trajectory) * 2 + 1]
        assert reward == 1.0 and cut_reward == 0.0 and cut_name == f"{name}/cut"
        assert len(cut_request.steps) == len(request.steps) - 1
        assert request.final_axtree == trajectory.steps[-1].axtree
        # The cut trajectory ends on the page its missing last action was taken on.
        last_acted = max(i for i, step in enumerate(trajectory.steps) if step.action.strip())
        assert cut_request.final_axtree == trajectory.steps[last_acted].axtree


def test_real_failures_are_judged_as_recorded():
    trajectories = load_trajectories([BUILTIN_EXPLORATION], "test")
    failures = [t for t in trajectories if not t.success]
    assert failures  # the shipped exploration data holds real failures
    cases = {name: reward for _, reward, name in judge_cases(trajectories)}
    assert len(cases) == len(trajectories) + sum(t.success for t in trajectories)
    assert all(cases[t.id] == 0.0 and f"{t.id}/cut" not in cases for t in failures)


def test_per_task_sample_keeps_every_task_and_policy():
    from dynaweb_env.data.schema import Step, Trajectory

    def record(name, task, policy):
        return Trajectory(name, task, "g", "expert", [Step("u", TREE, "")], True, 1.0, {"policy": policy})

    records = [record(f"{t}-{p}-{i}", t, p) for t in ("a", "b") for p in ("expert", "explore") for i in range(3)]
    sample = per_task_sample(records, 2)
    assert [r.id for r in sample] == [
        "a-expert-0", "a-expert-1", "a-explore-0", "a-explore-1", "b-expert-0", "b-expert-1", "b-explore-0",
        "b-explore-1",
    ]  # fmt: skip
    assert per_task_sample(records, 0) == records


def test_bad_arguments_are_rejected():
    with pytest.raises(SystemExit):
        parse_args(["--max-depth", "-1"])
    with pytest.raises(SystemExit):
        parse_args(["--max-per-task", "-1"])
    assert parse_args(["--max-depth", "0"]).max_depth == 0  # one-step fidelity only, no drift
    with pytest.raises(SystemExit):
        parse_args(["--output-modes", "xml"])


def test_side_by_side_run_writes_json_table_and_plot(tmp_path, capsys):
    output = tmp_path / "eval.json"
    argv = [
        "--world-models",
        "copy",
        "tiny-random",
        "--output-modes",
        "tree",
        "patch",
        "--limit",
        "2",
        "--max-depth",
        "2",
        "--max-new-tokens",
        "8",
        "--judge-max-new-tokens",
        "4",
        "--output",
        str(output),
    ]
    report = main(argv)
    saved = json.loads(output.read_text())
    assert saved["command"].startswith("dynaweb-eval-wm --world-models copy tiny-random")
    assert set(saved["results"]) == {"copy", "tiny-random [tree]", "tiny-random [patch]"}
    copy = saved["results"]["copy"]["summary"]
    # Copying the page is a well-formed prediction with the right URL; it is exact only where nothing changed.
    assert copy["valid"] == 1.0 and copy["url_correct"] == 1.0 and copy["tokens"] == 0
    assert 0 < copy["f1"] < 1 and set(copy["drift"]) == {"1", "2"}
    assert copy["strict_f1"] == copy["f1"]
    tiny = saved["results"]["tiny-random [tree]"]
    # 8 random tokens are never a valid output: the dream keeps the page (copy's F1), the model's own F1 is 0.
    assert tiny["summary"]["valid"] == 0.0 and tiny["summary"]["strict_f1"] == 0.0
    assert tiny["summary"]["f1"] == copy["f1"]
    assert tiny["summary"]["tokens"] > 0 and tiny["summary"]["judge_cases"] == 4 and tiny["judge"]
    assert (tmp_path / "eval.png").stat().st_size > 1000
    assert "copy" in capsys.readouterr().out and report["table"] == saved["table"]


def test_tasks_filter_keeps_a_suite_and_reports_each_task(tmp_path):
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_env.data.tasks import LONG_TASKS

    data = str(ALL_TASKS_DATA_DIR / "test")
    argv = ["--world-models", "copy", "--data", data, "--tasks", "long", "--max-per-task", "1", "--max-depth", "5"]
    report = main([*argv, "--output", str(tmp_path / "long.json")])
    summary = report["results"]["copy"]["summary"]
    assert report["task_filter"] == list(LONG_TASKS) and set(summary["per_task"]) == set(LONG_TASKS)
    book = summary["per_task"]["miniwob.book-flight"]
    rows = [r for r in report["results"]["copy"]["transitions"] if r["task"] == "miniwob.book-flight"]
    assert book["transitions"] == len(rows) and book["strict_f1"] == pytest.approx(
        sum(r["f1"] for r in rows) / len(rows), abs=1e-4
    )
    # Long episodes reach depth 5, and each task's drift counts add up to the whole's.
    assert summary["drift"]["5"]["n"] == sum(t["drift"].get("5", {}).get("n", 0) for t in summary["per_task"].values())
    assert "per_task" not in book
    with pytest.raises(ValueError, match="no trajectory"):
        main(["--world-models", "copy", "--data", data, "--tasks", "miniwob.no-such-task", "--output", str(tmp_path)])


def test_judge_only_measures_just_the_judge(tmp_path):
    output = tmp_path / "judge.json"
    argv = ["--world-models", "tiny-random", "--judge-only", "--limit", "1", "--judge-max-new-tokens", "4"]
    report = main([*argv, "--output", str(output)])
    result = report["results"]["tiny-random"]
    assert result["transitions"] == [] and result["summary"]["f1"] is None
    summary = result["summary"]
    assert summary["judge_cases"] == 2 and 0 <= summary["judge_accuracy"] <= 1
    # One success and its cut: each recall is over one case, and accuracy is their mean.
    assert summary["judge_accuracy"] == (summary["judge_success_recall"] + summary["judge_failure_recall"]) / 2
    assert summary["judge_unreadable"] == sum(r["error"] is not None for r in result["judge"])
    assert not output.with_suffix(".png").exists()
    with pytest.raises(SystemExit):
        parse_args(["--judge-only", "--no-judge"])


def test_judge_early_final_scores_the_final_action_taken_too_early(tmp_path):
    argv = ["--world-models", "tiny-random", "--judge-only", "--judge-max-new-tokens", "4", "--judge-early-final"]
    report = main([*argv, "--limit", "3", "--output", str(tmp_path / "judge.json")])
    result = report["results"]["tiny-random"]
    early = [row for row in result["judge"] if "/early" in row["trajectory"]]
    assert early and all(row["reward"] == 0.0 for row in early)
    share = sum(row["correct"] for row in early) / len(early)
    assert result["summary"]["judge_early_final_recall"] == pytest.approx(share)


def test_judge_objective_check_judges_as_the_dream_env_does():
    """A judge that says SUCCESS to everything: with the check, a cut of click-button-sequence's success (TWO never
    clicked) is withheld, as ``DreamWeb-v0`` withholds it by default; the success itself stands."""
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_env.llm import Generation
    from dynaweb_trainer.evaluate_world_model import evaluate_judge

    class AlwaysSuccess:
        def generate(self, conversations, params):
            return [Generation("VERDICT: SUCCESS") for _ in conversations]

    trajectories = [
        t
        for t in load_trajectories([ALL_TASKS_DATA_DIR / "test" / "expert.jsonl.xz"], split=None)
        if t.task_id == "miniwob.click-button-sequence" and t.success
    ][:1]
    plain = evaluate_judge(AlwaysSuccess(), trajectories, 8, 0, "grounded")
    checked = evaluate_judge(AlwaysSuccess(), trajectories, 8, 0, "grounded", objective_check=True)
    assert [row["verdict"] for row in plain] == [1.0, 1.0]  # the success and its cut
    assert [row["verdict"] for row in checked] == [1.0, 0.0]
    assert parse_args(["--judge-objective-check"]).judge_objective_check


def test_heldout_snapshot_leaves_out_seeds_and_records_a_checksum(tmp_path):
    import hashlib

    from benchmark_scripts import load_benchmark

    from dynaweb_env.data.io import write_trajectories
    from dynaweb_env.data.schema import Step, Trajectory

    steps = [Step("u", TREE, "click [1]"), Step("u", TREE, "")]
    records = [Trajectory(f"t{seed}", "a", "g", "expert", steps, True, 1.0, {"seed": seed}) for seed in (3, 4, 8)]
    write_trajectories(tmp_path / "validation.jsonl", records)
    output, summary_path = tmp_path / "heldout.jsonl", tmp_path / "heldout.json"
    summary = load_benchmark("heldout_snapshot").main(
        ["--sources", str(tmp_path / "validation.jsonl"), "--output", str(output), "--summary", str(summary_path)]
    )
    assert summary["records"] == 2 and summary["seeds"] == [4, 8] and summary["transitions"] == 2
    assert summary["sha256"] == hashlib.sha256(output.read_bytes()).hexdigest()
    assert json.loads(summary_path.read_text())["tasks"] == {"a": 2}


def test_keep_typed_text_scores_the_same_predictions_as_a_dream_shows_them(tmp_path):
    # Copying the page never draws a keystroke: on the typing tasks the rules alone write each typed value in.
    output = tmp_path / "kept.json"
    tasks = ("miniwob.enter-text", "miniwob.login-user")
    data = tmp_path / "typing.jsonl"
    from dynaweb_env.data.io import read_trajectories, write_trajectories
    from dynaweb_env.data.shipped import real_trajectory_files

    typing = [t for t in read_trajectories(real_trajectory_files()) if t.task_id in tasks and t.source == "expert"]
    write_trajectories(data, typing[:4])
    saved = main(["--world-models", "copy", "--keep-typed-text", "--no-judge", "--max-depth", "0", "--data", str(data),
                  "--split", "all", "--output", str(output)])  # fmt: skip
    assert set(saved["results"]) == {"copy", "copy + keep_typed_text"}
    copied, kept = (saved["results"][name] for name in ("copy", "copy + keep_typed_text"))
    assert kept["summary"]["recall"] > copied["summary"]["recall"]
    written = [record for record in kept["transitions"] if "written_in" in record]
    assert written and all(
        record["f1"] >= plain["f1"] for record, plain in zip(kept["transitions"], copied["transitions"], strict=True)
    )
    assert saved["settings"]["keep_typed_text"] is True


def test_shards_joined_equal_one_unsharded_run(tmp_path):
    """``--shard K/N`` runs score disjoint slices; ``merge_wm_evals.py`` joins them into the unsharded report."""
    from benchmark_scripts import load_benchmark

    merge_main = load_benchmark("merge_wm_evals").main

    common = ["--world-models", "copy", "tiny-random", "--limit", "3", "--max-depth", "1", "--max-new-tokens", "4",
              "--judge-max-new-tokens", "4"]  # fmt: skip
    whole = main([*common, "--output", str(tmp_path / "whole.json")])
    shards = [str(tmp_path / f"shard{k}.json") for k in (1, 0)]  # any order
    for k, path in zip((1, 0), shards, strict=True):
        main([*common, "--shard", f"{k}/2", "--output", path])
    parts = [json.loads(Path(path).read_text()) for path in shards]
    assert sorted(p["trajectories"] for p in parts) == [1, 2]  # every 2nd trajectory from the K-th
    joined = merge_main([*shards, "--output", str(tmp_path / "joined.json")])
    assert joined["trajectories"] == whole["trajectories"] == 3 and joined["settings"]["shards"] == 2
    for label, result in whole["results"].items():
        merged = joined["results"][label]
        key = lambda r: (r["trajectory"], r.get("index", 0))  # noqa: E731
        assert sorted(map(key, merged["transitions"])) == sorted(map(key, result["transitions"]))
        for name in ("transitions", "valid", "f1", "strict_f1", "exact", "terminal_correct"):
            assert merged["summary"][name] == pytest.approx(result["summary"][name], abs=1e-3), (label, name)
        assert merged["summary"]["drift"]["1"]["n"] == result["summary"]["drift"]["1"]["n"]
        assert merged["summary"]["drift"]["1"]["f1"] == pytest.approx(result["summary"]["drift"]["1"]["f1"], abs=1e-3)
    assert len(joined["results"]["tiny-random"]["judge"]) == len(whole["results"]["tiny-random"]["judge"])
    with pytest.raises(SystemExit, match="distinct shards"):  # a shard twice is not the whole evaluation
        merge_main([shards[0], shards[0], "--output", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit):
        parse_args(["--shard", "2/2"])
