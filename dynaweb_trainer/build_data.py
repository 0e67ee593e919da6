"""Rebuild the real MiniWoB++ dataset for world models and judges with one command: ``dynaweb-build-data``.

Every MiniWoB++ task with a scripted expert (:func:`~dynaweb_trainer.collect.expert_tasks`, the
multi-step ones included) is played on ``RealWeb-v0`` by the expert and by epsilon-exploration (the
expert, replaced at each step with probability epsilon by a random valid action), through
``dynaweb-collect``. The task seeds are split into train, validation and test by
:func:`split_of_seed`; each split is collected into its own directory, so no file ever mixes them,
and every record's ``metadata["split"]`` names its split::

    <output_dir>/train/expert.jsonl  <output_dir>/train/explore-e0.3-s0.jsonl
    <output_dir>/validation/...      <output_dir>/test/...
    <output_dir>/MANIFEST.json       # command, tasks, seeds, and per file: sha256, records, transitions

Command line (the full collection; ~5,000 episodes)::

    dynaweb-build-data --output-dir data/miniwob-large --seeds 0-99 --epsilons 0.3
    dynaweb-build-data --verify data/miniwob-large      # recompute the checksums of the manifest

Resuming: re-running the same command skips every episode already written (``dynaweb-collect``
resumes per file) and rewrites the manifest at the end, so an interrupted build is finished by
running it again. ``--verify`` exits 1 if a file's checksum or record count differs from the
manifest's. Train on the result with ``dynaweb-train-wm --dataset_path <output_dir>/train``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.shipped import split_of
from dynaweb_env.data.tasks import parse_seeds

from .collect import CollectConfig, collect, expert_tasks, policy_label
from .exploration import EXPLORE_POLICY

#: The splits, each a set of task seeds (:func:`split_of_seed`).
SPLITS = ("train", "validation", "test")
#: The manifest file in the output directory.
MANIFEST_FILE = "MANIFEST.json"


def split_of_seed(task_seed: int) -> str:
    """The large dataset's split of a task seed: :func:`~dynaweb_env.data.shipped.split_of` with ``validation``
    (``test`` for seeds ``4 mod 5``, as ``dynaweb-collect`` and the shipped data; ``validation`` for ``3 mod 5``)."""
    return split_of(task_seed, validation=True)


def policies(epsilons: Sequence[float]) -> list[dict[str, Any]]:
    """The collecting policies: the expert, then exploration at each epsilon (``CollectConfig`` fields)."""
    return [{"policy": "expert"}] + [{"policy": EXPLORE_POLICY, "epsilon": float(e)} for e in epsilons]


def _relabel(path: Path, split: str) -> None:
    """Give every record of ``path`` ``metadata["split"] = split`` (``dynaweb-collect`` knows only train/test).

    Written to a temporary file and renamed over the original, so an interruption loses nothing. A bad line is
    skipped with a warning naming it (:func:`~dynaweb_env.data.jsonl.iter_jsonl_lines`), and dropped if the file
    is rewritten.
    """
    from dynaweb_env.data.jsonl import iter_jsonl_lines

    lines, changed = [], []
    for line in iter_jsonl_lines(path):
        lines.append(line.text.decode("utf-8"))
        record = line.record
        record.setdefault("metadata", {})["split"] = split
        changed.append(json.dumps(record))
    if changed != lines:
        temporary = path.with_suffix(".jsonl.tmp")
        temporary.write_text("".join(f"{line}\n" for line in changed))
        os.replace(temporary, path)


def file_entry(path: Path, split: str) -> dict[str, Any]:
    """Checksum and counts of one data file; ``ValueError`` if a record belongs to another split."""
    from dynaweb_env.data.io import iter_trajectories

    records = transitions = successes = 0
    for trajectory in iter_trajectories(path):
        seed = trajectory.metadata.get("seed")
        if not isinstance(seed, int) or split_of_seed(seed) != split or trajectory.metadata.get("split") != split:
            raise ValueError(f"{path}: {trajectory.id} (task seed {seed!r}) is not a {split} record")
        records += 1
        transitions += sum(1 for step in trajectory.steps[:-1] if step.action.strip())
        successes += trajectory.success
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"sha256": digest, "bytes": path.stat().st_size, "records": records, "transitions": transitions,
            "successes": successes}  # fmt: skip


def task_actions(output: Path, files: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Actions per episode of each task under each policy, over every split: ``{task: {policy: counts}}``.

    ``counts`` holds ``episodes``, ``successes``, and the ``median``/``max`` number of actions of an episode (every
    recorded action, a final ``stop`` included where the policy sent one), so a long task shows in its data.
    """
    from dynaweb_env.data.io import iter_trajectories

    lengths: dict[str, dict[str, list[tuple[int, bool]]]] = {}
    for name in files:
        policy = Path(name).name.removesuffix(".jsonl")
        for trajectory in iter_trajectories(output / name):
            actions = sum(1 for step in trajectory.steps if step.action.strip())
            lengths.setdefault(trajectory.task_id, {}).setdefault(policy, []).append((actions, trajectory.success))
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for task, by_policy in sorted(lengths.items()):
        table[task] = {}
        for policy, rows in sorted(by_policy.items()):
            counts = sorted(actions for actions, _ in rows)
            table[task][policy] = {
                "episodes": len(rows), "successes": sum(success for _, success in rows),
                "median_actions": statistics.median(counts), "max_actions": counts[-1],
            }  # fmt: skip
    return table


