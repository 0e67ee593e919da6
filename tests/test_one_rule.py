"""Each rule is defined once: the seed grammar, the split of a task seed, the seeds sent to servers and engines, the
labelled-head scoring, the dream envs' keywords; the names they had before still import, as the same objects."""

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


def test_both_dream_envs_take_the_same_keywords():
    import dataclasses
    import inspect

    from dynaweb_env.envs.dream import DreamWebEnv
    from dynaweb_env.envs.dream_setup import DreamSettings
    from dynaweb_env.envs.dream_vector import DreamWebVectorEnv

    def keywords(cls) -> dict:
        return {name: p.default for name, p in inspect.signature(cls).parameters.items() if p.kind == p.KEYWORD_ONLY}

    single, vector = keywords(DreamWebEnv), keywords(DreamWebVectorEnv)
    assert list(single) == [field.name for field in dataclasses.fields(DreamSettings)]
    assert single == {name: default for name, default in vector.items() if name != "autoreset_mode"}
    assert list(inspect.signature(DreamWebVectorEnv).parameters) == ["num_envs", "autoreset_mode", *single]
    assert single["dream_length"] == 5 and single["world_model_temperature"] == 0.7  # the defaults they had
    with pytest.raises(TypeError, match=r"DreamWebVectorEnv got unexpected keyword argument\(s\) \['dream_lenght'\]"):
        DreamWebVectorEnv(num_envs=2, dream_lenght=3)


def test_every_31_bit_request_seed_comes_from_request_seeds():
    """No backend (ct2's was one) narrows sequence_seeds to a server's bits itself: request_seeds does, in base.py."""
    for path in (ROOT / "dynaweb_env").rglob("*.py"):
        calls = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)]
        for call in calls:
            name = getattr(call.func, "id", getattr(call.func, "attr", ""))
            if name == "sequence_seeds" and any(keyword.arg == "bits" for keyword in call.keywords):
                assert path.name == "base.py", f"{path.relative_to(ROOT)}:{call.lineno} derives request seeds itself"
