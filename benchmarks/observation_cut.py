"""How much of each page a policy must read: the tree cut (``max_axtree_chars``) against the expert's targets.

Command (the one that produced ``benchmarks/results/observation/observation_cut.json``)::

    python -m benchmarks.observation_cut

The policy reads each page cut to ``max_axtree_chars`` characters (:func:`~dynaweb_env.axtree.truncate_axtree`:
whole lines from the top). A cut that drops the element the task needs leaves the policy nothing right to do.
On every scripted expert episode of the shipped all-tasks data (``dynaweb_env/data/miniwob-all``, every split:
real pages in RealWeb-v0's current observation), per task and per cut (``--cuts``; ``0``: never cut):

- ``dropped``: the share of the expert's actions whose element is not on the cut page;
- ``episode_tokens`` (mean and max): the whole expert episode as training encodes it
  (:func:`~dynaweb_trainer.encoding.encode_expert_trajectory`: the prompt plus every turn and observation, with
  the policy's tokenizer and compact prompt), which is what ``dynaweb-sft`` and GSPO hold in memory for one
  episode; ``within_completion_budget``: how many episodes' completion part (every turn and observation after the
  first page) fits ``--completion-budget`` (GSPO's ``max_completion_length``, 4096 in the ``small`` budget: a
  rollout ends before a turn that might not fit);
- ``pages_as_edits_*``: the same with ``page_history="edits"`` (each page after the first written as the edits of
  the page before where that is shorter, :func:`~dynaweb_env.agent.observation_edits_message`);
- ``per_turn_*``: with ``page_history="actions"`` (a prompt of its own each turn, the latest page whole and the
  actions so far, :func:`~dynaweb_env.agent.observation_actions_message`): ``per_turn_example_tokens_max``, the
  longest turn (prompt and answer: what bounds memory), and ``per_turn_episode_tokens_mean``, an episode's turns
  summed (what one pass of SFT over it costs, to set against ``pages_as_edits_episode_tokens_mean``).

Reported per suite (:data:`~dynaweb_env.data.tasks.TASK_SUITES`) too. CPU only, no model, a few seconds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.actions import parse_action
from dynaweb_env.axtree import axtree_element_line, truncate_axtree
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
from dynaweb_env.data.tasks import TASK_SUITES

RESULTS = Path(__file__).parent / "results" / "observation" / "observation_cut.json"
CUTS = (1500, 3000, 4500, 6000, 0)


def expert_trajectories(data_dir: Path, tasks: Sequence[str] | None) -> list[Any]:
    """Every expert trajectory of the data's splits (of ``tasks`` if given), in file order."""
    found = []
    for split in ("train", "validation", "test"):
        for trajectory in read_trajectories(data_dir / split / "expert.jsonl.xz"):
            if tasks is None or trajectory.task_id in tasks:
                found.append(trajectory)
    return found


def dropped_targets(trajectory: Any, cut: int) -> tuple[int, int]:
    """``(actions with an element, those whose element the page cut to ``cut`` characters leaves out)``."""
    acted = dropped = 0
    for step in trajectory.steps:
        element = parse_action(step.action).element_id if step.action else None
        if element is not None:
            acted += 1
            dropped += not axtree_element_line(truncate_axtree(step.axtree, cut), element)
    return acted, dropped


def measure(
    trajectories: Sequence[Any], cuts: Sequence[int], tokenizer: Any, completion_budget: int
) -> dict[str, dict[str, Any]]:
    """Per task, per cut: the dropped actions, the encoded episodes' tokens, and how many episodes' completion part
    fits ``completion_budget`` tokens (GSPO's ``max_completion_length``: a rollout ends before a turn past it)."""
    from dynaweb_env.agent import policy_system_prompt
    from dynaweb_trainer.encoding import EpisodeEncoder, encode_expert_trajectory

    by_task: dict[str, list[Any]] = {}
    for trajectory in trajectories:
        by_task.setdefault(trajectory.task_id, []).append(trajectory)
    report: dict[str, dict[str, Any]] = {}
    for task, group in sorted(by_task.items()):
        row: dict[str, Any] = {"episodes": len(group), "actions": sum(dropped_targets(t, 0)[0] for t in group)}
        for cut in cuts:
            encoder = EpisodeEncoder(tokenizer, policy_system_prompt("compact"), cut)
            episodes = [encode_expert_trajectory(encoder, t) for t in group]
            tokens = [len(episode.prompt_ids) + len(episode.completion_ids) for episode in episodes]
            edits_encoder = EpisodeEncoder(tokenizer, policy_system_prompt("compact"), cut, page_history="edits")
            as_edits = [encode_expert_trajectory(edits_encoder, t) for t in group]
            edits_tokens = [len(episode.prompt_ids) + len(episode.completion_ids) for episode in as_edits]
            turns_encoder = EpisodeEncoder(tokenizer, policy_system_prompt("compact"), cut, page_history="actions")
            per_turn = [
                [len(prompt) + len(answer) for prompt, answer in encode_expert_trajectory(turns_encoder, t).turns()]
                for t in group
            ]
            row[str(cut)] = {
                "dropped": sum(dropped_targets(t, cut)[1] for t in group),
                "within_completion_budget": sum(len(e.completion_ids) <= completion_budget for e in episodes),
                "episode_tokens_mean": round(statistics.fmean(tokens), 1),
                "episode_tokens_max": max(tokens),
                "pages_as_edits_episode_tokens_mean": round(statistics.fmean(edits_tokens), 1),
                "pages_as_edits_episode_tokens_max": max(edits_tokens),
                "pages_as_edits_within_completion_budget": sum(
                    len(episode.completion_ids) <= completion_budget for episode in as_edits
                ),
                "per_turn_example_tokens_max": max(max(turns) for turns in per_turn),
                "per_turn_episode_tokens_mean": round(statistics.fmean(sum(turns) for turns in per_turn), 1),
            }
        report[task] = row
    return report


