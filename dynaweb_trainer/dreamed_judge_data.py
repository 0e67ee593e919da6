"""Judge training data on *dreamed* pages: what the judge reads in DreamWeb, labelled by the real outcome.

A trained judge learns from real final pages, but in ``DreamWeb-v0`` it reads pages the world model drew. The
two differ where it matters: after a policy types a password without pressing Login, the world model may draw
the form greyed out as if submitted (``disabled=True``), a page the judge never saw in real data. Replayed on
their real pages, the policy's dreams showed it: a judge at 0.93 on real held-out pages agreed with the real
outcome of only 0.72 of them (``benchmarks/results/dreams_only_gate_termination/dream_rewards.json``). This module
builds the missing data, each record a trajectory (schema of :mod:`dynaweb_env.data.schema`, ``source="dream"``)
whose final page was dreamed and whose label is real:

- **Real trajectories, final page re-dreamed** (:func:`dream_final_pages`): for each trajectory, as recorded and,
  for a success, cut before its last action (a failure), the world model draws the page after the last kept
  action from the real page it was taken on. The label is the real one, so no browser is needed.
- **Policy dreams replayed on real pages** (:func:`replayed_policy_dreams`): the dreams of training runs
  (``episodes.jsonl``) as the judge read them, labelled with the real outcome of the same actions from
  ``benchmarks/dream_rewards.py``'s report, the DAgger loop of dream, replay, relabel, retrain.

Train a judge on them beside the real data (world-model examples skip ``source="dream"`` records)::

    dynaweb-dream-judge-data --dataset_path dynaweb_env/data/miniwob-large/train --output runs/judge-dagger/train.jsonl
    dynaweb-dream-judge-data --replays benchmarks/results/dreams_only_gate_termination/dream_rewards.json --output \\
        runs/judge-dagger/policy.jsonl --start-states runs/claims/shared/demos-expert-40-ee7c3adf/trajectories.jsonl
    dynaweb-train-wm --examples judge --model_name_or_path smollm2-135m-judge --dataset_path \\
        dynaweb_env/data/miniwob-large/train runs/judge-dagger --output_dir runs/judge-dagger/judge

The first command resumes: records already in ``--output`` (by id) are not dreamed again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.schema import Step, Trajectory

#: ``metadata["dreamed"]`` of the records: which kind of dream the final page comes from.
FINAL_PAGE, POLICY_DREAM = "final_page", "policy_dream"


def final_page_cases(trajectories: Sequence[Trajectory]) -> Iterator[tuple[Trajectory, int, float]]:
    """``(trajectory, kept actions, real reward)`` of every case whose final page a world model can dream.

    Each trajectory as recorded (its real reward) and, for a success, cut before its last action (reward 0: the
    task's final action was never taken), as :func:`~dynaweb_env.world_model.judge_cases.judge_cases` judges them.
    A case needs at least one kept action: with none, the final page is the real start page.
    """
    for trajectory in trajectories:
        acted = len(trajectory.actions)
        if acted:
            yield trajectory, acted, float(trajectory.reward)
        if trajectory.success and acted > 1:
            yield trajectory, acted - 1, 0.0


def case_id(trajectory: Trajectory, kept: int) -> str:
    return f"{trajectory.id}/dreamed-final-{kept}"


def dreamed_record(
    trajectory: Trajectory, kept: int, reward: float, url: str, axtree: str, world_model: str
) -> Trajectory:
    """The trajectory's first ``kept`` steps (real pages and actions), then the dreamed page, with the real label."""
    acted = [step for step in trajectory.steps if step.action.strip()][:kept]
    final = Step(url=url, axtree=axtree)
    metadata = {key: trajectory.metadata[key] for key in ("split", "task_seed", "policy") if key in trajectory.metadata}
    metadata.update(dreamed=FINAL_PAGE, world_model=world_model, dreamed_from=trajectory.id)
    return Trajectory(
        id=case_id(trajectory, kept), task_id=trajectory.task_id, goal=trajectory.goal, source="dream",
        steps=[dataclasses.replace(step) for step in acted] + [final], success=reward >= 0.5, reward=reward,
        metadata=metadata,
    )  # fmt: skip


def dream_final_pages(
    trajectories: Sequence[Trajectory],
    output: str | Path,
    world_model: str,
    batch_size: int = 8,
    seed: int = 0,
    max_new_tokens: int | None = None,
) -> dict[str, int]:
    """Dream the final page of every :func:`final_page_cases` case and append the records to ``output``.

    The world model is the one ``DreamWeb-v0`` builds from the spec (same prompt style and sampling), one batched
    call per ``batch_size`` cases; each batch is written (flushed) before the next starts, and cases already in
    ``output`` are skipped, so an interrupted run resumes where it stopped.

    Returns:
        Counts: ``cases``, ``done_before`` (skipped, already in ``output``), ``dreamed``, ``world_model_errors``
        (malformed outputs; the record keeps the page the world model's parser fell back to, as a dream would).
    """
    from tqdm.auto import tqdm

    from dynaweb_env.data.io import write_trajectories
    from dynaweb_env.envs.dream import DreamWebEnv
    from dynaweb_env.world_model import WorldModelRequest

    output = Path(output)
    done = {record.id for record in _read_existing(output)}
    cases = list(final_page_cases(trajectories))
    todo = [case for case in cases if case_id(case[0], case[1]) not in done]
    # The world model as DreamWeb builds it (prompt style, sampling, budgets): its defaults live there only.
    budget = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    model = DreamWebEnv(world_model=world_model, **budget).dynamics.world_model
    counts = {"cases": len(cases), "done_before": len(cases) - len(todo), "dreamed": 0, "world_model_errors": 0}
    with tqdm(total=len(todo), desc="dreaming final pages", unit="page", file=sys.stderr) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            requests = []
            for trajectory, kept, _ in batch:
                acted = [step for step in trajectory.steps if step.action.strip()]
                before = acted[kept - 1]
                previous = acted[kept - 2].action if kept > 1 else ""
                requests.append(WorldModelRequest(trajectory.goal, before.url, before.axtree, before.action, previous))
            predictions = model.predict(requests, seed=seed + start)
            records = []
            for (trajectory, kept, reward), prediction in zip(batch, predictions, strict=True):
                counts["world_model_errors"] += prediction.error is not None
                records.append(dreamed_record(trajectory, kept, reward, prediction.url, prediction.axtree, world_model))
            write_trajectories(output, records, append=True)
            counts["dreamed"] += len(records)
            bar.update(len(batch))
    return counts


def replayed_policy_dreams(
    report: dict[str, Any], runs_root: str | Path = ".", start_trajectories: Sequence[Trajectory] = ()
) -> tuple[list[Trajectory], int]:
    """The dreams of a ``benchmarks/dream_rewards.py`` report as judge data: ``(records, dreams left out)``.

    Each dream is read from its run's ``episodes.jsonl`` (``<runs_root>/<run>/episodes.jsonl``) as the judge saw it:
    the recorded steps before its start page (from ``start_trajectories``, the run's ``--start-states`` file, with
    their real pages), then the dreamed ones, with the real reward of the same actions. A dream whose actions
    succeed for real before its last one (the real page ended the task) is kept up to that action: after it, the
    dream's pages have no real counterpart. Dreams not replayed, whose start page was not reproduced, or whose
    start trajectory is not in ``start_trajectories`` when it has a history, are left out.
    """
    from dynaweb_env.data.jsonl import iter_jsonl
    from dynaweb_trainer.build_data import split_of_seed

    episodes: dict[tuple[str, str, Any], dict[str, Any]] = {}
    for run in sorted({dream["run"] for dream in report["dreams"]}):
        for episode in iter_jsonl(Path(runs_root) / run / "episodes.jsonl"):  # a bad line: skipped and named
            episodes[(run, episode.get("id"), episode.get("metadata", {}).get("global_step"))] = episode
    # The judge reads a dream's recorded history too (DreamWebEnv.judge_request): its steps, on their real pages.
    sources = {t.id: [step for step in t.steps if step.action.strip()] for t in start_trajectories}
    records, left_out = [], 0
    for dream in report["dreams"]:
        episode = episodes.get((dream["run"], dream["id"], dream.get("global_step")))
        start = episode["metadata"]["options"]["start_state"] if episode is not None else {}
        history = sources.get(start.get("trajectory_id"), [])[: start.get("step_index", 0)]
        if (
            not dream.get("replayed")
            or not dream.get("start_reproduced")
            or episode is None
            or len(history) != len(start.get("history", ()))
        ):
            left_out += 1
            continue
        steps = [Step.from_dict(step) for step in episode["steps"]]
        reward = float(dream["real_reward"])
        kept = len(dream["dream_actions"])
        if reward >= 0.5 and len(dream["real_actions"]) < kept:
            kept = len(dream["real_actions"])
        acted_at = [index for index, step in enumerate(steps) if step.action.strip()]
        acted = [steps[index] for index in acted_at]
        # By position, not by value: a dream may repeat a step exactly (the same action on an unchanged page).
        final = steps[acted_at[kept]] if kept < len(acted) else steps[-1]
        records.append(
            Trajectory(
                id=f"{dream['run']}/{dream['id']}/step-{dream.get('global_step')}",
                task_id=episode["task_id"],
                goal=episode["goal"],
                source="dream",
                steps=[*history, *acted[:kept], Step(url=final.url, axtree=final.axtree)],
                success=reward >= 0.5,
                reward=reward,
                metadata={
                    "split": split_of_seed(int(start["task_seed"])),
                    "task_seed": start["task_seed"],
                    "dreamed": POLICY_DREAM,
                    "dreamed_from": start.get("trajectory_id"),
                    "run": dream["run"],
                    "judge_reward": dream["dream_reward"],
                },
            )  # fmt: skip
        )
    return records, left_out


def _read_existing(path: Path) -> list[Trajectory]:
    """The records already in ``path``, after repairing a last line an interrupted run cut short."""
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.jsonl import prepare_for_append

    prepare_for_append(path)
    return read_trajectories([path]) if path.is_file() else []


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``dynaweb-dream-judge-data``: build dreamed judge data (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="dynaweb-dream-judge-data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="JSONL file the records are appended to (resumable).")
    parser.add_argument("--dataset_path", "--dataset-path", nargs="+", help="Real trajectory files or directories.")
    parser.add_argument("--dataset_split", "--dataset-split", default="train", help="Split to keep ('all': every one).")
    parser.add_argument("--world_model", "--world-model", default=None, help="World-model spec (DreamWeb's default).")
    parser.add_argument("--limit", type=int, default=0, help="Use only the first N trajectories (0: all).")
    parser.add_argument("--batch_size", "--batch-size", type=int, default=8, help="Cases per world-model call.")
    parser.add_argument("--seed", type=int, default=0, help="Sampling seed of the world model.")
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=None, help="Token budget of a page.")
    parser.add_argument("--replays", nargs="+", help="benchmarks/dream_rewards.py reports to turn into records.")
    parser.add_argument("--runs_root", "--runs-root", default=".", help="Where the reports' runs directories are.")
    parser.add_argument(
        "--start_states", "--start-states", nargs="*", default=[], help="The runs' --start-states trajectory files."
    )
    args = parser.parse_args(argv)
    if bool(args.dataset_path) == bool(args.replays):
        parser.error("give exactly one of --dataset_path (dream final pages) and --replays (policy dreams)")
    if args.replays:
        from dynaweb_env.data.io import read_trajectories

        starts = read_trajectories(args.start_states) if args.start_states else []
        records, left_out = [], 0
        for report_path in args.replays:
            got, missed = replayed_policy_dreams(json.loads(Path(report_path).read_text()), args.runs_root, starts)
            records += got
            left_out += missed
        done = {record.id for record in _read_existing(Path(args.output))}
        from dynaweb_env.data.io import write_trajectories

        written = write_trajectories(args.output, [r for r in records if r.id not in done], append=True)
        summary = {"records": len(records), "written": written, "left_out": left_out}
    else:
        from dynaweb_env.envs.dream_setup import resolve_world_model
        from dynaweb_trainer.world_model_data import load_trajectories

        split = None if args.dataset_split == "all" else args.dataset_split
        trajectories = load_trajectories(args.dataset_path, split)
        # A fixed shuffle, so that --limit mixes tasks and policies and a rerun resumes the same cases.
        random.Random(args.seed).shuffle(trajectories)
        trajectories = trajectories[: args.limit] if args.limit else trajectories
        world_model = args.world_model or resolve_world_model(None, None)[0]
        summary = dream_final_pages(
            trajectories, args.output, world_model, args.batch_size, args.seed, args.max_new_tokens
        )
    print(json.dumps(summary))
    return summary


def cli() -> None:
    """Console entry point (``main`` returns its summary for callers; an exit status must not carry it).

    Bad input (e.g. an ``--output`` that is not a JSONL file, which is never appended to) exits 2 with its message.
    """
    try:
        main()
    except ValueError as error:
        print(f"dynaweb-dream-judge-data: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    cli()
