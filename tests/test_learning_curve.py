"""benchmarks/paper_claims.py learning_curve: every checkpoint evaluated, plotted against the real steps behind it."""

from __future__ import annotations

import json

import pytest
from benchmark_scripts import load_benchmark
from test_paper_claims import SHIPPED_DEMOS, TINY_BUDGET, TINY_MODELS, _fake_result, drive

claims = load_benchmark("paper_claims")
CURVE = ["learning_curve", "--seeds", "0", "--sft-seed", "0", "--set", "train_steps=4", "save_steps=2"]


def test_each_checkpoint_of_one_training_run_is_evaluated(tmp_path):
    ctx = claims.make_context(claims.parse_args([*CURVE, "--runs-dir", str(tmp_path)]))
    runs = {run.arm.key: run for run in claims.plan("learning_curve", ctx)}
    assert list(runs) == ["sft", "gspo-real@2", "gspo-real@4", "dynaweb-dreams@2", "dynaweb-dreams@4"]
    gspo, last = runs["gspo-real@2"], runs["gspo-real@4"]
    assert gspo.train.output_dir == last.train.output_dir  # one training run per method and seed
    assert "--max-steps 4" in gspo.train.command and "--save-total-limit 2" in gspo.train.command
    assert f"--policy {claims.rel(gspo.train.output_dir / 'checkpoint-2')} " in gspo.eval.command
    # The last point is the run's final policy: the same evaluation as table1's or dreams_only's would be.
    assert f"--policy {claims.rel(last.train.output_dir)} " in last.eval.command
    assert gspo.eval.output_dir != last.eval.output_dir
    dreams = runs["dynaweb-dreams@2"]
    assert "--env dream --expert-frac 0.0" in dreams.train.command
    assert dreams.train.output_dir == runs["dynaweb-dreams@4"].train.output_dir != gspo.train.output_dir
    assert runs["sft"].arm.x == 0 and runs["sft"].train is None


def test_checkpoint_real_steps_come_from_its_step_counter(tmp_path):
    ctx = claims.make_context(claims.parse_args([*CURVE, *SHIPPED_DEMOS, "--runs-dir", str(tmp_path), "--skip-eval"]))
    claims.write_train_split(ctx)  # the SFT start's demonstrations, counted in the result
    run = next(run for run in claims.plan("learning_curve", ctx) if run.arm.key == "gspo-real@2")
    claims.write_json(run.sft.result_file, {"runtime_s": 1.0})
    claims.write_json(run.train.result_file, {"global_step": 4, "real_env_steps": 40, "expert_env_steps": 0})
    checkpoint = run.train.output_dir / "checkpoint-2"
    counter = {"attributes": {"episodes": 8, "real_env_steps": 17, "expert_env_steps": 0}}
    claims.write_json(
        checkpoint / "trainer_state.json", {"global_step": 2, "stateful_callbacks": {"EnvStepCounter": counter}}
    )
    result = claims.aggregate("learning_curve", [run], ctx, "cmd")["runs"][0]
    assert result["real_env_steps"]["online_real"] == 17  # not the finished run's 40
    assert result["train_summary"]["global_step"] == 2
    claims.write_json(checkpoint / "trainer_state.json", {"global_step": 2})
    with pytest.raises(ValueError, match="holds no EnvStepCounter"):
        claims.aggregate("learning_curve", [run], ctx, "cmd")


def _save_checkpoint(run, step: int, real_steps: int) -> None:
    counter = {"attributes": {"episodes": 4 * step, "real_env_steps": real_steps, "expert_env_steps": 0}}
    state = {"global_step": step, "stateful_callbacks": {"EnvStepCounter": counter}}
    claims.write_json(run.train.output_dir / f"checkpoint-{step}" / "trainer_state.json", state)