def summarize(per_task: dict[str, dict[str, Any]], cuts: Sequence[int], tasks: Sequence[str]) -> dict[str, Any]:
    """The suite's totals per cut: dropped share of actions, and the mean and max episode tokens."""
    rows = [per_task[task] for task in tasks if task in per_task]
    if not rows:
        return {}
    actions = sum(row["actions"] for row in rows)
    episodes = sum(row["episodes"] for row in rows)
    summary: dict[str, Any] = {"tasks": len(rows), "episodes": episodes, "actions": actions}
    for cut in map(str, cuts):
        dropped = sum(row[cut]["dropped"] for row in rows)
        tokens = sum(row[cut]["episode_tokens_mean"] * row["episodes"] for row in rows)
        edits_tokens = sum(row[cut]["pages_as_edits_episode_tokens_mean"] * row["episodes"] for row in rows)
        turn_tokens = sum(row[cut]["per_turn_episode_tokens_mean"] * row["episodes"] for row in rows)
        summary[cut] = {
            "dropped": dropped,
            "within_completion_budget": sum(row[cut]["within_completion_budget"] for row in rows),
            "pages_as_edits_episode_tokens_mean": round(edits_tokens / episodes, 1),
            "pages_as_edits_episode_tokens_max": max(row[cut]["pages_as_edits_episode_tokens_max"] for row in rows),
            "pages_as_edits_within_completion_budget": sum(
                row[cut]["pages_as_edits_within_completion_budget"] for row in rows
            ),
            "per_turn_example_tokens_max": max(row[cut]["per_turn_example_tokens_max"] for row in rows),
            "per_turn_episode_tokens_mean": round(turn_tokens / episodes, 1),
            "dropped_share": round(dropped / actions, 4) if actions else 0.0,
            "episode_tokens_mean": round(tokens / episodes, 1),
            "episode_tokens_max": max(row[cut]["episode_tokens_max"] for row in rows),
        }
    return summary


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/observation_cut.py")
    parser.add_argument("--data", type=Path, default=ALL_TASKS_DATA_DIR, help="A dataset with train/validation/test.")
    parser.add_argument("--cuts", nargs="+", type=int, default=list(CUTS), help="max_axtree_chars values (0: none).")
    parser.add_argument("--tasks", nargs="+", default=None, help="Only these task ids (default: every task).")
    parser.add_argument(
        "--completion-budget", type=int, default=4096, help="max_completion_length to count fitting episodes against."
    )
    parser.add_argument("--tokenizer", default="smollm2-135m", help="The policy's tokenizer (a model name).")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if any(cut < 0 for cut in args.cuts):
        parser.error("--cuts must be >= 0")
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    command = ["python", "-m", "benchmarks.observation_cut", *(sys.argv[1:] if argv is None else argv)]
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.tokenizer))
    per_task = measure(expert_trajectories(args.data, args.tasks), args.cuts, tokenizer, args.completion_budget)
    report = {
        "benchmark": "observation_cut",
        "command": shlex.join(command),
        "data": str(args.data),
        "tokenizer": args.tokenizer,
        "cuts": args.cuts,
        "completion_budget": args.completion_budget,
        "suites": {name: summarize(per_task, args.cuts, tasks) for name, tasks in TASK_SUITES.items()},
        "per_task": per_task,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    for name, summary in report["suites"].items():
        if summary:
            cells = [f"{cut or 'none'}: {summary[str(cut)]['dropped_share']:.0%} dropped, "
                     f"{summary[str(cut)]['episode_tokens_max']} max tokens" for cut in args.cuts]  # fmt: skip
            print(f"{name} ({summary['episodes']} episodes): " + "; ".join(cells))
    print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main()
