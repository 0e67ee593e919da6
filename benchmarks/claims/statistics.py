"""Results of the paper-claims runs: per-run results, pairing with the SFT start, spreads over seeds, reports."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .catalogue import EXPERIMENT_DOCS, Arm, Run, plan
from .jobs import (
    COLLECT_SECONDS_FILE,
    TRAINED_WORLD_MODEL,
    CheckpointJob,
    Context,
    collect_job,
    evaluation_of,
    read_json,
    rel,
)


def count_actions(path: Path, split: str = "train", successful_only: bool = False) -> int:
    """Actions (= real transitions) of the trajectories of ``split`` in a shipped JSONL file."""
    from dynaweb_env.data.io import read_trajectories

    return sum(
        len(trajectory.actions)
        for trajectory in read_trajectories(path)
        if trajectory.metadata.get("split") == split and (trajectory.success or not successful_only)
    )


def world_model_transitions(spec: str) -> int | None:
    """The real transitions a trained world model learned from, as ``dynaweb-train-wm`` recorded them beside it.

    ``None`` (unknown) for a model without that record: a prompted model, or one trained elsewhere. The
    transitions of the trajectories behind the judge's labels are not counted here: its records do not hold
    them (``wm_sft_summary.json`` of a judge counts trajectories), so a DynaWeb total is a lower bound. An
    averaged adapter (``dynaweb-average-adapters``) counts its largest source's transitions, a lower bound too:
    its sources' data may overlap (the shipped world model's two sources both trained on the train split).
    """
    from dynaweb_env.models import resolve_model
    from dynaweb_env.ship import AVERAGE_RECORD_FILE, TRAINING_RECORD_FILE

    def transitions(summary: dict[str, Any] | None) -> int | None:
        if not summary or summary.get("examples", "world_model") != "world_model":  # older records: world models
            return None
        return (summary.get("data") or {}).get("transitions")

    try:
        path = resolve_model(spec)
    except ValueError:
        return None
    if not isinstance(path, Path):
        return None
    if (average := read_json(path / AVERAGE_RECORD_FILE)) is not None:
        known = [n for source in average["sources"] if (n := transitions(source.get("training"))) is not None]
        return max(known, default=None)
    return transitions(read_json(path / TRAINING_RECORD_FILE))


def world_model_steps(arm: Arm) -> int | None:
    """The real steps behind an arm's world model beyond the demonstrations (``None``: unknown)."""
    if arm.world_model in ("shipped", "custom"):
        return world_model_transitions(arm.train_flags.get("--world-model", TRAINED_WORLD_MODEL))
    return {"untrained": 0, "demonstrations": 0, None: 0}.get(arm.world_model)


def env_steps(run: Run, train: dict[str, Any] | None, demonstrations: Path) -> dict[str, int | None]:
    """The real-environment steps behind a run's policy, by source.

    ``total`` counts distinct real interactions: demonstration steps (what SFT and expert replays
    use), the policy's real-browser steps in training, and the real transitions the world model learned from
    (:func:`world_model_transitions`; ``None`` when unknown). Replays of demonstrations
    are reported apart (``expert_replay``), not added: they reuse steps already counted. So is the data of a
    world model and judge trained on the demonstrations (``--model-data demonstrations``): 0 extra steps.
    """
    sft = count_actions(demonstrations, successful_only=True) if run.arm.method != "base" else 0
    online = train.get("real_env_steps") if train else 0
    replay = train.get("expert_env_steps") if train else 0
    world_model = world_model_steps(run.arm)
    parts = (sft, online, world_model)
    total = None if any(part is None for part in parts) else sum(parts)
    return {
        "sft_demonstrations": sft,
        "online_real": online,
        "expert_replay": replay,
        "world_model_extra": world_model,
        "total": total,
    }