def test_a_curve_point_is_recorded_once_its_checkpoint_is_saved(tmp_path, capsys):
    """A second driver evaluates checkpoint 2 while the first still trains; the finished run then completes it."""
    import fcntl

    from benchmarks.claims.runner import LOCK_FILE, run_all

    ctx = claims.make_context(claims.parse_args([*CURVE, *SHIPPED_DEMOS, "--runs-dir", str(tmp_path)]))
    claims.write_train_split(ctx)
    runs = {run.arm.key: run for run in claims.plan("learning_curve", ctx)}
    early, last = runs["gspo-real@2"], runs["gspo-real@4"]
    claims.write_json(early.sft.result_file, {"runtime_s": 1.0})
    partial = early.train.checkpoint_dir / "trainer_state.json"
    partial.parent.mkdir(parents=True)
    partial.write_text('{"global_step": 2, "stateful')  # being written by the Trainer right now
    assert not early.train.done()
    _save_checkpoint(early, 2, 17)
    assert early.train.done() and not early.train.finished() and not last.train.done()

    early.eval.output_dir.mkdir(parents=True)
    with open(early.eval.output_dir / LOCK_FILE, "w") as handle:  # a third driver evaluates it right now
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_all([early], ctx, echo=False) == []
    out = capsys.readouterr().out
    assert "dynaweb-train saved its checkpoint 2, still training" in out and "running dynaweb-train" not in out
    assert "left for later: another process is running dynaweb-eval" in out

    evaluation = {"summary": {"success_rate": 0.5, "episodes": 2, "mean_steps": 1.0}, "wall_seconds": 3.0}
    claims.write_json(early.eval.result_file, evaluation)  # what that driver wrote
    assert run_all([early], ctx, echo=False) == []
    recorded = json.loads(early.result_file.read_text())
    assert recorded["success"] == 0.5 and recorded["real_env_steps"]["online_real"] == 17
    assert recorded["seconds"]["train"] is None and recorded["train_summary"]["training_finished"] is False
    assert not list(early.train.output_dir.glob("*.log"))  # the training was never started by this driver

    claims.write_json(early.train.result_file, {"global_step": 4, "real_env_steps": 40, "train_seconds": 9.0})
    assert run_all([early], ctx, echo=False) == []
    completed = json.loads(early.result_file.read_text())  # rewritten with the finished run's summary
    assert completed["train_summary"]["training_finished"] is True and completed["seconds"]["train"] == 9.0
    assert completed["real_env_steps"]["online_real"] == 17  # still the checkpoint's, not the run's 40


def test_a_job_another_driver_is_running_is_left_for_later(tmp_path, capsys):
    import fcntl

    from benchmarks.claims.runner import LOCK_FILE, run_all

    ctx = claims.make_context(claims.parse_args([*CURVE, *SHIPPED_DEMOS, "--runs-dir", str(tmp_path), "--skip-eval"]))
    claims.write_train_split(ctx)
    runs = [run for run in claims.plan("learning_curve", ctx) if run.arm.key in ("gspo-real@2", "gspo-real@4")]
    claims.write_json(runs[0].sft.result_file, {"runtime_s": 1.0})
    train_dir = runs[0].train.output_dir
    train_dir.mkdir(parents=True)
    with open(train_dir / LOCK_FILE, "w") as handle:  # what the other driver's execute() holds
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_all(runs, ctx, echo=False) == []  # not failures: a later invocation runs them
    out = capsys.readouterr().out
    assert out.count("left for later: another process is running dynaweb-train") == 2
    assert not list(train_dir.glob("*.log"))  # the tool never started
    assert not any(run.result_file.exists() for run in runs)


