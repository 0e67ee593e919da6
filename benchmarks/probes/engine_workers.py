"""A ragged batch of world-model prompts on CTranslate2: one engine call, calls one after another, or side by side.

    nice -n 15 python -m benchmarks.probes.engine_workers             # 4 dream prompts, 32 new tokens, 3 rounds

CTranslate2 prefills a call's prompts only up to the shortest one (no left padding), so the backend splits
a ragged batch into several engine calls (``plan_groups``). This measures, on the raw engine, the same
prompts (954-1,294 tokens with the shipped world model's paper-style prompts) three ways, interleaved
round by round so that a shared machine's load falls on all alike:

- ``one_call``: all prompts in one ``generate_batch`` call, 1 worker x ``threads`` threads;
- ``plan_groups``: the calls ``plan_groups`` plans, one after another, 1 worker x ``threads`` threads
  (``CT2Backend(workers=1)``);
- ``workers``: the same calls side by side on ``threads`` workers x 1 thread (``CT2Backend(workers=2)``
  on 2 cores).

Every call generates exactly ``--new-tokens`` tokens greedily (``min_length``), so all three do the same work.
Saved to ``benchmarks/results/engine/engine_workers.json`` with the load average of every round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.llm.ct2_backend import CT2Backend, plan_groups

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from benchmarks.engine_throughput import world_model_prompts  # noqa: E402
from benchmarks.env_throughput import dream_start_states  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "engine" / "engine_workers.json"


def timed_calls(generator: Any, batches: list[list[list[str]]], new_tokens: int, asynchronous: bool) -> float:
    """Seconds to run ``batches`` as engine calls: one after another, or all submitted at once."""
    options = dict(max_length=new_tokens, min_length=new_tokens, include_prompt_in_result=False, sampling_topk=1)
    start = time.perf_counter()
    handles = [generator.generate_batch(batch, asynchronous=asynchronous, **options) for batch in batches]
    for handle in handles if asynchronous else ():
        for result in handle:
            result.result()
    return round(time.perf_counter() - start, 2)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", default="smollm2-135m-wm")
    parser.add_argument("--prompts", type=int, nargs="+", default=[7, 2, 3, 4], help="indices of dream start states")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    states, actions = dream_start_states(max(args.prompts) + 1)
    backend = CT2Backend(args.world_model)
    conversations = world_model_prompts(states, actions, args.world_model)
    ids = [backend.chat_prompt_ids(conversations[i]) for i in args.prompts]
    tokens = [backend.tokenizer.convert_ids_to_tokens(prompt) for prompt in ids]
    groups = plan_groups([len(prompt) for prompt in ids], args.new_tokens, backend.max_batch_size)
    planned = [[tokens[i] for i in group] for group in groups]
    ct2, path = backend._ct2, str(backend.path)
    one_worker = ct2.Generator(path, compute_type="int8", intra_threads=backend.threads)
    workers = ct2.Generator(path, compute_type="int8", inter_threads=backend.threads, intra_threads=1)
    results: dict[str, Any] = {
        "prompt_tokens": [len(prompt) for prompt in ids], "new_tokens": args.new_tokens, "groups": groups,
        "threads": backend.threads, "rounds": [],
    }  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(args.rounds):
        row = {"load_average": round(os.getloadavg()[0], 1)}
        row["workers"] = timed_calls(workers, planned, args.new_tokens, asynchronous=True)
        row["plan_groups"] = timed_calls(one_worker, planned, args.new_tokens, asynchronous=False)
        row["one_call"] = timed_calls(one_worker, [tokens], args.new_tokens, asynchronous=False)
        results["rounds"].append(row)
        print(row, flush=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
