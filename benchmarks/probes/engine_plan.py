"""How many decoding steps ``plan_groups`` should expect: the batched dream step on the engine, A/B.

    python -m benchmarks.probes.engine_plan               # ~4 min on the 2-core CPU
    python -m benchmarks.probes.engine_plan --expected 256 64 --rounds 2

One 8-dream step through ``DreamWebVectorEnv`` on the default world model (CTranslate2, greedy), with
``plan_groups`` costing every call at each ``--expected`` number of decoding steps in turn, round after round on
one warm engine, so that the settings share the machine's load. Saved to
``benchmarks/results/engine/engine_plan.json``. The patch world model writes ~48 tokens a transition of the 384 it may;
a plan that expects the budget groups pages far apart in length, and the engine then feeds the longer pages'
extra tokens one batched decoding step at a time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dynaweb_env.llm import ct2_backend, make_backend
from dynaweb_env.models import DEFAULT_WORLD_MODEL
from dynaweb_env.world_model.model import DEFAULT_MAX_NEW_TOKENS

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from benchmarks.env_throughput import TimedBackend, bench_dream, dream_start_states  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "engine" / "engine_plan.json"


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expected", type=int, nargs="+", default=[256, 64], help="decoding steps to compare")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dreams", type=int, default=8)
    parser.add_argument("--world-model", default=DEFAULT_WORLD_MODEL, help="world model, on the engine")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS, help="token budget of a page")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    states, actions = dream_start_states(args.dreams)
    backend = TimedBackend(make_backend(f"ct2:{args.world_model}"))
    bench_dream(backend, states[:2], actions[:2], args.max_new_tokens, batched=False)  # untimed warm-up
    original = ct2_backend.plan_groups
    seconds: dict[str, list[float]] = {str(expected): [] for expected in args.expected}
    load = [round(value, 1) for value in os.getloadavg()]
    try:
        for _ in range(args.rounds):
            for expected in args.expected:
                ct2_backend.plan_groups = functools.partial(original, expected_new_tokens=expected)
                run = bench_dream(backend, states, actions, args.max_new_tokens, batched=True)
                seconds[str(expected)].append(round(run["seconds"], 2))
                print(f"expected {expected} steps: {run['seconds']:.1f} s ({run['generated_tokens']} tokens)")
    finally:
        ct2_backend.plan_groups = original
    result = {
        "command": shlex.join(
            ["python", "-m", "benchmarks.probes.engine_plan", *(sys.argv[1:] if argv is None else argv)]
        ),
        "world_model": f"ct2:{args.world_model}",
        "dreams": args.dreams,
        "seconds_by_expected_steps": seconds,
        "load_average_at_start": load,
        "load_average_at_end": [round(value, 1) for value in os.getloadavg()],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.output}")
    return result


if __name__ == "__main__":
    main()
