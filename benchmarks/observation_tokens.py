"""Tokens per observation before and after keeping clickable generic elements, on real MiniWoB++ pages.

Command (the one that produced ``benchmarks/results/observation/observation_tokens.json``)::

    python -m benchmarks.observation_tokens --seeds 0-4

Every page along each scripted expert's episode (the start page and the page after each action) on the tasks of
the shipped large dataset (the 24 tasks with experts before issue 51), ``--seeds`` each, is flattened three ways
from the same BrowserGym observation, in one run:

* ``before``: BrowserGym's default flattening (``gym.make("RealWeb-v0", clickable=False)``): a ``generic`` node
  without properties is dropped, bid and all, so a ``<span>`` link or a ``<div>`` button has no id;
* ``with_clickable``: BrowserGym's ``with_clickable=True`` as is: ``clickable`` is added to every clickable node
  that is printed, but a clickable ``generic`` without properties is still dropped (BrowserGym tests the node's own
  properties before it adds ``clickable``);
* ``after``: RealWeb-v0's default (:func:`~dynaweb_env.envs.browsergym_adapter.flatten_axtree`): only clickable
  ``generic`` nodes are kept, as ``[bid] generic, clickable=True`` lines; no other line changes.

Each page is rendered as the policy reads it (:func:`~dynaweb_env.observation.render_observation`) and tokenized
with the policy's tokenizer (``--tokenizer``, the embedded ``smollm2-135m``). Reported per task and overall: mean
tokens per observation in each variant, the ratio to ``before``, the share of pages that changed, and how many of
the page's clickable ``generic`` elements have a bid in the text (the information the change is for). The expert
acts on the ``after`` observation, so its success under the new observation is reported too.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dynaweb_env.data.shipped import LARGE_DATA_DIR
from dynaweb_env.data.tasks import parse_seeds
from dynaweb_env.envs.browsergym_adapter import bounded_axtree, flatten_axtree, mark_clickable_generics
from dynaweb_env.envs.real import RealWebEnv
from dynaweb_env.experts import get_expert
from dynaweb_env.observation import clean_axtree, render_observation

RESULTS = Path(__file__).parent / "results" / "observation" / "observation_tokens.json"
VARIANTS = ("before", "with_clickable", "after")


def existing_tasks() -> list[str]:
    """The 24 tasks of the shipped large dataset: every task that had a scripted expert before issue 51."""
    return list(json.loads((LARGE_DATA_DIR / "MANIFEST.json").read_text())["tasks"])


class RecordingEnv(RealWebEnv):
    """``RealWeb-v0`` that keeps each BrowserGym observation it turns into its own (for the three flattenings)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.pages: list[dict] = []

    def _to_observation(self, browser_obs: dict, last_action: str, last_action_error: str) -> dict[str, str]:
        observation = super()._to_observation(browser_obs, last_action, last_action_error)
        self.pages.append({"browser_obs": browser_obs, "observation": observation})
        return observation


def flattenings(browser_obs: dict) -> dict[str, str]:
    """The tree text of one BrowserGym observation in each of :data:`VARIANTS`, cleaned and noted as RealWeb-v0 does."""
    from browsergym.utils.obs import flatten_axtree_to_str

    tree, extra = browser_obs["axtree_object"], browser_obs.get("extra_element_properties") or {}
    bounded, nodes_cut = bounded_axtree(tree)
    note = f"\n... ({nodes_cut} more nodes cut)" if nodes_cut else ""  # as RealWeb-v0 writes it
    texts = {
        "before": flatten_axtree(tree, extra, clickable=False)[0],
        "with_clickable": flatten_axtree_to_str(bounded, extra_properties=extra, with_clickable=True),
        "after": flatten_axtree(tree, extra, clickable=True)[0],
    }
    return {variant: clean_axtree(text) + note for variant, text in texts.items()}


def clickable_generic_bids(browser_obs: dict) -> list[str]:
    """Bids of the page's clickable ``generic`` nodes (what ``after`` keeps and ``before`` drops)."""
    tree, _ = bounded_axtree(browser_obs["axtree_object"])
    marked, _ = mark_clickable_generics(tree, browser_obs.get("extra_element_properties"))
    return [
        node["browsergym_id"]
        for node in marked["nodes"]
        if any(prop.get("name") == "clickable" for prop in node.get("properties", []))
    ]


def measure_page(page: dict, tokenizer: Any) -> dict[str, Any]:
    """Tokens of one page's observation in every variant, and which clickable generics have a bid there."""
    texts = flattenings(page["browser_obs"])
    bids = clickable_generic_bids(page["browser_obs"])
    row: dict[str, Any] = {"clickable_generics": len(bids)}
    for variant, axtree in texts.items():
        rendered = render_observation({**page["observation"], "axtree": axtree})
        row[variant] = {
            "tokens": len(tokenizer(rendered)["input_ids"]),
            "axtree_tokens": len(tokenizer(axtree)["input_ids"]),
            "clickable_generics_with_bid": sum(f"[{bid}]" in axtree for bid in bids),
        }
    row["changed"] = texts["after"] != texts["before"]
    row["after_matches_env"] = texts["after"] == page["observation"]["axtree"]
    return row