def build(
    output_dir: str | os.PathLike[str],
    tasks: Sequence[str] | None = None,
    seeds: str = "0-99",
    epsilons: Sequence[float] = (0.3,),
    num_envs: int = 4,
    max_steps: int = 10,
    tokenizer: str = "smollm2-135m",
    command: str = "",
    show_progress: bool = True,
) -> dict[str, Any]:
    """Collect every split with every policy (resuming what is there) and write the manifest.

    Returns:
        The manifest (also written to ``<output_dir>/MANIFEST.json``).
    """
    tasks = list(tasks or expert_tasks())
    unknown = sorted(set(tasks) - set(expert_tasks()))
    if unknown:
        raise ValueError(f"no scripted expert for {unknown}; tasks with one: {', '.join(expert_tasks())}")
    seed_list = parse_seeds(seeds)
    output = Path(output_dir)
    started = time.perf_counter()
    files: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        split_seeds = [seed for seed in seed_list if split_of_seed(seed) == split]
        if not split_seeds:
            continue
        for fields in policies(epsilons):
            config = CollectConfig(
                tasks=tasks, seeds=",".join(map(str, split_seeds)), num_envs=num_envs, max_steps=max_steps,
                tokenizer=tokenizer, output=str(output / split / "placeholder.jsonl"), **fields,
            )  # fmt: skip
            config.output = str(output / split / f"{policy_label(config)}.jsonl")
            collect(config, show_progress=show_progress)
            _relabel(Path(config.output), split)
            files[f"{split}/{Path(config.output).name}"] = file_entry(Path(config.output), split)
    manifest = {
        "command": command,
        "tasks": tasks,
        "seeds": seeds,
        "split_rule": "task seed mod 5: 4 -> test, 3 -> validation, else train",
        "policies": [policy_label(CollectConfig(**fields)) for fields in policies(epsilons)],
        "max_steps": max_steps,
        "files": files,
        "totals": {key: sum(entry[key] for entry in files.values()) for key in ("records", "transitions", "successes")},
        "observation": "RealWeb-v0's default: clickable generic elements kept (clickable=True)",
        "per_task": task_actions(output, list(files)),
        "build_seconds_this_run": round(time.perf_counter() - started, 1),
    }
    (output / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def verify(output_dir: str | os.PathLike[str]) -> list[str]:
    """The problems of a built dataset against its manifest (``[]``: every file is as recorded)."""
    output = Path(output_dir)
    manifest_path = output / MANIFEST_FILE
    if not manifest_path.is_file():
        return [f"no {MANIFEST_FILE} in {output}"]
    problems = []
    for name, recorded in json.loads(manifest_path.read_text())["files"].items():
        path = output / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        try:
            entry = file_entry(path, name.split("/")[0])
        except ValueError as error:
            problems.append(str(error))
            continue
        for key in ("sha256", "records"):
            if entry[key] != recorded[key]:
                problems.append(f"{name}: {key} is {entry[key]}, the manifest says {recorded[key]}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-build-data``: ``0`` done, ``1`` verification failed, ``2`` bad arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="dynaweb-build-data", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="data/miniwob-large", help="Where the splits and manifest go.")
    parser.add_argument("--tasks", nargs="+", default=None, help="Task ids (default: every task with an expert).")
    parser.add_argument("--seeds", default="0-99", help="Task seeds, e.g. 0-99 or 1,5,9 (split by seed mod 5).")
    parser.add_argument("--epsilons", nargs="*", type=float, default=[0.3], help="Exploration epsilons.")
    parser.add_argument("--num-envs", type=int, default=4, help="Browsers in parallel.")
    parser.add_argument("--max-steps", type=int, default=10, help="Most actions per episode.")
    parser.add_argument("--tokenizer", default="smollm2-135m", help="Tokenizer that sizes the recorded turns.")
    parser.add_argument("--verify", metavar="DIR", help="Check DIR's files against its manifest; collect nothing.")
    args = parser.parse_args(argv)
    if args.verify:
        problems = verify(args.verify)
        print("\n".join(problems) or f"{args.verify}: every file matches {MANIFEST_FILE}")
        return 1 if problems else 0
    try:
        manifest = build(
            args.output_dir, args.tasks, args.seeds, args.epsilons, args.num_envs, args.max_steps,
            args.tokenizer, command=shlex.join(["dynaweb-build-data", *argv]),
        )  # fmt: skip
    except ValueError as error:
        print(f"dynaweb-build-data: error: {error}", file=sys.stderr)
        return 2
    totals = manifest["totals"]
    print(
        f"dynaweb-build-data: {totals['records']} episodes, {totals['transitions']} transitions, "
        f"{totals['successes']} successes in {len(manifest['files'])} files; {Path(args.output_dir) / MANIFEST_FILE}"
    )
    return 0


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()


__all__ = [
    "MANIFEST_FILE", "SPLITS", "build", "file_entry", "main", "parse_seeds", "split_of_seed", "task_actions", "verify",
]  # fmt: skip