def checkpoint_step_counts(checkpoint: Path) -> dict[str, Any]:
    """The environment steps a training run had taken when it saved ``checkpoint`` (its ``EnvStepCounter``).

    Raises:
        ValueError: If the checkpoint holds no step counter (a run older than the counter's saving).
    """
    state = read_json(checkpoint / "trainer_state.json") or {}
    counter = (state.get("stateful_callbacks") or {}).get("EnvStepCounter")
    if not counter:
        raise ValueError(f"{rel(checkpoint)} holds no EnvStepCounter: its real steps are unknown")
    attributes = counter["attributes"]
    return {
        "global_step": state.get("global_step"),
        "real_env_steps": attributes["real_env_steps"],
        "expert_env_steps": attributes["expert_env_steps"],
        "checkpoint": rel(checkpoint),
    }


def build_result(run: Run, ctx: Context) -> dict[str, Any]:
    """The ``result.json`` of a finished run, from the summaries its tools wrote."""
    sft = read_json(run.sft.result_file) if run.sft else None
    train = read_json(run.train.result_file) if run.train else None
    if isinstance(run.train, CheckpointJob):
        # A curve's point may be recorded while its run still trains: its steps are the checkpoint's, and
        # ``training_finished`` says whether the rest of the summary (time, last success) is there yet.
        counts = checkpoint_step_counts(run.train.checkpoint_dir)
        train = {**(train or {}), **counts, "training_finished": train is not None}
    evaluation = read_json(run.eval.result_file) if run.eval else None
    summary = (evaluation or {}).get("summary", {})
    return {
        "experiment": run.experiment,
        "run": run.name,
        "arm": run.arm.key,
        "method": run.arm.method,
        "label": run.arm.label,
        "x": run.arm.x,
        "seed": run.seed,
        "evaluated": evaluation is not None,
        "success": summary.get("success_rate"),
        "eval_episodes": summary.get("episodes"),
        "eval_mean_steps": summary.get("mean_steps"),
        "train_success_last": (train or {}).get("success_rate_last"),
        "real_env_steps": env_steps(run, train, ctx.train_data),
        "seconds": {
            "sft": (sft or {}).get("runtime_s"),
            "train": (train or {}).get("train_seconds"),
            "eval": (evaluation or {}).get("wall_seconds"),
        },
        "commands": [job.command for job in run.jobs],
        "output_dirs": [rel(job.output_dir) for job in run.jobs],
        "train_summary": train,
    }


def current_result(run: Run, ctx: Context) -> dict[str, Any] | None:
    """The run's result in this configuration, ``None`` while it is unfinished.

    ``result.json`` sits at ``<experiment>/<run name>/``, whatever the budget, models or data, so it
    may hold another configuration's result: that one is stale, and the result is rebuilt from the
    tools' outputs when this configuration's jobs are all done (switching back and forth costs nothing).
    """
    result = read_json(run.result_file)
    mine = [rel(job.output_dir) for job in run.jobs]
    if result is not None and result.get("output_dirs", [])[: len(mine)] == mine:
        recorded_early = (result.get("train_summary") or {}).get("training_finished") is False
        if not (recorded_early and isinstance(run.train, CheckpointJob) and run.train.finished()):
            return result  # else rebuilt below, with the finished run's summary
    if run.jobs and all(job.done() for job in run.jobs):
        return build_result(run, ctx)
    return None


def recorded_result(run: Run, ctx: Context) -> dict[str, Any] | None:
    """The run as recorded in a committed results file (``--reuse-recorded``), if its commands were identical.

    A job's output directory is named by the hash of its command, so equal ``output_dirs`` mean the same
    commands from the same SFT start. Used only where this run's outputs are not on disk. The result says
    where and when it was recorded (``recorded_in``, ``recorded_at``): the code may have changed since, which
    the reader has to weigh (the README says what was checked). Its page-by-page pairing is the recorded one.
    """
    mine = [rel(job.output_dir) for job in run.jobs]
    for path in ctx.recorded:
        report = read_json(path) or {}
        for result in report.get("runs", []):
            if result.get("output_dirs") == mine and result.get("arm") == run.arm.key:
                # A result already standing in keeps where it was first recorded.
                where = {"recorded_in": rel(path), "recorded_at": report.get("written_at")}
                where = {key: result.get(key, value) for key, value in where.items()}
                return {**result, "experiment": run.experiment, "run": run.name, **where}
    return None