def summarize(pages: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over ``pages``: tokens per observation in every variant and their ratio to ``before``."""
    summary: dict[str, Any] = {"pages": len(pages)}
    if not pages:
        return summary
    for variant in VARIANTS:
        summary[f"{variant}_tokens"] = round(statistics.mean(p[variant]["tokens"] for p in pages), 1)
        summary[f"{variant}_axtree_tokens"] = round(statistics.mean(p[variant]["axtree_tokens"] for p in pages), 1)
    for variant in VARIANTS[1:]:
        summary[f"{variant}_over_before"] = round(summary[f"{variant}_tokens"] / summary["before_tokens"], 3)
    summary["pages_changed"] = round(sum(p["changed"] for p in pages) / len(pages), 3)
    total = sum(p["clickable_generics"] for p in pages)
    summary["clickable_generics_per_page"] = round(total / len(pages), 2)
    for variant in VARIANTS:
        with_bid = sum(p[variant]["clickable_generics_with_bid"] for p in pages)
        summary[f"{variant}_clickable_generics_with_bid"] = round(with_bid / total, 3) if total else None
    return summary


def run(tasks: list[str], seeds: list[int], tokenizer_name: str) -> dict[str, Any]:
    """Play every expert episode on the ``after`` observation and measure every page it saw."""
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model
    from dynaweb_trainer.collect import record_episode

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(tokenizer_name)), trust_remote_code=False)
    env = RecordingEnv(task=tasks[0], clickable=True)
    per_task, episodes, all_pages = {}, [], []
    try:
        for task in tasks:
            pages = []
            for seed in seeds:
                env.pages = []
                trajectory = record_episode(env, get_expert(task), task, seed, tokenizer=tokenizer)
                rows = [measure_page(page, tokenizer) for page in env.pages]
                pages += rows
                actions = [step.action for step in trajectory.steps if step.action]
                episodes.append({"task_id": task, "task_seed": seed, "success": trajectory.success,
                                 "actions": actions, "pages": rows})  # fmt: skip
            per_task[task] = summarize(pages) | {
                "expert_success_after": sum(e["success"] for e in episodes if e["task_id"] == task) / len(seeds)
            }
            all_pages += pages
            print(f"{task}: {per_task[task]}", file=sys.stderr, flush=True)
    finally:
        env.close()
    task_means = {
        variant: round(statistics.mean(row[f"{variant}_tokens"] for row in per_task.values()), 1)
        for variant in VARIANTS
    }
    return {
        "per_task": per_task,
        "summary": summarize(all_pages)
        | {"mean_of_task_means": task_means, "tasks": len(tasks), "episodes": len(episodes)}
        | {"expert_success_after": round(sum(e["success"] for e in episodes) / len(episodes), 3)},
        "episodes": episodes,
    }


def table(result: dict[str, Any]) -> str:
    """The per-task table: mean tokens per observation before, with_clickable, after; pages changed; bids kept."""
    head = (
        f"{'task':34} {'pages':>5} {'before':>7} {'w/click':>7} {'after':>7} {'after/b':>7} {'changed':>7} {'gen':>5}"
    )
    lines = [head]
    rows = [*result["per_task"].items(), ("ALL (page-weighted)", result["summary"])]
    for task, row in rows:
        lines.append(
            f"{task.removeprefix('miniwob.'):34} {row['pages']:>5} {row['before_tokens']:>7} "
            f"{row['with_clickable_tokens']:>7} {row['after_tokens']:>7} {row['after_over_before']:>7} "
            f"{row['pages_changed']:>7} {row['clickable_generics_per_page']:>5}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the measurement, print the table, save the JSON; returns the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=None, help="task ids (default: the 24 existing tasks)")
    parser.add_argument("--seeds", default="0-4", help="task seeds per task (default 0-4)")
    parser.add_argument("--tokenizer", default="smollm2-135m", help="the policy's tokenizer (embedded model name)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    tasks, seeds = args.tasks or existing_tasks(), parse_seeds(args.seeds)
    started = time.time()
    result = {"benchmark": "observation_tokens", "command": shlex.join(["python", "-m", "benchmarks.observation_tokens",
              *(argv if argv is not None else sys.argv[1:])]), "tokenizer": args.tokenizer, "seeds": seeds}  # fmt: skip
    result |= run(tasks, seeds, args.tokenizer)
    result["wall_seconds"] = round(time.time() - started, 1)
    print(table(result))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
