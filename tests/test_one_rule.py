"""Each rule is defined once: the seed grammar, the split of a task seed, the seeds sent to servers, the labelled-head
scoring; the names they had before still import, as the same objects."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _defined_functions() -> Counter:
    names: Counter = Counter()
    for package in ("dynaweb_env", "dynaweb_trainer"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names.update(node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    return names


@pytest.mark.parametrize("name", ["parse_seeds", "split_of", "request_seeds", "score_positions"])
def test_the_rule_is_defined_once(name):
    assert _defined_functions()[name] == 1


def test_no_backend_keeps_its_own_request_seeds():
    assert _defined_functions()["_request_seeds"] == 0


def test_old_import_names_are_the_one_rule():
    from dynaweb_env.data import tasks
    from dynaweb_env.data.shipped import split_of
    from dynaweb_trainer import build_data, evaluate

    assert evaluate.parse_seeds is build_data.parse_seeds is tasks.parse_seeds
    assert evaluate.TASK_SUITES is tasks.TASK_SUITES and evaluate.DEFAULT_TASKS is tasks.DEFAULT_TASKS
    assert evaluate.MULTISTEP_TASKS is tasks.MULTISTEP_TASKS
    assert [build_data.split_of_seed(seed) for seed in range(200)] == [
        split_of(seed, validation=True) for seed in range(200)
    ]
    assert {split_of(seed) for seed in range(200)} == {"train", "test"}
    assert [split_of(seed, validation=True) for seed in range(5)] == ["train"] * 3 + ["validation", "test"]
