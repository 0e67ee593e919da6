"""The models this project trained and ships inside the package, and what is recorded beside each.

Shipped adapters (LoRA adapters this project trained, inside the package, a few MB each; they load
onto their embedded base model, see :func:`~dynaweb_env.models.adapter_base`):

- ``smollm2-135m-wm``: the web world model, ``smollm2-135m`` fine-tuned by ``dynaweb-train-wm`` on
  the shipped MiniWoB++ transitions in tree mode (the paper's format: Δ, then the next tree); the default
  of ``DreamWeb-v0`` with ``output_mode="tree"``.
- ``smollm2-135m-wm-patch``: the world model in patch mode (Δ as edits of the current tree), retrained with
  compact prompts on the large dataset's train split (expert and exploration, 24 tasks); the world model of
  ``dynaweb-train``'s presets and of every recorded training run (:data:`TRAINING_WORLD_MODEL`).
- ``smollm2-135m-wm-patch-all``: ``smollm2-135m-wm-patch`` trained further on the large and the all-tasks data
  (53 tasks, long ones included); better on held-out pages of the 24 tasks and of the long ones, and its dreams'
  rewards agree more often with the real outcome. ``DreamWeb-v0`` dreams with it by default
  (:data:`DEFAULT_WORLD_MODEL`; docs/world-model.md, "A fourth retrain, shipped").
- ``smollm2-135m-judge``: the trajectory judge, ``smollm2-135m`` fine-tuned by ``dynaweb-train-wm
  --examples judge --judge_prefixes last`` (compact prompts, which leave out the agent's reasoning) on the
  real outcomes of the large dataset's train split (24 tasks, :data:`~dynaweb_env.data.shipped.LARGE_DATA_DIR`;
  the judge of the runs recorded in ``benchmarks/results/paper_claims_*.json``).
- ``smollm2-135m-judge-dagger``: the trajectory judge trained further on the dreams it misjudged (DAgger): from
  a grounded-prompt judge, on dreams of dreams-only training runs relabelled by their real replays, near-miss
  pages and real outcomes (:data:`~dynaweb_env.data.shipped.DREAMED_JUDGE_DATA_DIR`); prompted in the ``grounded``
  style recorded beside it, with its success threshold (0.4, :func:`model_success_threshold`). The default judge
  everywhere (:data:`DEFAULT_JUDGE`: ``DreamWeb-v0``, ``dynaweb-train``,
  ``dynaweb-dream``, ``dynaweb-serve``, the integrations, the paper's-claims benchmark).
- ``smollm2-135m-judge-all``: the DAgger judge trained further on the all-tasks data (53 tasks,
  :data:`~dynaweb_env.data.shipped.ALL_TASKS_DATA_DIR`); better on held-out pages of new and long tasks, but it pays
  more wrong actions on the 24 tasks. The default judge of dreams of any task the DAgger judge never trained on
  (:func:`default_judge`; docs/world-model.md, "A judge for all tasks").
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ShippedAdapter:
    """A LoRA adapter inside the package: ``directory`` is relative to ``dynaweb_env/adapters``.

    ``output_mode`` is the world-model output mode it was trained for (``None``: not a world model). The
    prompt style it was trained on is recorded beside its weights (:func:`model_prompt_style`).
    """

    name: str
    directory: str
    description: str
    output_mode: str | None = None

    @property
    def path(self) -> Path:
        return Path(__file__).parent / "adapters" / self.directory


SHIPPED_ADAPTERS: dict[str, ShippedAdapter] = {
    "smollm2-135m-wm": ShippedAdapter(
        "smollm2-135m-wm",
        "smollm2-135m-wm",
        "web world model (tree mode): smollm2-135m + LoRA from dynaweb-train-wm on the shipped MiniWoB++ data",
        output_mode="tree",
    ),
    "smollm2-135m-wm-patch": ShippedAdapter(
        "smollm2-135m-wm-patch",
        "smollm2-135m-wm-patch",
        "web world model (patch mode): smollm2-135m + LoRA from dynaweb-train-wm on the large MiniWoB++ data",
        output_mode="patch",
    ),
    "smollm2-135m-wm-patch-all": ShippedAdapter(
        "smollm2-135m-wm-patch-all",
        "smollm2-135m-wm-patch-all",
        "web world model (patch mode), all tasks: smollm2-135m-wm-patch trained further on the all-tasks data",
        output_mode="patch",
    ),
    "smollm2-135m-judge": ShippedAdapter(
        "smollm2-135m-judge",
        "smollm2-135m-judge",
        "trajectory judge: smollm2-135m + LoRA from dynaweb-train-wm --examples judge on the large MiniWoB++ data",
    ),
    "smollm2-135m-judge-dagger": ShippedAdapter(
        "smollm2-135m-judge-dagger",
        "smollm2-135m-judge-dagger",
        "trajectory judge, DAgger: smollm2-135m-judge's successor retrained on replayed dreams it misjudged",
    ),
    "smollm2-135m-judge-all": ShippedAdapter(
        "smollm2-135m-judge-all",
        "smollm2-135m-judge-all",
        "trajectory judge, all tasks: smollm2-135m-judge-dagger trained on the all-tasks data (53 tasks, long ones)",
    ),
}
#: The shipped trained judge (the prompted 135M model never says SUCCESS). On dreams replayed on their real
#: pages it agrees with the real outcome far more often than ``smollm2-135m-judge`` (README, "DAgger round 2").
TRAINED_JUDGE = "smollm2-135m-judge-dagger"
#: The judge ``DreamWeb-v0`` (and every host built on it: ``make_vec``, ``dynaweb-train``, ``dynaweb-dream``,
#: ``dynaweb-serve``, the integrations) uses when none is named: the trained judge. ``judge="world_model"`` makes
#: the world model's own backend judge instead (the paper's one-LLM setting), which on real trajectories writes no
#: verdict line on most cases and never says SUCCESS (issue 48).
DEFAULT_JUDGE = TRAINED_JUDGE
#: The judge trained on every task of the all-tasks data (53, the long ones included): the default for dreams of a
#: task :data:`TRAINED_JUDGE` never trained on (:func:`default_judge`). On the long tasks' 122 held-out real cases
#: it scores 0.96 (success / failure recall 0.96 / 0.96) where :data:`TRAINED_JUDGE` scores 0.84 (0.70 / 0.93;
#: ``benchmarks/results/judge/judge_dagger_long_time_rule.json``); on the 24 tasks it pays more wrong actions.
ALL_TASKS_JUDGE = "smollm2-135m-judge-all"
#: The world model ``DreamWeb-v0`` uses for each output mode when none is named.
DEFAULT_WORLD_MODELS: dict[str, str] = {"tree": "smollm2-135m-wm", "patch": "smollm2-135m-wm-patch-all"}
#: The world model ``DreamWeb-v0`` uses when neither a world model nor an output mode is named: patch mode, which
#: on held-out seeds predicts the next page and the end of an episode better than tree mode (README, "The world
#: model"), trained on all tasks, which on held-out pages of the 24 tasks and of the long ones scores better than
#: :data:`TRAINING_WORLD_MODEL` (docs/world-model.md, "A fourth retrain, shipped").
DEFAULT_WORLD_MODEL = DEFAULT_WORLD_MODELS["patch"]
#: The world model of ``dynaweb-train``'s presets: the one every recorded training run dreamed with (the best
#: dreams-only result included). No training run has dreamed with :data:`DEFAULT_WORLD_MODEL` yet.
TRAINING_WORLD_MODEL = "smollm2-135m-wm-patch"
#: Written by ``dynaweb-train-wm`` beside the world model or judge it trains:
#: ``{"output_mode": "tree" | "patch", "examples": ..., "prompt_style": "paper" | "compact"}``.
WORLD_MODEL_INFO_FILE = "dynaweb_world_model.json"


@functools.cache
def trained_judge_tasks() -> frozenset[str]:
    """The tasks :data:`TRAINED_JUDGE` trained on: the 24 of the large dataset
    (:data:`~dynaweb_env.data.shipped.LARGE_DATA_DIR`'s ``MANIFEST.json``; its dreamed data is of the same tasks)."""
    from .data.shipped import LARGE_DATA_DIR

    return frozenset(json.loads((LARGE_DATA_DIR / "MANIFEST.json").read_text())["tasks"])


def default_judge(tasks: Iterable[str] | None = None) -> str:
    """The judge of dreams of ``tasks`` when none is named (``DreamWeb-v0``, ``dynaweb-train``, planning).

    Args:
        tasks: The task ids dreamed (``None``: the shipped start states' 24 tasks).

    Returns:
        :data:`DEFAULT_JUDGE`, unless a task is one it never trained on (:func:`trained_judge_tasks`): then
        :data:`ALL_TASKS_JUDGE`, which trained on every task with real data (the long ones included).

    Example:
        >>> default_judge(["miniwob.click-button"]), default_judge(["miniwob.book-flight"])
        ('smollm2-135m-judge-dagger', 'smollm2-135m-judge-all')
    """
    if tasks is None or set(tasks) <= trained_judge_tasks():
        return DEFAULT_JUDGE
    return ALL_TASKS_JUDGE


def _recorded(spec: Any, key: str, kinds: tuple[type, ...] = (str,)) -> Any:
    """``key`` of a shipped adapter, or as recorded in a checkpoint directory's :data:`WORLD_MODEL_INFO_FILE`,
    or as an ``openai:`` or dict spec states it (``openai:wm@http://host:8000/v1?prompt_style=compact``); for a
    backend object, that of the model it was built from (its ``model_name``). Only values of the ``kinds`` count."""
    if isinstance(spec, dict) or (isinstance(spec, str) and spec.strip().startswith("openai:")):
        from .llm import parse_backend_spec

        options = parse_backend_spec(spec)
        return options[key] if key in options else _recorded(options["model"], key, kinds)
    if not isinstance(spec, (str, os.PathLike)):
        name = getattr(spec, "model_name", None)  # e.g. make_backend("smollm2-135m-wm-patch"), or a wrapper of it
        return _recorded(name, key, kinds) if isinstance(name, str) and name.strip() else None
    text = os.fspath(spec).strip()
    if "?" in text and not Path(text).expanduser().exists():  # a spec's backend options: `<model>?dtype=...`
        text = text.partition("?")[0]
    prefix, colon, rest = text.partition(":")
    if colon and prefix in ("ct2", "auto", "transformers", "hf"):  # a backend prefix names the same model or adapter
        text = rest.strip()
    if text in SHIPPED_ADAPTERS and key == "output_mode":
        return SHIPPED_ADAPTERS[text].output_mode
    directory = SHIPPED_ADAPTERS[text].path if text in SHIPPED_ADAPTERS else Path(text).expanduser()
    info_file = directory / WORLD_MODEL_INFO_FILE
    try:
        value = json.loads(info_file.read_text()).get(key) if info_file.is_file() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, kinds) else None


def world_model_output_mode(spec: Any) -> str | None:
    """The output mode a world model was trained for: a shipped adapter's, or the one recorded in a
    checkpoint directory by ``dynaweb-train-wm``; ``None`` when unknown (e.g. an untrained model)."""
    return _recorded(spec, "output_mode")


def model_prompt_style(spec: Any) -> str:
    """The prompt style a world model or judge must be prompted in: the one it was trained on (a shipped
    adapter's, or recorded by ``dynaweb-train-wm``), else ``"paper"`` (a prompted model learns the task from
    the paper's prompt; runs trained before prompt styles existed were trained on it)."""
    return _recorded(spec, "prompt_style") or "paper"


def model_success_threshold(spec: Any) -> float | None:
    """The success threshold chosen for a trained judge (``benchmarks/judge_threshold.py``) and recorded beside it
    (``"success_threshold"`` in its :data:`WORLD_MODEL_INFO_FILE`), or ``None`` (the verdict word). It applies where
    the backend gives log-probs (:func:`~dynaweb_env.world_model.judge.success_probability`)."""
    value = _recorded(spec, "success_threshold", (str, float))
    try:
        return None if value is None else float(value)
    except ValueError:
        return None
