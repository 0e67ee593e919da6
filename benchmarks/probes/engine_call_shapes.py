"""Which engine serves which call shape: CTranslate2 vs transformers on the world model's own prompts, A/B.

    python -m benchmarks.probes.engine_call_shapes            # ~20 min on one core of the 2-core CPU
    python -m benchmarks.probes.engine_call_shapes --rows 1 8 --shapes group
    python -m benchmarks.probes.engine_call_shapes --engines ct2 transformers 'transformers?dtype=bfloat16'

The prompts are the default world model's, captured from a ``DreamWebVectorEnv`` step (greedy, the
patch world model's 384-token budget) in two shapes:

- ``mixed``: 8 start states of 8 tasks (``benchmarks/env_throughput.py``'s), pages of different lengths
  behind the shared system prompt;
- ``group``: one GSPO group, 8 different actions on one page (``env_throughput``'s group).

Each engine is a backend kind with optional spec options (``transformers?dtype=bfloat16``: transformers
with bfloat16 weights). For each shape and number of prompts, each engine generates
the first ``rows`` prompts in one call (``batched``) and one call per prompt (``one_by_one``), on one warm backend
per engine. Saved to
``benchmarks/results/engine/engine_call_shapes.json``; :mod:`dynaweb_env.llm.routed_backend` takes its rule
from it (CTranslate2 for one prompt, transformers from two).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.models import DEFAULT_WORLD_MODEL, world_model_output_mode

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from benchmarks.env_throughput import TimedBackend, bench_dream, dream_start_states, group_start  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "engine" / "engine_call_shapes.json"
ENGINES = ("ct2", "transformers")


class RecordingBackend(TimedBackend):
    """Records the token ids of every prompt it generates for."""

    def reset_counters(self) -> None:
        super().reset_counters()
        self.prompts: list[list[int]] = []

    def generate(self, conversations, params):
        self.prompts += [self.backend.chat_prompt_ids(conversation) for conversation in conversations]
        self.params = params
        return super().generate(conversations, params)

    def generate_from_ids(self, prompt_ids, params):
        self.prompts += [list(ids) for ids in prompt_ids]
        self.params = params
        return super().generate_from_ids(prompt_ids, params)


def world_model_prompts(
    backend, shape: str, max_new_tokens: int, output_mode: str | None
) -> tuple[list[list[int]], SamplingParams]:
    """The 8 world-model prompts of one dream step of ``shape`` (``mixed`` or ``group``), and the world model's
    sampling parameters (its stop rules included)."""
    states, actions = group_start(8) if shape == "group" else dream_start_states(8)
    recorder = RecordingBackend(backend)
    bench_dream(recorder, states, actions, max_new_tokens, batched=True, output_mode=output_mode)
    return recorder.prompts, recorder.params


WAYS = ("batched", "one_by_one")


def engine_spec(engine: str, model: str) -> str:
    """``kind?options`` and a model -> the spec ``kind:model?options``."""
    kind, mark, options = engine.partition("?")
    return f"{kind}:{model}{mark}{options}"


def timed(backends: dict, prompts: list[list[int]], params: SamplingParams) -> dict:
    """One call of all ``prompts`` on ``backends["batched"]``, then one call each on ``backends["one_by_one"]``."""
    start = time.perf_counter()
    batched = backends["batched"].generate_from_ids(prompts, params)
    middle = time.perf_counter()
    alone = [backends["one_by_one"].generate_from_ids([prompt], params)[0] for prompt in prompts]
    end = time.perf_counter()
    return {
        "batched_seconds": round(middle - start, 2),
        "one_by_one_seconds": round(end - middle, 2),
        "tokens": [sum(len(g.completion_ids) for g in batched), sum(len(g.completion_ids) for g in alone)],
    }


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", default=DEFAULT_WORLD_MODEL, help="a model both engines load")
    parser.add_argument("--shapes", nargs="+", default=["mixed", "group"], choices=["mixed", "group"])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8], help="prompts per call (at most 8)")
    parser.add_argument(
        "--engines", nargs="+", default=list(ENGINES), help="backend kinds, each with optional spec options: kind?k=v"
    )
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not all(1 <= rows <= 8 for rows in args.rows):
        parser.error("--rows must be between 1 and 8")
    if not any(engine.startswith("transformers") for engine in args.engines):
        parser.error("--engines must include a transformers one: the prompts are recorded through it")
    # Per engine, one backend for the batched calls and one that only ever sees single prompts: the engine keeps
    # a batch's shared prefix for later calls, which a process that steps one env never has.
    backends = {
        name: {way: make_backend(engine_spec(name, args.world_model), cache=False) for way in WAYS}
        for name in args.engines
    }
    # The prompts are recorded through a transformers backend (a DreamWebVectorEnv step on it).
    recorder = next(pair["batched"] for name, pair in backends.items() if name.startswith("transformers"))
    load = [round(value, 1) for value in os.getloadavg()]
    shapes: dict = {}
    mode = world_model_output_mode(args.world_model)
    for shape in args.shapes:
        prompts, params = world_model_prompts(recorder, shape, args.max_new_tokens, mode)
        shapes[shape] = {"prompt_tokens": [len(prompt) for prompt in prompts], "rows": {}}
        for rows in args.rows:
            row = {name: timed(pair, prompts[:rows], params) for name, pair in backends.items()}
            shapes[shape]["rows"][str(rows)] = row
            print(shape, rows, json.dumps(row), flush=True)
    result = {
        "command": shlex.join(
            ["python", "-m", "benchmarks.probes.engine_call_shapes", *(sys.argv[1:] if argv is None else argv)]
        ),
        "world_model": args.world_model,
        "threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "shapes": shapes,
        "load_average_at_start": load,
        "load_average_at_end": [round(value, 1) for value in os.getloadavg()],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.output}")
    return result


if __name__ == "__main__":
    main()
