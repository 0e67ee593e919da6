"""Every script in ``benchmarks/`` runs: each through its own command line at a tiny size, into a temporary directory.

The scripts measure for minutes to hours; here each runs its real ``main(argv)`` with the ``tiny-random`` model, one
task or start state and budgets of a few tokens, so a script that no longer matches the code it measures fails in
``make test`` instead of when someone reruns it. ``benchmarks/results/`` is checked untouched after every test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TINY = "tiny-random"

#: The scripts that import a sibling module, hence run as files through their ``if not __package__`` lines.
SIBLING_IMPORTERS = sorted(
    str(path.relative_to(ROOT / "benchmarks").with_suffix(""))
    for path in (ROOT / "benchmarks").rglob("*.py")
    if "claims" not in path.parts and "\nfrom benchmarks." in path.read_text()
)


def run_main(name: str, argv: list[str]):
    """``benchmarks.<name>.main(argv)``, imported as the package module ``python -m benchmarks.<name>`` runs."""
    from benchmark_scripts import load_benchmark

    return load_benchmark(name).main(argv)


@pytest.fixture(autouse=True)
def results_untouched() -> Iterator[None]:
    """Fail a test that wrote into ``benchmarks/results/`` (a smoke run must never replace a measurement)."""

    def snapshot() -> dict[str, int]:
        return {str(path): path.stat().st_mtime_ns for path in RESULTS.rglob("*") if path.is_file()}

    before = snapshot()
    yield
    after = snapshot()
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    assert not changed, f"the smoke run wrote into benchmarks/results/: {changed}"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A JSONL of two shipped train-split expert trajectories of more than one action, for scripts that read data."""
    path = tmp_path_factory.mktemp("data") / "two.jsonl"
    chosen = [
        t
        for t in read_trajectories(EXPERT_TRAJECTORIES)
        if t.metadata.get("split") == "train" and sum(bool(s.action) for s in t.steps) > 1
    ]
    write_trajectories(path, chosen[:2])
    return path


@pytest.mark.parametrize("name", SIBLING_IMPORTERS)
def test_scripts_that_import_siblings_run_as_files_from_anywhere(name, tmp_path):
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "usage:" in completed.stdout


