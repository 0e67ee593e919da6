"""Merging a partial invocation's report into the experiment's results file of the same configuration."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .catalogue import plan
from .jobs import Context, rel
from .statistics import aggregate

#: Fields of a report's ``config`` that are measurements, not settings: a rerun measures them again.
MEASURED_CONFIG_FIELDS = ("demonstrations_seconds",)


def _settings(report: dict) -> tuple[dict, dict]:
    """The report's configuration and budget as stored in JSON, measurements left out."""
    stored = json.loads(json.dumps({"config": report.get("config"), "budget": report.get("budget")}, default=str))
    config = {k: v for k, v in (stored["config"] or {}).items() if k not in MEASURED_CONFIG_FIELDS}
    return config, stored["budget"]


def with_reported_runs(output: Path, report: dict, ctx: Context) -> dict | None:
    """``report`` widened by the runs its results file already reports for the same configuration.

    A partial invocation (``--seeds 2``, ``--arms gspo-real``, or arms run side by side) then adds its runs
    to the experiment's file instead of replacing the others, also in a fresh checkout whose runs are gone:
    the file's own runs of identical commands stand in, as with ``--reuse-recorded``. The wider report lists
    the commands whose runs it kept in ``merged_with``. A file of another configuration (budget, models,
    guards...) is replaced, and the driver says so; unless this invocation evaluated nothing and the file
    holds evaluated runs (``None``: write nothing), so that a ``--skip-eval`` run never erases a results table.
    """
    try:
        previous = json.loads(output.read_text())
    except (OSError, ValueError):
        return report
    if not isinstance(previous, dict) or previous.get("experiment") != report["experiment"]:
        return report
    if _settings(previous) != _settings(report):
        evaluated = [any(run.get("evaluated") for run in r.get("runs") or ()) for r in (previous, report)]
        if evaluated == [True, False]:
            print(
                f"paper_claims: kept {rel(output)}: it reports evaluated runs of another configuration and this "
                "invocation evaluated none (--results-dir writes it elsewhere)"
            )
            return None
        print(f"paper_claims: {rel(output)} reported another configuration: replaced")
        return report
    warn_on_changed_reruns(previous, report, output)
    seeds = sorted(set(ctx.seeds) | set(previous.get("seeds") or ()))
    arms = {row["arm"] for row in report["summary"]} | {row["arm"] for row in previous.get("summary") or ()}
    wider = dataclasses.replace(ctx, seeds=seeds, recorded=(*ctx.recorded, output.resolve()))
    widened = aggregate(report["experiment"], plan(report["experiment"], wider, sorted(arms)), wider, report["command"])
    if len(widened["runs"]) == len(report["runs"]):
        return report
    # Each command once, this one aside: re-aggregating the same file would otherwise list itself again.
    merged = dict.fromkeys([*previous.get("merged_with", ()), previous["command"]])
    widened["merged_with"] = [command for command in merged if command != report["command"]]
    print(
        f"paper_claims: {report['experiment']}: kept the {len(widened['runs']) - len(report['runs'])} other runs "
        f"that {rel(output)} reports for this configuration"
    )
    return widened


def warn_on_changed_reruns(previous: dict, report: dict, output: Path) -> None:
    """Say where a run of identical commands now scores otherwise than ``output`` recorded it.

    A fresh checkout rebuilds shared jobs (the demonstrations, the SFT start) by the same commands, and a
    rebuilt one can score differently. The new result is reported, but the file's other runs may have
    trained from the recorded one, which a reader of the table has to know.
    """
    evaluated = [run for run in previous.get("runs") or () if run.get("evaluated")]
    before = {(run["arm"], tuple(run["output_dirs"])): run for run in evaluated}
    for run in report["runs"]:
        old = before.get((run["arm"], tuple(run["output_dirs"])))
        if old is None or not run.get("evaluated") or "recorded_in" in run or old["success"] == run["success"]:
            continue
        print(
            f"paper_claims: warning: {report['experiment']}/{run['run']} scores {run['success']:.3f} here, "
            f"{old['success']:.3f} as {rel(output)} recorded it: its identical commands, rerun, gave another "
            "result, and the file's other runs may have started from the recorded one"
        )