def paired_with_sft_start(run: Run, ctx: Context) -> dict[str, Any] | None:
    """An RL run's held-out episodes against its own SFT start's, page by page (same task and seed).

    ``gained``: pages the start failed and the run solves; ``lost``: the reverse. Two runs with the
    same success rate can differ a lot here, which the mean alone hides. ``per_task``: successes of
    the start and of the run, by task. ``None`` until both evaluations exist.
    """
    if run.arm.method not in ("gspo-real", "dynaweb") or run.sft is None or run.eval is None:
        return None
    start_eval = evaluation_of(ctx, run.sft)
    mine, start = read_json(run.eval.result_file), read_json(start_eval.result_file)
    if mine is None or start is None:
        return None

    def outcomes(evaluation: dict[str, Any]) -> dict[tuple[str, int], bool]:
        return {(episode["task_id"], episode["task_seed"]): episode["success"] for episode in evaluation["episodes"]}

    ours, theirs = outcomes(mine), outcomes(start)
    shared = sorted(ours.keys() & theirs.keys())
    per_task: dict[str, dict[str, int]] = {}
    for task, seed in shared:
        counts = per_task.setdefault(task, {"episodes": 0, "sft_start": 0, "run": 0})
        counts["episodes"] += 1
        counts["sft_start"] += theirs[task, seed]
        counts["run"] += ours[task, seed]
    return {
        "sft_start_eval": rel(start_eval.result_file),
        "episodes": len(shared),
        "gained": sum(ours[key] and not theirs[key] for key in shared),
        "lost": sum(theirs[key] and not ours[key] for key in shared),
        "per_task": per_task,
    }


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample standard deviation (``None`` below 2 values), min and max."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def summarize(results: Sequence[dict[str, Any]], arms: Sequence[Arm], metric: str) -> list[dict[str, Any]]:
    """One row per arm: the metric over seeds and the mean real-environment steps by source."""
    rows = []
    for arm in arms:
        mine = [result for result in results if result["arm"] == arm.key]
        values = [result[metric] for result in mine if result[metric] is not None]
        steps = {}
        for key in ("sft_demonstrations", "online_real", "expert_replay", "world_model_extra", "total"):
            counts = [result["real_env_steps"][key] for result in mine]
            steps[key] = statistics.fmean(counts) if counts and None not in counts else None
        seconds = {
            stage: spread([value for result in mine if (value := (result.get("seconds") or {}).get(stage)) is not None])
            for stage in ("sft", "train", "eval")
        }
        rows.append(
            {
                "arm": arm.key,
                "method": arm.method,
                "label": arm.label,
                "x": arm.x,
                "runs": len(mine),
                "seeds": [result["seed"] for result in mine],
                "values": [result[metric] for result in mine],
                metric: spread(values),
                "real_env_steps_mean": steps,
                "seconds": seconds,
            }
        )
    return rows


