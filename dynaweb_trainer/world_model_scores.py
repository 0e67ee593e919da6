"""Scores of world-model predictions against real pages, and the report ``dynaweb-eval-wm`` writes of them.

The one definition of the fidelity metrics: node-line precision / recall / F1 and exact match of a predicted tree
(:func:`tree_scores`), their means over transitions with *strict* F1 (an invalid output scores 0) and judge
recalls (:func:`summarise`), the side-by-side table (:func:`format_table`) and the drift plot (:func:`plot_drift`).
:mod:`~dynaweb_trainer.evaluate_world_model` produces the records; ``benchmarks/merge_wm_evals.py`` joins the
records of sharded runs with the same functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.observation import axtree_nodes
from dynaweb_env.world_model.judge_cases import EARLY_FINAL_CASE


def tree_scores(predicted: str, real: str) -> dict[str, float]:
    """Precision, recall, F1 of predicted node lines against real ones (multisets) and exact match."""
    predicted_nodes, real_nodes = Counter(axtree_nodes(predicted)), Counter(axtree_nodes(real))
    hits = sum((predicted_nodes & real_nodes).values())
    precision = hits / sum(predicted_nodes.values()) if predicted_nodes else float(not real_nodes)
    recall = hits / sum(real_nodes.values()) if real_nodes else float(not predicted_nodes)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "exact": float(axtree_nodes(predicted) == axtree_nodes(real)),
    }


def strict_f1(record: dict) -> float:
    return float(record["f1"]) if record["valid"] else 0.0


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summarise(
    records: list[dict], drift: dict[int, list[dict]], judged: list[dict] | None, per_task: bool = True
) -> dict[str, Any]:
    """Means over transitions, strict F1 at each dream depth and the judge's accuracy and recalls.

    With ``per_task`` and records that name their task (``"task"``), ``summary["per_task"]`` holds the same
    summary for each task, so that a task the means hide (a long one among short ones) shows.
    """

    def column(key: str) -> list[float]:
        return [strict_f1(r) if key == "strict_f1" else float(r[key]) for r in records]

    summary = {
        "transitions": len(records),
        **{
            k: _mean(column(k))
            for k in (
                "valid",
                "precision",
                "recall",
                "f1",
                "strict_f1",
                "exact",
                "url_correct",
                "terminal_correct",
                "tokens",
                "seconds",
            )
        },
        "drift": {
            str(depth): {
                "n": len(rows),
                "f1": _mean([r["f1"] for r in rows]),
                "strict_f1": _mean([strict_f1(r) for r in rows]),
                "exact": _mean([r["exact"] for r in rows]),
            }
            for depth, rows in drift.items()
        },
    }
    if judged is not None:
        summary["judge_accuracy"] = _mean([float(r["correct"]) for r in judged])
        summary["judge_cases"] = len(judged)
        # Accuracy alone hides a judge that always says the same: GSPO needs both outcomes recognised.
        for outcome, real in (("success", True), ("failure", False)):
            correct = [float(r["correct"]) for r in judged if (r["reward"] >= 0.5) == real]
            summary[f"judge_{outcome}_recall"] = _mean(correct)
        early = [float(r["correct"]) for r in judged if EARLY_FINAL_CASE in r["trajectory"]]
        if early:  # the near misses a judge trained on successes and their cuts alone pays for
            summary["judge_early_final_recall"] = _mean(early)
        summary["judge_unreadable"] = sum(r["error"] is not None for r in judged)
    tasks = sorted({r["task"] for rows in (records, *drift.values(), judged or []) for r in rows if "task" in r})
    if per_task and tasks:
        summary["per_task"] = {
            task: summarise(
                [r for r in records if r.get("task") == task],
                {d: kept for d, rows in drift.items() if (kept := [r for r in rows if r.get("task") == task])},
                None if judged is None else [r for r in judged if r.get("task") == task],
                per_task=False,
            )
            for task in tasks
        }
    return summary


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """One row per world model: the one-step metrics, strict F1 at each depth and judge accuracy."""
    depths = sorted({int(d) for r in results.values() for d in r["summary"]["drift"]})
    head = ["world model", "valid", "P", "R", "F1", "strict", "exact", "URL", "term", "tok/tr", "s/tr"]
    head += [f"strict@{d}" for d in depths] + ["judge", "j-succ", "j-fail"]
    rows = [head]
    for label, result in results.items():
        s = result["summary"]

        def fmt(value: Any, digits: int = 2) -> str:
            return "-" if value is None else f"{value:.{digits}f}"

        row = [label] + [
            fmt(s[k])
            for k in ("valid", "precision", "recall", "f1", "strict_f1", "exact", "url_correct", "terminal_correct")
        ]
        row += [fmt(s["tokens"], 0), fmt(s["seconds"], 1)]
        row += [fmt(s["drift"].get(str(d), {}).get("strict_f1")) for d in depths]
        row += [fmt(s.get(k)) for k in ("judge_accuracy", "judge_success_recall", "judge_failure_recall")]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows)


def plot_drift(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.5))
    for label, result in results.items():
        drift = result["summary"]["drift"]
        depths = sorted(int(d) for d in drift)
        axis.plot(depths, [drift[str(d)]["strict_f1"] for d in depths], marker="o", label=label)
    axis.set_xlabel("dream depth (steps fed its own predictions)")
    axis.set_ylabel("next-tree node F1 (invalid output = 0)")
    axis.set_ylim(0, 1.05)
    axis.set_title("World-model drift on held-out real trajectories")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


__all__ = ["format_table", "plot_drift", "strict_f1", "summarise", "tree_scores"]