def test_modules_run_with_python_m(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.probes.engine_workers", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]


def test_paper_claims_plans_every_experiment_and_aggregates_none(tmp_path, capsys):
    """The driver and its parts in ``benchmarks/claims/``: every experiment planned, then an empty aggregation."""
    from benchmark_scripts import load_benchmark

    experiments = load_benchmark("paper_claims").EXPERIMENTS
    common = ["--demonstrations", "shipped", "--policy", TINY, "--world-model", TINY, "--judge", TINY, "--seeds", "0"]
    common += ["--runs-dir", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results")]
    assert run_main("paper_claims", [*experiments, "--dry-run", *common]) == 0
    planned = capsys.readouterr().out
    assert "dynaweb-sft" in planned and "dynaweb-train" in planned
    assert run_main("paper_claims", ["table1", "--aggregate-only", *common]) == 0
    assert "no finished runs yet" in capsys.readouterr().out


@pytest.mark.usefixtures("require_browser")
def test_dream_rewards_replays_and_redreams_a_demonstration(tmp_path):
    output = tmp_path / "dream_rewards.json"
    argv = [
        "--demonstrations",
        "1",
        "--guards",
        "none",
        "--world-model",
        TINY,
        "--judge",
        TINY,
        "--judge-max-new-tokens",
        "4",
    ]
    argv += ["--world-model-max-new-tokens", "4", "--max-steps", "4", "--output", str(output)]
    assert run_main("dream_rewards", argv) == 0
    report = json.loads(output.read_text())
    assert len(report["dreams"]) == 2  # the demonstration whole, and cut short
    assert report["guards"]["none"]["compared"] == sum(row["replayed"] for row in report["dreams"]) > 0


def test_dream_consistency_checks_real_pages_and_rescores_a_dream_report(tmp_path, data):
    """A ``dream_rewards.py`` report of one dream (a shipped demonstration recorded as a dream), re-scored."""
    from dataclasses import replace

    demo = read_trajectories(data)[0]
    start = {"task_id": demo.task_id, "goal": demo.goal, "url": demo.steps[0].url, "trajectory_id": demo.id}
    start |= {"task_seed": demo.metadata.get("seed"), "step_index": 0}
    dream = replace(demo, source="dream", metadata={"options": {"start_state": start}})
    run = tmp_path / "run"
    write_trajectories(run / "episodes.jsonl", [dream])
    row = {"run": str(run), "id": dream.id, "task_id": dream.task_id, "dream_reward": 1.0, "real_reward": 1.0}
    row |= {"replayed": True, "start_reproduced": True}
    dreams = tmp_path / "dream_rewards.json"
    dreams.write_text(json.dumps({"dreams": [row]}))
    output = tmp_path / "dream_consistency.json"
    report = run_main("dream_consistency", ["--dreams", str(dreams), "--judge", TINY, "--output", str(output)])
    assert report["real"]["transitions"] > 0
    assert report["dream_reports"][0]["settings"]["as_dreamed"]["compared"] == 1
    assert json.loads(output.read_text())["judge"] == TINY


def test_judge_dream_scores_scores_a_judge_only_report(tmp_path, data):
    from dynaweb_trainer.evaluate_world_model import main as evaluate_world_models

    report = tmp_path / "judge.json"
    evaluate_world_models(["--world-models", TINY, "--judge-only", "--judge-max-new-tokens", "4", "--data",
                           str(data), "--split", "all", "--output", str(report)])  # fmt: skip
    scores = run_main("judge_dream_scores", [str(report)])
    assert scores[str(report)]["dreams"] == 2  # the whole demonstrations; their cut copies are left out


def test_merge_wm_evals_joins_two_shards(tmp_path, data):
    from dynaweb_trainer.evaluate_world_model import main as evaluate_world_models

    shards = [str(tmp_path / f"shard{k}.json") for k in (0, 1)]
    for k, path in enumerate(shards):
        argv = ["--world-models", "copy", "--no-judge", "--max-depth", "0", "--data", str(data), "--split", "all"]
        evaluate_world_models([*argv, "--shard", f"{k}/2", "--output", path])
    joined = run_main("merge_wm_evals", [*shards, "--output", str(tmp_path / "joined.json")])
    assert joined["settings"]["shards"] == 2 and joined["trajectories"] == 2


def test_heldout_snapshot_freezes_a_source(tmp_path, data):
    argv = ["--sources", str(data), "--exclude-seeds", "--output", str(tmp_path / "heldout.jsonl")]
    summary = run_main("heldout_snapshot", [*argv, "--summary", str(tmp_path / "heldout.json")])
    assert summary["records"] == 2


def test_engine_fidelity_compares_an_engine_with_the_reference(tmp_path):
    argv = ["--world-model", TINY, "--judge", TINY, "--limit", "1", "--quantizations", "float32"]
    argv += ["--max-new-tokens", "4", "--judge-max-new-tokens", "4", "--output", str(tmp_path / "fidelity.json")]
    report = run_main("engine_fidelity", argv)
    assert report["trajectories"] == 1 and "ct2-float32" in report["world_model_tokens"]


def test_engine_throughput_times_every_section_and_a_weight_sync(tmp_path):
    output = tmp_path / "engine_throughput.json"
    argv = ["--world-model", TINY, "--policy", TINY, "--prompts", "2", "--single", "1", "--new-tokens", "2"]
    argv += ["--policy-tokens", "2", "--dream-tokens", "2", "--sync", "1", "--output", str(output)]
    results = run_main("engine_throughput", argv)
    assert {"world_model_batched", "policy_batched", "dream_vector_step"} <= results.keys()
    assert len(results["policy_weight_sync"]["seconds"]) == 1
    assert output.with_suffix(".png").is_file()


def test_env_throughput_dreams_batched_and_one_by_one(tmp_path):
    output = tmp_path / "env_throughput.json"
    argv = ["--world-model", TINY, "--judge", TINY, "--dream-tokens", "2", "--skip-real", "--output", str(output)]
    run_main("env_throughput", argv)
    results = json.loads(output.read_text())
    assert results["dream_8_batched"]["num_envs"] == results["dream_8_sequential"]["num_envs"] == 8
    group = results["group_start_state"]["actions"]
    assert len(group) == len(set(group)) == 8  # one start state, 8 different actions
    assert results["group_8_batched"]["generated_tokens"] == results["group_8_sequential"]["generated_tokens"]


@pytest.mark.usefixtures("require_browser")
def test_expert_success_plays_one_page_and_merges_its_row(tmp_path):
    """The run's row replaces click-button's in a copy of the shipped table; the 23 other rows stay as they were."""
    output = tmp_path / "expert_success.json"
    shipped = json.loads((RESULTS / "expert_success" / "expert_success.json").read_text())
    output.write_text(json.dumps(shipped))
    argv = ["--tasks", "miniwob.click-button", "--seeds", "0", "--num-envs", "1", "--output", str(output)]
    assert run_main("expert_success", argv) == 0
    merged = json.loads(output.read_text())
    row = merged["per_task"]["miniwob.click-button"]
    assert (row["episodes"], row["median_steps"], row["max_steps"]) == (1, 1, 1)
    assert set(merged["per_task"]) == set(shipped["per_task"])
    others = {task: row for task, row in shipped["per_task"].items() if task != "miniwob.click-button"}
    assert others.items() <= merged["per_task"].items()
    assert merged["summary"]["episodes"] == shipped["summary"]["episodes"] - 49
    assert merged["runs"][-1]["tasks"] == ["miniwob.click-button"]
    assert all("miniwob.click-button" not in run["tasks"] for run in merged["runs"][:-1])
    assert merged["commands"][-1].endswith(f"--output {output}")


def test_expert_success_merges_parallel_runs_and_refuses_a_foreign_file(tmp_path):
    """Two writers at once both land (the lock); a file that is not this benchmark's is refused before any run."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmark_scripts import load_benchmark

    module = load_benchmark("expert_success")
    output = tmp_path / "expert_success.json"

    def fresh(task: str, steps: list[int]) -> dict:
        episodes = [{"task_id": task, "steps": n, "success": True, "env_error": ""} for n in steps]
        row = {"episodes": 3, "successes": 3, "success_rate": 1.0, "mean_steps": sum(steps) / 3}
        report = {"per_task": {task: row}, "episodes": episodes, "command": f"run {task}", "config": {}}
        report |= {"started_at": "t", "wall_seconds": 1.0, "num_envs": 1, "rollout_stats": {}, "host": {}}
        return module.summarize(report, 0.95)

    runs = [fresh(f"miniwob.task-{i}", [i, i + 4, i + 5]) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda run: module.save_merged(output, run, 0.95), runs))
    merged = json.loads(output.read_text())
    assert merged["summary"]["tasks"] == 8 and merged["summary"]["episodes"] == 24
    row = merged["per_task"]["miniwob.task-3"]
    assert row == runs[3]["per_task"]["miniwob.task-3"] and (row["median_steps"], row["max_steps"]) == (7, 8)
    foreign = tmp_path / "other.json"
    foreign.write_text('{"benchmark": "memory_peak"}')
    with pytest.raises(SystemExit):
        module.main(["--tasks", "miniwob.click-button", "--seeds", "0", "--output", str(foreign)])
    assert foreign.read_text() == '{"benchmark": "memory_peak"}'


def test_memory_peak_plans_every_preset_without_running_one(tmp_path, capsys):
    output = tmp_path / "memory_peak.json"
    assert run_main("memory_peak", ["--dry-run", "--output", str(output)]) == 0
    assert "cpu-small" in capsys.readouterr().out


def test_memory_peak_append_gathers_runs_of_the_same_command():
    from benchmarks.memory_peak import merge_runs

    def figures(command, peaks, status="ok"):
        return {"target": "dynaweb-sft", "command": command, "status": status, "runs": len(peaks),
                "peak_tree_rss_gib": max(peaks), "peak_tree_rss_gib_each": peaks,
                "seconds_each": [10.0] * len(peaks), "output_tail": status}  # fmt: skip

    merged = merge_runs(
        figures("dynaweb-sft --output_dir <tmp>", [3.1]), figures("dynaweb-sft --output_dir <tmp>", [2.9, 3.3])
    )
    assert merged["runs"] == 3 and merged["peak_tree_rss_gib_each"] == [3.1, 2.9, 3.3]
    assert merged["peak_tree_rss_gib"] == 3.3 and merged["seconds_each"] == [10.0] * 3
    # A failed run is the summary's status, whichever session it came from; a changed command starts over.
    assert merge_runs(figures("a", [1.0], "killed"), figures("a", [2.0]))["status"] == "killed"
    assert merge_runs(figures("a", [1.0]), figures("b", [2.0]))["runs"] == 1
    assert merge_runs(None, figures("b", [2.0]))["runs"] == 1


@pytest.mark.slow
def test_memory_peak_measures_one_tiny_training_step(tmp_path):
    """One run of the ``cpu-small`` preset, one update with tiny models (~1.5 min)."""
    output = tmp_path / "memory_peak.json"
    tiny = ["--max-steps", "1", "--policy", TINY, "--world-model", TINY, "--judge", TINY, "--num-generations", "2"]
    tiny += ["--per-device-train-batch-size", "2", "--max-turn-tokens", "4", "--world-model-max-new-tokens", "4"]
    argv = ["--presets", "cpu-small", "--repeats", "1", "--output", str(output), "--timeout", "300", "--", *tiny]
    assert run_main("memory_peak", argv) == 0
    run = json.loads(output.read_text())["runs"]["after"]["cpu-small"]
    assert run["status"] == "ok", run.get("output_tail")
    assert run["peak_tree_rss_gib"] > 0


def test_prompt_compaction_counts_tokens_and_times_a_step(tmp_path, data):
    argv = ["--model", TINY, "--examples", "1", "--time", "judge", "--variants", "paper-fp32", "compact-fp32"]
    report = run_main("prompt_compaction", [*argv, "--data", str(data), "--output", str(tmp_path / "p.json")])
    assert report["tokens_per_example"]["judge"]["compact_over_paper"] < 1
    assert set(report["train_step"]["judge"]["mean_seconds_per_example"]) == {"paper-fp32", "compact-fp32"}


def test_rollout_throughput_runs_dreams_batched_and_one_at_a_time(tmp_path):
    argv = ["--env", "dream", "--episodes", "2", "--policy", TINY, "--world-model", TINY, "--max-steps", "1"]
    argv += ["--max-turn-tokens", "4", "--world-model-max-new-tokens", "4", "--output", str(tmp_path / "r.json")]
    result = run_main("rollout_throughput", argv)
    assert result["batched"]["num_envs"] == 2 and result["sequential"]["num_envs"] == 1


def test_policy_prefill_compares_the_prefill_settings_on_the_same_calls(tmp_path):
    argv = ["--policy", TINY, "--tasks", "miniwob.click-button", "miniwob.enter-text", "--plan", "3"]
    report = run_main("policy_prefill", [*argv, "--max-new-tokens", "2", "--output", str(tmp_path / "p.json")])
    eval_shape, plan = report["shapes"]["eval"], report["shapes"]["plan"]
    assert eval_shape["rows_per_call"] == 2 and plan["rows_per_call"] == 4
    # Identical prompts are prefilled once where the prefix is shared; greedy answers never change.
    assert plan["none"]["rows_prefilled"] == 4 and plan["batch"]["rows_prefilled"] == 2
    assert eval_shape["kept"]["same_tokens_as_none"] and eval_shape["batch"]["same_tokens_as_none"]


def test_turn_prefill_replays_long_episodes_with_and_without_kept_prompts(tmp_path):
    argv = ["--policy", TINY, "--tasks", "miniwob.use-slider-2", "miniwob.form-sequence", "--max-new-tokens", "2"]
    report = run_main("turn_prefill", [*argv, "--output", str(tmp_path / "t.json")])
    turns = report["turns_per_episode"]
    assert report["calls"] == max(turns) and min(turns) >= 2  # both episodes in each call while both run
    # every turn after an episode's first extends its last prompt; the answers are the same greedy tokens
    assert report["turns"]["prompts_extended"] == sum(turns) - 2 and report["system"]["prompts_extended"] == 0
    assert report["same_tokens"]


def test_expert_agreement_scores_every_turn_of_held_out_expert_episodes(tmp_path):
    from benchmarks.expert_agreement import compare

    argv = ["--policy", TINY, "--tasks", "miniwob.form-sequence", "--episodes-per-task", "2", "--max-new-tokens", "2"]
    report = run_main("expert_agreement", [*argv, "--output", str(tmp_path / "a.json")])
    episodes = report["episodes"]
    assert len(episodes) == 2 and episodes[0]["trajectory_id"] != episodes[1]["trajectory_id"]
    turns = sum(len(episode["turns"]) for episode in episodes)
    assert report["all"]["turns"] == report["per_task"]["miniwob.form-sequence"]["turns"] == turns >= 4
    assert sum(row["turns"] for row in report["per_turn"]) == turns
    assert report["all"]["unparsable"] == 1.0  # two tokens of a random model are no action
    assert report["all"]["repeats_previous"] == 0.0
    # --rescore scores a saved report's answers again without a model: the same rates
    rescored = run_main("expert_agreement", ["--rescore", str(tmp_path / "a.json")])
    assert {key: rescored[key] for key in ("all", "per_task", "per_turn")} == {
        key: report[key] for key in ("all", "per_task", "per_turn")
    }
    # A prompt of its own each turn: the same turns asked, each with its own prompt.
    argv += ["--page-history", "actions", "--output", str(tmp_path / "b.json")]
    per_turn = run_main("expert_agreement", argv)
    assert per_turn["all"]["turns"] == turns and per_turn["observation"]["page_history"] == "actions"
    # The rule: the same parsed action; the same verb and element with other text; no action at all.
    expert = "type [21] [New York]"
    assert compare("REASON: r\nACTION: type [21] [New York]", expert) == (True, True, False, False)
    assert compare("ACTION: type [21] [Boston]", expert) == (False, True, False, False)
    assert compare("ACTION: click [21]", expert) == (False, False, False, False)
    assert compare("I would type it", expert) == (False, False, True, False)
    # The action the conversation took last, answered again:
    assert compare("ACTION: click [21]", expert, previous="click [21]") == (False, False, False, True)
    assert compare("ACTION: type [21] [New York]", expert, previous=expert) == (True, True, False, False)


def test_policy_dtype_answers_the_same_calls_in_float32_and_bfloat16(tmp_path):
    from benchmarks.policy_dtype import _action

    argv = ["--policy", TINY, "--tasks", "miniwob.form-sequence", "--max-new-tokens", "2"]
    report = run_main("policy_dtype", [*argv, "--output", str(tmp_path / "d.json")])
    assert report["turns"] == report["calls"] >= 2  # one episode: one row a call
    assert 0 <= report["answers_same_tokens"] <= report["turns"] and report["bfloat16_over_float32"] > 0
    assert report["float32"]["unparsable"] == 1.0  # two tokens of a random model are no action
    assert _action("REASON: r\nACTION: type [21] [New York]") == ("type", ("21", "New York", "1"))
    assert _action("no action here") is None


def test_thread_batching_runs_every_mode(tmp_path):
    argv = ["--num-envs", "2", "--steps", "1", "--rounds", "1", "--world-model", TINY, "--judge", TINY]
    argv += ["--max-new-tokens", "2", "--judge-max-new-tokens", "2", "--output", str(tmp_path / "t.json")]
    result = run_main("thread_batching", argv)
    assert set(result["median_seconds"]) == {"vector", "threads_batched", "threads_unbatched"}


def test_world_model_modes_counts_oracle_tokens_and_evaluates(tmp_path):
    argv = ["--tree-model", TINY, "--patch-model", "copy", "--base-model", "", "--limit", "1", "--max-depth", "0"]
    argv += ["--max-new-tokens", "4", "--no-judge", "--output", str(tmp_path / "modes.json")]
    report = run_main("world_model_modes", argv)
    assert report["oracle"]["transitions"] > 0 and "comparison" in report
    assert (tmp_path / "world_model_modes_eval.json").is_file()


@pytest.mark.usefixtures("require_browser")
def test_default_rewards_plays_one_task_really_and_in_a_dream(tmp_path):
    output = tmp_path / "default_rewards.json"
    env = {"world_model": TINY, "judge": TINY, "max_new_tokens": 4, "judge_max_new_tokens": 4}
    argv = ["--tasks", "miniwob.click-button", "--env-kwargs", json.dumps(env), "--output", str(output)]
    assert run_main("default_rewards", argv) == 0
    assert json.loads(output.read_text())["overall"]


def test_gpu_throughput_dry_run_on_the_cpu(tmp_path):
    output = tmp_path / "gpu.json"
    results = run_main("gpu_throughput", ["--dry-run", "--device", "cpu", "--output", str(output)])
    assert results["device_type"] == "cpu" and "generation" in results
    assert output.is_file()


def test_gpu_choose_prints_the_exports_of_its_rule(tmp_path, capsys):
    world_model = {
        "backend_generate_compiled": {"seconds": 0.10},
        "backend_generate_compiled_dynamic": {"seconds": 0.2},
    }
    generation = {"generation": {"roles": {"world_model": {"batched": {"contenders": world_model}}}}}
    (tmp_path / "generation.json").write_text(json.dumps(generation))
    run_main("gpu.choose", [str(tmp_path / "generation.json")])
    assert "export DYNAWEB_COMPILE_SHAPES=static" in capsys.readouterr().out.splitlines()
    run_main("gpu.choose", [str(tmp_path / "missing.json")])  # a section that wrote nothing: the code's defaults
    assert capsys.readouterr().out.startswith("# nothing measured")


def test_gpu_merge_joins_the_sections_of_a_cut_lease(tmp_path):
    head = {"device": "GPU X", "device_type": "cuda", "versions": {"torch": "2"}}
    parts = []
    for name, section in (("generation", {"roles": {}}), ("train", {"default": {"update_seconds": [9.0, 2.0]}})):
        parts.append(tmp_path / f"{name}.json")
        parts[-1].write_text(json.dumps(head | {"command": f"gpu_throughput --sections {name}", name: section}))
    output = tmp_path / "merged.json"
    run_main("gpu.merge", [*map(str, parts), "--commit", "abc1234", "--note", "cut", "--output", str(output)])
    merged = json.loads(output.read_text())
    assert merged["missing_sections"] == ["dreams"] and merged["train"]["default"]["update_seconds"] == [9.0, 2.0]
    assert [part["complete"] for part in merged["parts"]] == [False, False] and merged["commit"] == "abc1234"
    dynamic = {"default": {"update_seconds": [8.0], "env": {"DYNAWEB_COMPILE_SHAPES": "dynamic"}}}
    parts.append(tmp_path / "train_dynamic.json")
    parts[-1].write_text(json.dumps(head | {"command": "gpu_throughput --sections train", "train": dynamic}))
    run_main("gpu.merge", [*map(str, parts), "--commit", "abc1234", "--output", str(output)])
    runs = json.loads(output.read_text())["train"]  # two parts' runs of one name, kept apart by their variables
    assert sorted(runs) == ["default", "default (DYNAWEB_COMPILE_SHAPES=dynamic)"]
    with pytest.raises(ValueError, match="two parts hold the training run"):
        run_main("gpu.merge", [*map(str, parts), str(parts[-1]), "--commit", "abc1234", "--output", str(output)])
    parts = parts[:2]
    parts[1].write_text(json.dumps(head | {"device": "GPU Y", "command": "c", "train": {}}))
    with pytest.raises(ValueError, match="different devices"):
        run_main("gpu.merge", [*map(str, parts), "--commit", "abc1234", "--output", str(output)])


def test_engine_plan_probe_runs(tmp_path):
    argv = ["--world-model", TINY, "--max-new-tokens", "2", "--dreams", "2", "--rounds", "1", "--expected", "64"]
    result = run_main("probes.engine_plan", [*argv, "--output", str(tmp_path / "plan.json")])
    assert len(result["seconds_by_expected_steps"]["64"]) == 1


def test_engine_workers_probe_runs(tmp_path):
    argv = ["--world-model", TINY, "--prompts", "0", "1", "--new-tokens", "2", "--rounds", "1"]
    result = run_main("probes.engine_workers", [*argv, "--output", str(tmp_path / "workers.json")])
    assert len(result["rounds"]) == 1


def test_observation_cut_counts_the_expert_targets_a_tree_cut_drops(tmp_path):
    argv = ["--tasks", "miniwob.daily-calendar", "--cuts", "1500", "0", "--tokenizer", TINY]
    report = run_main("observation_cut", [*argv, "--output", str(tmp_path / "c.json")])
    row = report["per_task"]["miniwob.daily-calendar"]
    assert row["episodes"] == 10 and row["1500"]["dropped"] > 0 and row["0"]["dropped"] == 0  # its late hours
    assert row["0"]["episode_tokens_max"] > row["1500"]["episode_tokens_max"]
    assert 0 <= row["0"]["within_completion_budget"] <= row["1500"]["within_completion_budget"] <= 10
    assert row["0"]["pages_as_edits_within_completion_budget"] >= row["0"]["within_completion_budget"]
    assert report["suites"]["long"]["episodes"] == 10 and report["suites"]["small"] == {}


@pytest.mark.usefixtures("require_browser")
def test_observation_tokens_counts_every_flattening_of_an_expert_episode(tmp_path):
    argv = ["--tasks", "miniwob.email-inbox-important", "--seeds", "0", "--tokenizer", TINY]
    report = run_main("observation_tokens", [*argv, "--output", str(tmp_path / "o.json")])
    summary = report["summary"]
    assert summary["pages"] >= 2 and summary["expert_success_after"] == 1.0
    assert summary["before_clickable_generics_with_bid"] == summary["with_clickable_clickable_generics_with_bid"] == 0
    assert summary["after_clickable_generics_with_bid"] == 1.0 and summary["after_tokens"] > summary["before_tokens"]
    assert all(page["after_matches_env"] for page in report["episodes"][0]["pages"])


@pytest.mark.slow
@pytest.mark.usefixtures("require_browser")
def test_observation_heldout_replays_and_rescores_a_changed_trajectory(tmp_path):
    argv = ["--tasks", "miniwob.email-inbox-important", "--seeds", "8", "--max-per-task", "1", "--world-model", "copy"]
    report = run_main("observation_heldout", [*argv, "--judge", TINY, "--output", str(tmp_path / "h.json")])
    assert report["trajectories"] == report["faithful_replays"] == 2 and len(report["changed"]) == 2
    assert report["world_model"]["committed_vs_new"]["new"]["transitions"] == report["changed_transitions"]
    assert report["judge"]["committed_vs_new"]["new"]["judge_cases"] >= 2


def test_lookahead_guard_scores_recorded_final_actions(tmp_path):
    argv = ["--world-model", TINY, "--judge", TINY, "--limit", "4", "--output", str(tmp_path / "g.json")]
    report = run_main("lookahead_guard", argv)
    rates = report["summary"]["by_threshold"]["0.5"]
    assert rates["failure_final"]["actions"] == rates["success_final"]["actions"] == 2
    assert report["cost_this_run"]["world_model_calls"] == report["cost_this_run"]["judge_calls"] == 1
    assert not (tmp_path / "g.json.jsonl").exists()  # the partial rows are in the JSON now


@pytest.mark.usefixtures("require_browser")
def test_planning_runs_a_policy_with_and_without_planning(tmp_path, monkeypatch):
    argv = ["--policies", "explore-e0.5", "--arms", "0:0", "2:1", "--tasks", "miniwob.click-button", "--per-task", "1"]
    argv += ["--run-seeds", "0", "--world-model", TINY, "--judge", TINY, "--num-envs", "1", "--work", str(tmp_path)]
    report = run_main("planning", [*argv, "--output", str(tmp_path / "p.json")])
    arms = report["policies"]["explore-e0.5"]
    assert arms["K0:d0"]["episodes_per_seed"] == arms["K2:d1"]["episodes_per_seed"] == 1
    assert "world_model_tokens" in arms["K2:d1"]["cost_per_real_step"] and (tmp_path / "p.png").is_file()

    # Finished runs moved to another folder are read back, not rerun (their config's output path differs).
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "explore-e0.5").rename(moved / "explore-e0.5")
    rerun = argv[: argv.index("--work") + 1] + [str(moved), "--output", str(tmp_path / "q.json")]
    monkeypatch.setattr("dynaweb_trainer.evaluate.evaluate_policy", lambda *a, **k: pytest.fail("a run was redone"))
    assert run_main("planning", rerun)["policies"] == report["policies"]
    # --aggregate-only reads back what finished and lists the rest, running nothing.
    grid = [*rerun[:5], "4:1", *rerun[5:], "--aggregate-only", "--output", str(tmp_path / "r.json")]
    partial = run_main("planning", grid)
    assert partial["missing_runs"] == ["explore-e0.5 K4:d1 run seed 0"]
    assert partial["policies"] == report["policies"] and partial["arms"] == ["K0:d0", "K2:d1", "K4:d1"]


def test_planning_plays_the_long_suite_on_its_paper_claims_budget(tmp_path):
    argv = ["--suite", "long", "--policies", "sft=/nowhere", "--arms", "0:0", "2:1", "--run-seeds", "0"]
    report = run_main(
        "planning", [*argv, "--work", str(tmp_path), "--aggregate-only", "--output", str(tmp_path / "l.json")]
    )
    # the observation the long suite's SFT start was trained and evaluated on (paper_claims' long budget)
    assert report["observation"] == {
        "max_steps": 10,
        "max_new_tokens": 64,
        "max_axtree_chars": 3000,
        "page_history": "edits",
    }
    assert report["missing_runs"] == ["sft K0:d0 run seed 0", "sft K2:d1 run seed 0"] and len(report["tasks"]) == 9
    small = run_main(
        "planning",
        [
            "--policies",
            "x",
            "--arms",
            "0:0",
            "--work",
            str(tmp_path),
            "--aggregate-only",
            "--output",
            str(tmp_path / "s.json"),
        ],
    )
    assert small["observation"]["max_axtree_chars"] == 1500 and small["observation"]["page_history"] == "full"


def test_planning_rescore_reproduces_every_recorded_plan(tmp_path):
    """The committed planning runs re-scored: the shipped rule gives each recorded choice (else the records, and the
    docs' figures from them, are of another rule), and each compared rule's changes are bounded per arm."""
    report = run_main("planning_rescore", ["--output", str(tmp_path / "rescore.json")])
    assert report["totals"]["runs"] >= 30 and report["totals"]["shipped_rule_mismatches"] == 0
    for arm in report["by_arm"].values():
        assert 0 <= arm["ended_progress_cap"]["mean_gain_at_most"] <= 1


@pytest.mark.usefixtures("require_browser")
def test_planning_ranking_scores_and_replays_candidates(tmp_path):
    argv = ["--tasks", "miniwob.click-button", "--seeds-per-task", "1", "--candidates", "3", "--world-model", TINY]
    assert run_main("planning_ranking", [*argv, "--judge", TINY, "--output", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    (page,) = report["pages"]
    assert page["candidates"][0]["expert"] and page["candidates"][0]["real_reward"] == 1.0  # the expert's click
    assert len({c["action"] for c in page["candidates"]}) == len(page["candidates"]) >= 2
    assert report["overall"]["pages"] == 1 and not (tmp_path / "r.partial.jsonl").exists()
    assert set(report["overall"]["by_progress_weight"]) == {"0.0", "0.25", "0.5", "0.75"}
    # Rescored from the same dreams (resumed from the finished file) with a progress weight.
    rescored_argv = [*argv, "--judge", TINY, "--progress-weight", "0.5", "--output", str(tmp_path / "r.json")]
    assert run_main("planning_ranking", rescored_argv) == 0
    assert json.loads((tmp_path / "r.json").read_text())["progress_weight"] == 0.5
    # Deeper: the expert goes on acting in each dream (tiny-random's pages do not end, so dreams take both steps).
    deeper_argv = [*argv, "--judge", TINY, "--depth", "2", "--output", str(tmp_path / "d.json")]
    assert run_main("planning_ranking", deeper_argv) == 0
    deeper = json.loads((tmp_path / "d.json").read_text())
    assert deeper["depth"] == 2 and any(c["dream"]["steps"] == 2 for c in deeper["pages"][0]["candidates"])


def test_objective_check_counts_flagged_real_trajectories(tmp_path):
    argv = ["--datasets", "miniwob-all", "--splits", "test", "--output", str(tmp_path / "o.json")]
    assert run_main("objective_check", argv) == 0
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["trajectories"]["success"] > 100 and report["trajectories"]["failure"] > 10
    assert report["flagged"]["any"]["failures"] >= report["flagged"]["named_control"]["failures"] > 0


def test_judge_threshold_sweeps_thresholds_on_real_and_dreamed_cases(tmp_path):
    output = tmp_path / "t.json"
    argv = ["--judge", TINY, "--tasks", "miniwob.click-button", "--max-per-task", "1", "--output", str(output)]
    assert run_main("judge_threshold", argv) == 0
    report = json.loads(output.read_text())
    assert report["trajectories"]["real"] >= 1 and report["sweep"][0]["threshold"] is None
    assert report["chosen"] in report["sweep"] and report["sweep"][0]["real"]["cases"] >= 1


def test_results_index_is_current():
    """``benchmarks/results/INDEX.md`` lists every result file as ``python -m benchmarks.results_index`` writes it."""
    if not (ROOT / ".git").exists():
        pytest.skip("no git history: the index's commits and dates cannot be read")
    assert run_main("results_index", ["--check"]) == 0, "run: python -m benchmarks.results_index"


def test_results_index_warns_when_it_writes_uncommitted_rows(tmp_path, monkeypatch, capsys):
    """An index written with rows marked uncommitted would fail ``--check`` on a clean clone: writing it says so."""
    from benchmarks import results_index

    monkeypatch.setattr(results_index, "ROOT", tmp_path)
    monkeypatch.setattr(results_index, "INDEX", tmp_path / "INDEX.md")
    rows = "| [a.json](a.json) |  | `cmd` | 2026-12-02 | b991efc |\n| [b.json](b.json) |  | `cmd` |  | uncommitted |\n"
    monkeypatch.setattr(results_index, "render", lambda: rows)
    assert results_index.main([]) == 0
    assert (tmp_path / "INDEX.md").read_text() == rows
    assert "warning: 1 file(s) are listed as uncommitted" in capsys.readouterr().err
    monkeypatch.setattr(results_index, "render", lambda: rows.splitlines()[0] + "\n")
    assert results_index.main([]) == 0 and "warning" not in capsys.readouterr().err


def test_every_benchmark_script_has_a_smoke_test_here():
    """A new script in ``benchmarks/`` (or ``benchmarks/probes/``) gets a test in this file that runs its ``main``."""
    this_file = Path(__file__).read_text()
    scripts = [
        ".".join(path.relative_to(ROOT / "benchmarks").with_suffix("").parts)
        for path in sorted((ROOT / "benchmarks").rglob("*.py"))
        if path.name != "__init__.py" and "claims" not in path.parts and "def main(" in path.read_text()
    ]
    assert len(scripts) >= 17
    untested = [name for name in scripts if f'run_main("{name}"' not in this_file]
    assert not untested, f"no smoke test runs these benchmark scripts: {untested}"


def test_engine_call_shapes_probe_runs(tmp_path):
    argv = ["--world-model", TINY, "--max-new-tokens", "2", "--rows", "1", "2", "--shapes", "group"]
    result = run_main("probes.engine_call_shapes", [*argv, "--output", str(tmp_path / "shapes.json")])
    row = result["shapes"]["group"]["rows"]["2"]
    assert set(row) == {"ct2", "transformers"} and row["ct2"]["tokens"][0] == row["ct2"]["tokens"][1]