def table1_criteria(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's bar: DynaWeb >= SFT + 10 points, with <= 10% of real-browser GSPO's real steps."""
    by_arm = {row["arm"]: row for row in rows}

    def get(arm: str, *keys: str) -> Any:
        value: Any = by_arm.get(arm)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    dynaweb, sft = get("dynaweb", "success", "mean"), get("sft", "success", "mean")
    gain = None if dynaweb is None or sft is None else 100 * (dynaweb - sft)
    ratios = {}
    for name, keys in (("total", ("total",)), ("training_only", ("online_real", "world_model_extra"))):
        parts = [[get(arm, "real_env_steps_mean", key) for key in keys] for arm in ("dynaweb", "gspo-real")]
        ours, theirs = (None if None in part else sum(part) for part in parts)
        ratios[name] = None if ours is None or not theirs else ours / theirs
    return {
        "dynaweb_minus_sft_points": gain,
        "dynaweb_beats_sft_by_10_points": None if gain is None else gain >= 10,
        "dynaweb_over_gspo_real_steps": ratios,
        "dynaweb_at_most_10pct_of_gspo_real_steps": None if ratios["total"] is None else ratios["total"] <= 0.1,
    }


def dreams_only_criteria(results: Sequence[dict[str, Any]], sft: dict[str, Any] | None) -> dict[str, Any]:
    """The decisive bar: dreams only (``dynaweb-dreams``) gain over the SFT start at least as much as real-browser
    GSPO does, with the same updates; seed by seed (paired by seed) and on the mean over seeds."""
    start = (sft or {}).get("success", {}).get("mean")
    by_seed: dict[int, dict[str, float]] = {}
    for result in results:
        if result["arm"] in ("dynaweb-dreams", "gspo-real") and result["success"] is not None:
            by_seed.setdefault(result["seed"], {})[result["arm"]] = result["success"]
    paired = {seed: arms for seed, arms in sorted(by_seed.items()) if len(arms) == 2}
    if start is None or not paired:
        return {"sft_start_success": start, "seeds_compared": [], "dreams_only_at_least_gspo_gain": None}
    gains = {
        seed: {arm: 100 * (value - start) for arm, value in arms.items()} for seed, arms in paired.items()
    }  # fmt: skip
    dreams = statistics.fmean(gain["dynaweb-dreams"] for gain in gains.values())
    gspo = statistics.fmean(gain["gspo-real"] for gain in gains.values())
    return {
        "sft_start_success": start,
        "seeds_compared": list(paired),
        "gain_points_by_seed": gains,
        "dreams_only_gain_points": dreams,
        "gspo_real_gain_points": gspo,
        "dreams_only_at_least_gspo_gain": dreams >= gspo,
        "seeds_where_dreams_only_at_least_gspo": sum(g["dynaweb-dreams"] >= g["gspo-real"] for g in gains.values()),
    }


def learning_curve_criteria(
    rows: Sequence[dict[str, Any]], dynaweb_training_steps: int | None, models_from_demonstrations: bool = False
) -> dict[str, Any]:
    """Issue 19's question: at what share of GSPO's real steps does DynaWeb reach GSPO's final success?

    GSPO's final success is the mean over seeds at its last checkpoint. DynaWeb's first checkpoint whose mean
    reaches it gives the ratio of the two mean real-step totals (``None`` where DynaWeb never reaches it), for
    the totals and for training alone (rollouts and the world model's data, the SFT demonstrations left out).
    A third, ``world_model_data``, is issue 19's own accounting: DynaWeb's rollouts plus every real transition
    its world model learned from, the demonstrations included where it learned from them
    (``models_from_demonstrations``), against GSPO's rollouts alone. ``dynaweb_reach_margin`` is by how much
    that checkpoint's mean passes GSPO's final mean, and ``dynaweb_reach_beyond_spread`` whether it passes by more
    than either side's standard deviation over seeds (``None`` with one seed).

    ``dynaweb_training_steps`` are DynaWeb's real steps in training as its configuration fixes them (dreams take
    none, so its world model's data beyond the demonstrations; ``None``: unknown). In the issue's accounting
    (with the demonstrations, where the world model learned from them) and at GSPO's measured real steps per
    update, ``gspo_training_real_steps_for_10pct`` is what the 0.10x goal asks of GSPO's rollouts (ten times
    DynaWeb's) and ``gspo_updates_for_10pct`` how many updates that is. These need no DynaWeb curve.
    """

    def curve(method: str) -> list[dict[str, Any]]:
        points = [row for row in rows if row["method"] == method and row["success"]["mean"] is not None]
        return sorted(points, key=lambda row: row["x"])

    gspo, dynaweb = curve("gspo-real"), curve("dynaweb")
    if not gspo:
        return {"gspo_final_success": None, "dynaweb_reaches_gspo_final": None, "real_step_ratio": None}
    final = gspo[-1]
    per_update = (final["real_env_steps_mean"]["online_real"] or 0) / final["x"] if final["x"] else 0
    demonstrations = final["real_env_steps_mean"]["sft_demonstrations"] if models_from_demonstrations else 0
    needed = None if dynaweb_training_steps is None else 10 * (dynaweb_training_steps + demonstrations)
    criteria = {
        "gspo_final_updates": final["x"],
        "gspo_final_success": final["success"],
        "gspo_final_real_steps": final["real_env_steps_mean"],
        "gspo_real_steps_per_update": per_update,
        "dynaweb_training_real_steps": dynaweb_training_steps,
        "gspo_training_real_steps_for_10pct": needed,
        "gspo_updates_for_10pct": None if needed is None or not per_update else needed / per_update,
    }
    if not dynaweb:
        return {**criteria, "dynaweb_reaches_gspo_final": None, "real_step_ratio": None}
    reached = next((row for row in dynaweb if row["success"]["mean"] >= final["success"]["mean"]), None)
    training = ("online_real", "world_model_extra")
    world_model_data = (*training, "sft_demonstrations") if models_from_demonstrations else training
    accountings = {  # name: (DynaWeb's parts, GSPO's parts)
        "total": (("total",), ("total",)),
        "training_only": (training, training),
        "world_model_data": (world_model_data, ("online_real",)),
    }
    ratios: dict[str, float | None] = dict.fromkeys(accountings)
    if reached is not None:
        for name, (our_keys, their_keys) in accountings.items():
            parts = [
                [row["real_env_steps_mean"][key] for key in keys]
                for row, keys in ((reached, our_keys), (final, their_keys))
            ]
            ours, theirs = (None if None in part else sum(part) for part in parts)
            ratios[name] = None if ours is None or not theirs else ours / theirs
    # Issue 19 asks to say where two settings differ by less than their spread over seeds: a mean that reaches
    # GSPO's by less than either side's standard deviation is not a difference the seeds can tell apart.
    margin = None if reached is None else reached["success"]["mean"] - final["success"]["mean"]
    stds = [] if reached is None else [row["success"]["std"] for row in (reached, final)]
    return {
        **criteria,
        "dynaweb_best_success": max((row["success"] for row in dynaweb), key=lambda value: value["mean"]),
        "dynaweb_reaches_gspo_final": reached is not None,
        "dynaweb_updates_to_reach": None if reached is None else reached["x"],
        "dynaweb_reach_margin": margin,
        "dynaweb_reach_beyond_spread": None if margin is None or None in stds else margin > max(stds),
        "real_step_ratio": ratios,
        "at_most_10pct_by_accounting": {name: None if r is None else r <= 0.1 for name, r in ratios.items()},
    }


def aggregate(experiment: str, runs: Sequence[Run], ctx: Context, command: str) -> dict[str, Any]:
    """The experiment's results file: configuration, every finished run, and the per-arm summary.

    The plotted metric is held-out success when any run was evaluated, else (``--skip-eval``) the
    training success of the last quarter of updates, which is named as such.
    """
    per_run = [current_result(run, ctx) or recorded_result(run, ctx) for run in runs]
    for run, result in zip(runs, per_run, strict=True):
        if result is not None and "recorded_in" not in result:  # not stored in result.json: finished runs gain it
            result["vs_sft_start"] = paired_with_sft_start(run, ctx)
    results = [result for result in per_run if result is not None]
    metric = "success" if any(result["evaluated"] for result in results) else "train_success_last"
    arms = list({run.arm.key: run.arm for run in runs}.values())
    rows = summarize(results, arms, metric)
    report = {
        "experiment": experiment,
        "description": EXPERIMENT_DOCS[experiment],
        "command": command,
        "metric": metric,
        "seeds": ctx.seeds,
        "budget": dataclasses.asdict(ctx.budget),
        "config": {
            "policy": ctx.policy,
            "world_model": ctx.world_model or TRAINED_WORLD_MODEL,
            "untrained_world_model": ctx.untrained_world_model,
            "judge": ctx.judge,
            "tasks": ctx.tasks,
            "eval_seeds": ctx.budget.eval_seeds,
            "train_data": rel(ctx.train_data),
            "demonstrations": "shipped" if ctx.demonstrations is None else collect_job(ctx).command,
            "demonstrations_seconds": demonstrations_seconds(ctx),
            "skip_eval": ctx.skip_eval,
            "sft_seed": ctx.sft_seed,
            "reward_guards": ctx.reward_guards,
            "dream_starts": ctx.dream_starts,
            "dream_resamples": ctx.dream_resamples,
            "task_order": ctx.task_order,
            "model_data": ctx.model_data,
            "judge_near_misses": ctx.judge_near_misses,
        },
        "summary": rows,
        "complete": all(result is not None and (ctx.skip_eval or result["evaluated"]) for result in per_run),
        "missing": [f"{run.experiment}/{run.name}" for run, found in zip(runs, per_run, strict=True) if not found],
        "recorded_runs": [f"{result['run']}: {result['recorded_in']}" for result in results if "recorded_in" in result],
        "runs": results,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if experiment == "table1":
        report["criteria"] = table1_criteria(rows)
    elif experiment == "learning_curve":
        evaluated = metric == "success"  # training success is no measure of what a policy reached
        dynaweb = next((run for run in runs if run.arm.method == "dynaweb"), None)
        planned = None if dynaweb is None else world_model_steps(dynaweb.arm)
        finished = [row for row in rows if row["runs"]]
        from_demonstrations = dynaweb is not None and dynaweb.arm.world_model == "demonstrations"
        report["criteria"] = learning_curve_criteria(finished, planned, from_demonstrations) if evaluated else None
    elif experiment == "dreams_only":
        sft = next((row for row in rows if row["arm"] == "sft"), None)
        report["criteria"] = dreams_only_criteria(results, sft if sft and sft["runs"] else None)
    else:
        report["sft_start"] = sft_start_reference(ctx, metric)
    return report


def demonstrations_seconds(ctx: Context) -> float | None:
    """Measured seconds of the demonstration collection (``None`` for the shipped ones or before it ran)."""
    if ctx.demonstrations is None:
        return None
    return (read_json(collect_job(ctx).output_dir / COLLECT_SECONDS_FILE) or {}).get("seconds")


def sft_start_reference(ctx: Context, metric: str) -> dict[str, Any] | None:
    """The SFT start's own score, drawn as the line an RL arm has to clear (``None`` until evaluated).

    Every arm of the sweeps and of ``world_model`` starts from the SFT start of its seed (or of
    ``--sft-seed``): its evaluation is the ``table1`` SFT run's, shared, so reading it costs nothing.
    Where that evaluation is gone from disk, a recorded one of identical commands stands in, named in
    ``recorded_in``.
    """
    if metric != "success":
        return None
    runs = plan("table1", ctx, ["sft"])
    results = [(run.name, current_result(run, ctx) or recorded_result(run, ctx)) for run in runs]
    evaluated = [(name, result) for name, result in results if result is not None and result["evaluated"]]
    if not evaluated:
        return None
    reference = {
        "label": "SFT start",
        "runs": [f"table1/{name}" for name, _ in evaluated],
        "success": spread([result["success"] for _, result in evaluated]),
    }
    recorded_in = sorted({result["recorded_in"] for _, result in evaluated if "recorded_in" in result})
    return reference | ({"recorded_in": recorded_in} if recorded_in else {})