def test_criteria_give_the_real_step_ratio_where_dynaweb_reaches_gspo(tmp_path):
    ctx = claims.make_context(claims.parse_args([*CURVE, "--runs-dir", str(tmp_path)]))
    runs = claims.plan("learning_curve", ctx)
    success = {"sft": 0.5, "gspo-real@2": 0.6, "gspo-real@4": 0.7, "dynaweb-dreams@2": 0.7, "dynaweb-dreams@4": 0.8}
    online = {"gspo-real@2": 40, "gspo-real@4": 80}
    for run in runs:
        extra = 2521 if run.arm.method == "dynaweb" else 0
        claims.write_json(run.result_file, _fake_result(run, success[run.arm.key], online.get(run.arm.key, 0), extra))
    report = claims.aggregate("learning_curve", runs, ctx, "cmd")
    criteria = report["criteria"]
    assert criteria["gspo_final_success"]["mean"] == pytest.approx(0.7)
    assert criteria["dynaweb_reaches_gspo_final"] is True and criteria["dynaweb_updates_to_reach"] == 2
    assert criteria["real_step_ratio"]["total"] == pytest.approx((67 + 2521) / (67 + 80))
    assert criteria["real_step_ratio"]["training_only"] == pytest.approx(2521 / 80)
    assert criteria["real_step_ratio"]["world_model_data"] == pytest.approx(2521 / 80)  # the shipped model's own data
    assert not any(criteria["at_most_10pct_by_accounting"].values())
    # The goal would need GSPO to spend ten times DynaWeb's 2,521 world-model transitions: 1,260 updates at 20 each.
    assert criteria["gspo_real_steps_per_update"] == pytest.approx(20)
    assert criteria["gspo_training_real_steps_for_10pct"] == 25210
    assert criteria["gspo_updates_for_10pct"] == pytest.approx(25210 / 20)
    png = tmp_path / "curve.png"
    claims.plot(report, png)
    assert png.stat().st_size > 10_000
    # Before any DynaWeb point, the shipped world model's record alone says what the goal asks of GSPO.
    for run in runs:
        if run.arm.method == "dynaweb":
            run.result_file.unlink()
    criteria = claims.aggregate("learning_curve", runs, ctx, "cmd")["criteria"]
    assert criteria["dynaweb_reaches_gspo_final"] is None and criteria["dynaweb_training_real_steps"] == 2521
    assert criteria["gspo_updates_for_10pct"] == pytest.approx(25210 / 20)


def test_a_model_trained_on_the_demonstrations_counts_them_in_the_issues_accounting(tmp_path):
    """0 extra real steps in training, but issue 19 counts every transition behind the world model against GSPO."""
    ctx = claims.make_context(
        claims.parse_args([*CURVE, *SHIPPED_DEMOS, "--model-data", "demonstrations", "--runs-dir", str(tmp_path)])
    )
    runs = claims.plan("learning_curve", ctx)
    success = {"sft": 0.5, "gspo-real@2": 0.6, "gspo-real@4": 0.7, "dynaweb-dreams@2": 0.7, "dynaweb-dreams@4": 0.8}
    for run in runs:
        online = {"gspo-real@2": 40, "gspo-real@4": 80}.get(run.arm.key, 0)
        claims.write_json(run.result_file, _fake_result(run, success[run.arm.key], online, 0))
    criteria = claims.aggregate("learning_curve", runs, ctx, "cmd")["criteria"]
    demonstrations = criteria["gspo_final_real_steps"]["sft_demonstrations"]
    assert demonstrations > 0 and criteria["dynaweb_training_real_steps"] == 0
    assert criteria["real_step_ratio"]["training_only"] == 0
    assert criteria["real_step_ratio"]["total"] == pytest.approx(demonstrations / (demonstrations + 80))
    assert criteria["real_step_ratio"]["world_model_data"] == pytest.approx(demonstrations / 80)
    assert criteria["at_most_10pct_by_accounting"]["training_only"] is True
    assert criteria["at_most_10pct_by_accounting"]["world_model_data"] is False  # 67 demonstration steps vs 80
    # The goal asks GSPO for ten times the 67 demonstration steps behind the world model: 33.5 updates at 20 each.
    assert criteria["gspo_training_real_steps_for_10pct"] == 670
    assert criteria["gspo_updates_for_10pct"] == pytest.approx(670 / 20)


def test_dream_curve_smoke_run_keeps_and_reads_real_checkpoints(tmp_path):
    """Two DynaWeb updates in tiny-random dreams, through the real tools: checkpoint 1 is kept and read."""
    budget = [item if item != "train_steps=1" else "train_steps=2" for item in TINY_BUDGET]
    args = ["learning_curve", "--arms", "dynaweb-dreams@1", "dynaweb-dreams@2", "--seeds", "0", "--skip-eval"]
    completed = drive(tmp_path, *args, "--tasks", "miniwob.click-button", *TINY_MODELS, *SHIPPED_DEMOS, *budget)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads((tmp_path / "results" / "paper_claims_learning_curve.json").read_text())
    runs = {run["arm"]: run for run in report["runs"]}
    assert runs["dynaweb-dreams@1"]["train_summary"]["global_step"] == 1
    assert runs["dynaweb-dreams@1"]["train_summary"]["checkpoint"].endswith("checkpoint-1")
    assert runs["dynaweb-dreams@2"]["train_summary"]["global_step"] == 2
    assert completed.stdout.count("running dynaweb-train") == 1  # one run serves both points


