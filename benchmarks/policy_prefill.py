"""What the policy's prompt reuse saves: the same real prompts through three prefill settings, side by side.

Command (the one that produced ``benchmarks/results/throughput/policy_prefill.json``, on one core shared with a
planning run: ``OMP_NUM_THREADS=1 taskset -c 1``)::

    python -m benchmarks.policy_prefill --policy /work/runs/claims/shared/sft-seed0-cc0b9f68

Prompts: the first page of each small-suite task's held-out expert episode (the large dataset's validation split,
one per task), encoded as ``dynaweb eval`` encodes it (:class:`~dynaweb_trainer.encoding.EpisodeEncoder`, trees cut
at ``--max-axtree-chars``), two at a time, as ``dynaweb eval --num-envs 2`` calls the policy. Two call shapes:

- ``eval``: the two prompts, greedy (one real step of an evaluation);
- ``plan``: each prompt ``--plan - 1`` times, sampled at temperature 1 (a planner's extra candidates,
  ``dynaweb eval --plan K``).

Three settings of :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` on the same loaded weights:

- ``none`` (``share_prefix=False``): every row prefilled whole;
- ``batch`` (``share_prefix=True, frozen=False``): a prefix shared by a call's prompts, and identical prompts,
  prefilled once per call; nothing kept between calls (an adapter policy before 2026-11-29 had this, but prefilled
  identical prompts once each);
- ``kept`` (``frozen=True``, what :func:`~dynaweb_trainer.policy.load_policy` gives an evaluated adapter now): the
  system prompt's KV cache also kept between calls.

The settings take turns call by call, so that load from other processes falls on all three alike. Reported per
shape and setting: seconds per call, rows prefilled, generated tokens, the ratio of seconds to ``none``, and
whether the greedy answers are the same tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "throughput"
#: Backend settings compared: name -> (share_prefix, frozen).
SETTINGS = {"none": (False, False), "batch": (True, False), "kept": (True, True)}


def first_pages(tasks: list[str], max_axtree_chars: int, tokenizer: Any) -> list[list[int]]:
    """One encoded first-turn prompt per task: its first held-out expert episode's start page."""
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.shipped import LARGE_DATA_DIR
    from dynaweb_env.observation import make_observation
    from dynaweb_trainer.encoding import EpisodeEncoder

    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=max_axtree_chars)
    firsts = {}
    for trajectory in read_trajectories(LARGE_DATA_DIR / "validation" / "expert.jsonl.xz"):
        if trajectory.task_id in tasks and trajectory.task_id not in firsts:
            step = trajectory.steps[0]
            firsts[trajectory.task_id] = encoder.start(make_observation(trajectory.goal, step.url, step.axtree))
    missing = sorted(set(tasks) - set(firsts))
    if missing:
        raise ValueError(f"no held-out expert episode of {missing}")
    return [firsts[task].input_ids for task in tasks]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from dynaweb_env.llm.base import SamplingParams
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_trainer.evaluate import DEFAULT_TASKS
    from dynaweb_trainer.policy import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/policy_prefill.py")
    parser.add_argument("--policy", default="smollm2-135m", help="dynaweb eval's --policy (a model or an adapter)")
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="one prompt per task")
    parser.add_argument("--plan", type=int, default=4, help="K of the plan shape (K - 1 samples a prompt)")
    parser.add_argument("--max-axtree-chars", type=int, default=1500)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--output", type=Path, default=RESULTS / "policy_prefill.json")
    args = parser.parse_args(argv)
    if args.plan < 2:
        parser.error("--plan must be >= 2")

    loaded = load_policy(args.policy)
    model, tokenizer = loaded.policy.backend.model, loaded.policy.backend.tokenizer
    prompts = first_pages(args.tasks, args.max_axtree_chars, tokenizer)
    pairs = [prompts[i : i + 2] for i in range(0, len(prompts), 2)]
    shapes = {
        "eval": (pairs, SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0)),
        "plan": (
            [[ids for ids in pair for _ in range(args.plan - 1)] for pair in pairs],
            SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0),
        ),
    }
    backends = {
        name: TransformersBackend(model, tokenizer, share_prefix=share, frozen=frozen)
        for name, (share, frozen) in SETTINGS.items()
    }
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks.policy_prefill", *(sys.argv[1:] if argv is None else argv)]),
        "policy": args.policy,
        "tasks": args.tasks,
        "prompt_tokens": [len(ids) for ids in prompts],
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": {name: {"share_prefix": s, "frozen": f} for name, (s, f) in SETTINGS.items()},
        "shapes": {},
    }
    for shape, (calls, params) in shapes.items():
        seconds: dict[str, list[float]] = {name: [] for name in backends}
        tokens = dict.fromkeys(backends, 0)
        prefilled = {name: backend.prefilled_rows for name, backend in backends.items()}
        answers: dict[str, list[list[int]]] = {name: [] for name in backends}
        for call in calls:
            for name, backend in backends.items():  # the settings take turns call by call
                tick = time.perf_counter()
                generations = backend.generate_from_ids(call, params)
                seconds[name].append(time.perf_counter() - tick)
                tokens[name] += sum(len(g.completion_ids) for g in generations)
                answers[name] += [g.completion_ids for g in generations]
        none = statistics.fmean(seconds["none"])
        report["shapes"][shape] = {
            "calls": len(calls),
            "rows_per_call": len(calls[0]),
            "sampling": {"temperature": params.temperature, "max_new_tokens": params.max_new_tokens},
            **{
                name: {
                    "seconds_per_call": round(statistics.fmean(seconds[name]), 3),
                    "seconds_over_none": round(statistics.fmean(seconds[name]) / none, 3),
                    "rows_prefilled": backends[name].prefilled_rows - prefilled[name],
                    "generated_tokens": tokens[name],
                    "same_tokens_as_none": answers[name] == answers["none"],
                }
                for name in backends
            },
        }
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    for shape, row in report["shapes"].items():
        cells = ", ".join(
            f"{name} {row[name]['seconds_per_call']:.2f} s ({row[name]['seconds_over_none']:.2f}x)" for name in backends
        )
        print(f"{shape} ({row['rows_per_call']} rows a call): {cells}")
    return report


if __name__ == "__main__":
    main()
