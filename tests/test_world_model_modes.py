"""benchmarks/world_model_modes.py: the issue's criteria are read off strict F1 (invalid outputs score 0)."""

from __future__ import annotations

from benchmark_scripts import load_benchmark


def summary(valid: float, f1: float, strict_f1: float, tokens: float) -> dict:
    return {"valid": valid, "f1": f1, "strict_f1": strict_f1, "tokens": tokens, "seconds": 1.0}


def test_criteria_use_strict_f1():
    summaries = {
        "copy": summary(1.0, 0.78, 0.78, 0),
        # Never valid: its plain F1 is the page it falls back to, i.e. copy's.
        "base": summary(0.0, 0.78, 0.0, 380),
        "tree": summary(0.95, 0.79, 0.75, 200),
        "patch": summary(0.98, 0.76, 0.76, 40),
    }
    comparison = load_benchmark("world_model_modes").compare_modes(summaries, "tree", "patch", "base")
    assert comparison["patch_over_tree_tokens"] == 0.2
    assert comparison["patch_at_most_25pct_tokens_at_equal_or_better_f1"]  # 0.76 >= 0.75 strict, though 0.76 < 0.79
    assert comparison["tree_strict_f1_points_over_untrained"] == 75.0
    assert comparison["tree_beats_untrained_by_20_points_with_95pct_validity"]
    assert comparison["tree_strict_f1_points_over_copy"] == -3.0
    summaries["tree"] = summary(0.90, 0.79, 0.75, 200)  # the same F1 with too few valid outputs
    assert not load_benchmark("world_model_modes").compare_modes(summaries, "tree", "patch", "base")[
        "tree_beats_untrained_by_20_points_with_95pct_validity"
    ]