def test_train_to_checkpoint_stops_a_run_at_its_point_and_the_next_point_resumes_it(tmp_path, capsys):
    """--train-to-checkpoint through the real tools: the first point trains to checkpoint 1 only, the last resumes."""
    import shlex

    from dynaweb_trainer.cli import train_main

    budget = [item if item != "train_steps=1" else "train_steps=2" for item in TINY_BUDGET]
    common = ["--seeds", "0", "--skip-eval", "--tasks", "miniwob.click-button", *TINY_MODELS, *SHIPPED_DEMOS, *budget]
    report = tmp_path / "results" / "paper_claims_learning_curve.json"
    first = drive(tmp_path, "learning_curve", "--arms", "dynaweb-dreams@1", "--train-to-checkpoint", *common)
    assert first.returncode == 0, first.stdout + first.stderr
    (run,) = json.loads(report.read_text())["runs"]
    train_dir = claims.ROOT / run["output_dirs"][1]
    assert train_dir.name.startswith("dynaweb-") and (train_dir / "checkpoint-1" / "trainer_state.json").is_file()
    assert not (train_dir / "checkpoint-2").exists() and not (train_dir / "summary.json").exists()
    assert "stopped after update 1 of 2" in (train_dir / "dynaweb-train.log").read_text()
    assert "--stop-after-step" not in run["commands"][1]  # the run's recorded command, and so its hash, are unchanged
    assert run["train_summary"]["training_finished"] is False

    # Asked again to stop at a checkpoint it is already past, the tool does nothing.
    assert train_main([*shlex.split(run["commands"][1])[1:], "--resume", "--stop-after-step", "1"]) == 0
    assert "nothing to do" in capsys.readouterr().out and not (train_dir / "checkpoint-2").exists()

    last = drive(tmp_path, "learning_curve", "--arms", "dynaweb-dreams@1", "dynaweb-dreams@2", *common)
    assert last.returncode == 0, last.stdout + last.stderr
    assert "resuming dynaweb-train" in last.stdout
    runs = {run["arm"]: run for run in json.loads(report.read_text())["runs"]}
    assert runs["dynaweb-dreams@2"]["train_summary"]["global_step"] == 2
    state = json.loads((train_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == [1, 2]


def test_world_model_real_steps_are_read_from_its_training_record():
    from benchmarks.claims.statistics import world_model_transitions

    assert world_model_transitions("smollm2-135m-wm-patch") == 2521  # the large dataset's train split
    assert world_model_transitions("smollm2-135m-judge-dagger") is None  # a judge: not world-model transitions
    assert world_model_transitions("tiny-random") is None  # untrained: no record, unknown
    assert world_model_transitions("/no/such/model") is None


def test_criteria_say_whether_reaching_gspo_is_beyond_the_spread_over_seeds():
    from benchmarks.claims.statistics import learning_curve_criteria

    steps = {"total": 700, "sft_demonstrations": 681, "online_real": 0, "world_model_extra": 0}

    def row(method, x, mean, std):
        return {"method": method, "x": x, "success": {"mean": mean, "std": std}, "real_env_steps_mean": steps}

    gspo = [row("gspo-real", 32, 0.681, 0.057)]
    # Issue 19's demonstrations curve at 8 updates: 76 / 68 / 42 of 90 pass GSPO's 61.3 on the mean, within spread.
    wide = learning_curve_criteria([*gspo, row("dynaweb", 8, 0.689, 0.19)], 0)
    assert wide["dynaweb_reaches_gspo_final"] is True
    assert wide["dynaweb_reach_margin"] == pytest.approx(0.008)
    assert wide["dynaweb_reach_beyond_spread"] is False
    clear = learning_curve_criteria([*gspo, row("dynaweb", 8, 0.80, 0.03)], 0)
    assert clear["dynaweb_reach_beyond_spread"] is True
    one_seed = learning_curve_criteria([row("gspo-real", 32, 0.681, None), row("dynaweb", 8, 0.80, None)], 0)
    assert one_seed["dynaweb_reach_beyond_spread"] is None
    never = learning_curve_criteria([*gspo, row("dynaweb", 8, 0.5, 0.01)], 0)
    assert never["dynaweb_reaches_gspo_final"] is False and never["dynaweb_reach_beyond_spread"] is None
