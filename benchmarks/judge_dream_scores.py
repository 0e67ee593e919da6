"""A judge's agreement, precision and recall on whole dreams, from ``dynaweb-eval-wm --judge-only`` reports.

    python benchmarks/judge_dream_scores.py benchmarks/results/judge_dagger2/*_s18_dreams.json

``dynaweb-eval-wm`` judges every dream and, for each real success, a copy cut before its last action (a
failure); its accuracy counts both. A training run's reward is the verdict on the whole dream, so this scores
the uncut cases only, as ``benchmarks/dream_rewards.py`` scores recorded rewards: agreement with the real
outcome, the share of SUCCESS verdicts that really succeed (precision) and of real successes judged SUCCESS
(recall). Prints one line per report and a JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.world_model.judge_cases import CUT_CASE

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.dream_rewards_guards import compare  # noqa: E402


def dream_scores(report: dict[str, Any]) -> dict[str, Any]:
    """Scores of the first judge of a report on its uncut cases (:func:`dream_rewards_guards.compare`)."""
    result = next(iter(report["results"].values()))
    rows = [
        {"dream_reward": row["verdict"], "real_reward": row["reward"], "replayed": True, "start_reproduced": True}
        for row in result["judge"]
        if not row["trajectory"].endswith(CUT_CASE)
    ]
    scores = compare(rows)
    counts = scores["counts"]
    return {
        "judge": next(iter(report["results"])),
        "dreams": scores["compared"],
        "agreement": scores["agreement"],
        "precision": scores["judge_success_precision"],
        "judged_success": counts["judged_success_real_success"] + counts["judged_success_real_failure"],
        "judged_success_real_success": counts["judged_success_real_success"],
        "recall": scores["real_success_recall"],
        "all_cases_accuracy": result["summary"].get("judge_accuracy"),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="dynaweb-eval-wm --judge-only reports (JSON)")
    paths = parser.parse_args(argv).reports
    scores = {path: dream_scores(json.loads(Path(path).read_text())) for path in paths}
    for path, row in scores.items():
        agreement, precision, recall = (_fmt(row[key]) for key in ("agreement", "precision", "recall"))
        print(
            f"{path}: {row['dreams']} dreams, agreement {agreement}, precision {precision} "
            f"({row['judged_success_real_success']} of {row['judged_success']}), recall {recall}"
        )
    print(json.dumps(scores, indent=1))
    return scores


def _fmt(value: float | None) -> str:
    """A score to two decimals; ``-`` where it is undefined (no SUCCESS verdict, or no real success)."""
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
