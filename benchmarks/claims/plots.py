"""Plots of the paper-claims reports."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .catalogue import SWEEPS


def plot(report: dict[str, Any], path: Path) -> None:
    """Bars with the seed spread (``table1``, ``world_model``) or a line over the swept value (sweeps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if report["experiment"] == "learning_curve":
        plot_learning_curve(report, path)
        return
    metric, rows = report["metric"], report["summary"]
    means = [row[metric]["mean"] if row[metric]["mean"] is not None else math.nan for row in rows]
    stds = [row[metric]["std"] or 0.0 for row in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sweep = report["experiment"] in SWEEPS
    positions = [row["x"] for row in rows] if sweep else list(range(len(rows)))
    if sweep:
        ax.errorbar(positions, means, yerr=stds, marker="o", capsize=4, label="mean ± std over seeds")
        ax.set_xlabel(report["experiment"].replace("_", " "))
        ax.set_xticks(positions)
    else:
        ax.bar(positions, means, yerr=stds, capsize=4, color="#8fb3d9", label="mean ± std over seeds")
        # Runs reused from a committed report (--reuse-recorded) are named as such under their bar.
        recorded = {result["arm"] for result in report["runs"] if "recorded_in" in result}
        labels = []
        for row in rows:
            steps = row["real_env_steps_mean"]["total"]
            label = row["label"] + (" (recorded runs)" if row["arm"] in recorded else "")
            labels.append(label + ("" if steps is None else f"\n{steps:.0f} real steps"))
        ax.set_xticks(positions, labels, fontsize=8)
    for position, row in zip(positions, rows, strict=True):
        values = [value for value in row["values"] if value is not None]
        ax.scatter([position] * len(values), values, color="black", s=12, zorder=3)
    reference = report.get("sft_start")
    if reference:
        ax.axhline(reference["success"]["mean"], color="gray", linestyle="--", label=reference["label"])
    ylabel = {"success": "held-out success rate (real pages)", "train_success_last": "training success (NOT held-out)"}
    ax.set_ylabel(ylabel[metric])
    ax.set_ylim(0, 1.05)
    sft_seed = report["config"].get("sft_seed")
    seeds = (
        f"seeds {report['seeds']}"
        if sft_seed is None
        else f"RL seeds {report['seeds']}, one SFT start (seed {sft_seed})"
    )
    ax.set_title(f"{report['experiment']}: {seeds}" + ("" if report["complete"] else " (incomplete)"), fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_learning_curve(report: dict[str, Any], path: Path) -> None:
    """Two panels: held-out success against the real steps behind the policy (log scale), and against updates."""
    import matplotlib.pyplot as plt

    metric, rows = report["metric"], [row for row in report["summary"] if row["runs"]]
    start = next((row for row in rows if row["method"] == "sft"), None)
    fig, (by_steps, by_updates) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, label, color in (
        ("gspo-real", "GSPO, real browser", "#d98f3f"),
        ("dynaweb", "DynaWeb, dreams only", "#3f7fd9"),
    ):
        points = sorted((row for row in rows if row["method"] == method), key=lambda row: row["x"])
        if start is not None:  # every curve starts at the shared SFT start
            start_steps = dict(start["real_env_steps_mean"])
            if method == "dynaweb" and points:  # the world model's data exists before the first update
                start_steps["total"] = points[0]["real_env_steps_mean"]["total"]
            points = [{**start, "real_env_steps_mean": start_steps}, *points]
        points = [row for row in points if row[metric]["mean"] is not None]  # trained, not yet evaluated
        means = [row[metric]["mean"] for row in points]
        stds = [row[metric]["std"] or 0.0 for row in points]
        steps = [row["real_env_steps_mean"]["total"] for row in points]
        updates = [row["x"] for row in points]
        if None not in steps:
            by_steps.errorbar(steps, means, yerr=stds, marker="o", capsize=3, color=color, label=label)
        by_updates.errorbar(updates, means, yerr=stds, marker="o", capsize=3, color=color, label=label)
        for row, x_steps, x_updates in zip(points, steps, updates, strict=True):
            values = [value for value in row["values"] if value is not None]
            by_updates.scatter([x_updates] * len(values), values, color=color, s=10, alpha=0.6, zorder=3)
            if x_steps is not None:
                by_steps.scatter([x_steps] * len(values), values, color=color, s=10, alpha=0.6, zorder=3)
    # The goal of issue 19: DynaWeb at GSPO's final success with at most a tenth of GSPO's final real steps.
    gspo_steps = [row["real_env_steps_mean"]["total"] for row in rows if row["method"] == "gspo-real"]
    if gspo_steps and None not in gspo_steps:
        goal = 0.1 * max(gspo_steps)
        by_steps.axvline(goal, color="gray", linestyle=":", label=f"0.10x GSPO's final real steps ({goal:.0f})")
    by_steps.set_xscale("log")
    by_steps.set_xlabel("real steps behind the policy (demonstrations + rollouts + world-model data)", fontsize=8)
    by_updates.set_xlabel("policy updates")
    ylabel = {"success": "held-out success rate (real pages)", "train_success_last": "training success (NOT held-out)"}
    for axis in (by_steps, by_updates):
        axis.set_ylabel(ylabel[metric])
        axis.set_ylim(0, 1.05)
        axis.legend(loc="lower right", fontsize=8)
    title = f"learning curve: RL seeds {report['seeds']}" + ("" if report["complete"] else " (incomplete)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
