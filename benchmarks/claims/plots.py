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
