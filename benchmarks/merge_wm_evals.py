"""Join the reports of ``dynaweb-eval-wm --shard K/N`` runs into one report, as one run would have written it.

Each shard scores a disjoint slice of the same trajectories (every N-th from the K-th), so N processes can
share the cores of a machine. This script concatenates their per-transition records and judge cases per world
model and summarises them again with the evaluator's own :func:`~dynaweb_trainer.world_model_scores.summarise`
(drift summaries, which keep no per-transition rows, are joined as means weighted by their counts).

Command (the one behind ``benchmarks/results/heldout/full_patch_retries2.json``)::

    for k in 0 1; do
        dynaweb-eval-wm --world-models smollm2-135m-wm-patch --no-judge --max-depth 0 --data heldout.jsonl \\
            --split all --invalid-retries 2 --shard $k/2 --output runs/eval/shard$k.json &
    done; wait
    python benchmarks/merge_wm_evals.py runs/eval/shard0.json runs/eval/shard1.json \\
        --output benchmarks/results/heldout/full_patch_retries2.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dynaweb_trainer.evaluate_world_model import parse_shard
from dynaweb_trainer.world_model_scores import format_table, summarise


def _unsharded_settings(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report["settings"].items() if k != "shard"}


def _check_shards(reports: list[dict[str, Any]]) -> None:
    """Refuse reports that are not shards of one evaluation (other settings, data or world models)."""

    def what(report: dict[str, Any]) -> tuple:
        return _unsharded_settings(report), report["data"], report["split"]

    first = reports[0]
    shards = {parse_shard(report["settings"].get("shard", "0/1")) for report in reports}
    count = len(reports)
    if len(shards) != count or {shards_of for _, shards_of in shards} != {count}:
        found = sorted(f"{k}/{n}" for k, n in shards)
        raise SystemExit(f"merge_wm_evals: need the {count} distinct shards K/{count}, got {found}")
    for report in reports[1:]:
        if what(report) != what(first):
            raise SystemExit("merge_wm_evals: the reports differ in settings, data or split: not one evaluation")
        if report["results"].keys() != first["results"].keys():
            raise SystemExit("merge_wm_evals: the reports evaluated different world models")


def _joined_drift(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    drift: dict[str, dict[str, float]] = {}
    for depth in sorted({d for result in results for d in result["summary"]["drift"]}, key=int):
        rows = [result["summary"]["drift"][depth] for result in results if depth in result["summary"]["drift"]]
        n = sum(row["n"] for row in rows)
        drift[depth] = {"n": n} | {
            key: round(sum(row[key] * row["n"] for row in rows) / n, 4) for key in ("f1", "strict_f1", "exact")
        }
    return drift


def merge(reports: list[dict[str, Any]], commands: list[str]) -> dict[str, Any]:
    """One report from the reports of all shards of one evaluation."""
    _check_shards(reports)
    results = {}
    for label in reports[0]["results"]:
        parts = [report["results"][label] for report in reports]
        records = [record for part in parts for record in part["transitions"]]
        judged = None if parts[0]["judge"] is None else [case for part in parts for case in part["judge"]]
        summary = summarise(records, {}, judged)
        summary["drift"] = _joined_drift(parts)
        results[label] = {
            "spec": parts[0]["spec"],
            "output_mode": parts[0]["output_mode"],
            "summary": summary,
            "seconds": round(sum(part["seconds"] for part in parts), 1),
            "transitions": records,
            "judge": judged,
        }
    settings = _unsharded_settings(reports[0])
    return {
        "command": commands,
        "data": reports[0]["data"],
        "split": reports[0]["split"],
        "trajectories": sum(report["trajectories"] for report in reports),
        "tasks": len({record["trajectory"].split("/")[0] for r in results.values() for record in r["transitions"]}),
        "settings": settings | {"shards": len(reports)},
        "table": format_table(results),
        "results": results,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="The JSON reports of the shards, in any order.")
    parser.add_argument("--output", required=True, help="The joined JSON report.")
    args = parser.parse_args(argv)
    reports = [json.loads(Path(path).read_text()) for path in args.reports]
    commands = [report["command"] for report in reports]
    commands.append(f"python benchmarks/merge_wm_evals.py {' '.join(args.reports)} --output {args.output}")
    joined = merge(reports, commands)
    Path(args.output).write_text(json.dumps(joined, indent=2) + "\n")
    print(joined["table"])
    return joined


if __name__ == "__main__":
    main()
