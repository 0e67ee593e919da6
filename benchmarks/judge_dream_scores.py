"""A judge's agreement, precision and recall on whole dreams, from ``dynaweb-eval-wm --judge-only`` reports.

    python benchmarks/judge_dream_scores.py benchmarks/results/judge_dagger2/*_s18_dreams.json

``dynaweb-eval-wm`` judges every dream and, for each real success, a copy cut before its last action (a
failure); its accuracy counts both. A training run's reward is the verdict on the whole dream, so this scores
the uncut cases only, as ``benchmarks/dream_rewards.py`` scores recorded rewards: agreement with the real
outcome, the share of SUCCESS verdicts that really succeed (precision) and of real successes judged SUCCESS
(recall). Prints one line per report and a JSON object.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dream_rewards_guards import compare

from dynaweb_env.world_model.judge import CUT_CASE


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
    paths = list(argv if argv is not None else sys.argv[1:])
    if not paths:
        raise SystemExit("usage: python benchmarks/judge_dream_scores.py REPORT.json [...]")
    scores = {path: dream_scores(json.loads(Path(path).read_text())) for path in paths}
    for path, row in scores.items():
        print(
            f"{path}: {row['dreams']} dreams, agreement {row['agreement']:.2f}, precision {row['precision']:.2f} "
            f"({row['judged_success_real_success']} of {row['judged_success']}), recall {row['recall']:.2f}"
        )
    print(json.dumps(scores, indent=1))
    return scores


if __name__ == "__main__":
    main()
