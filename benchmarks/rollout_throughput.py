"""Rollout throughput: batched vs one episode at a time, with the raw ``generate`` ratio beside it.

Command (the numbers in ``benchmarks/results/throughput/rollout_throughput.json`` come from it)::

    python benchmarks/rollout_throughput.py --env dream --episodes 8

It runs the same ``--episodes`` episodes (the first shipped start states, or MiniWoB++ task seeds
with ``--env real``) twice through :func:`dynaweb_trainer.rollout.run_episodes`, the training
and evaluation loop:

- **batched**: a vector env with ``--episodes`` sub-envs, so every turn is one batched policy
  call and one env step (for dreams: one batched world-model call and one judge call);
- **sequential**: a vector env with one sub-env, so the episodes run one after another.

It reports policy tokens/s (generated tokens per second of policy generation), env steps/s (episode
steps per second of wall time) and the wall-time speedup. Because batching on a CPU is bounded by
prefill (DESIGN.md), it also times the raw backend on the same first-turn prompts, all in one
``generate_from_ids`` call vs one call per prompt: the batched rollout's speedup should track that
ratio, i.e. the env and loop add no overhead of their own. ``--env identity`` (no world model, no
browser) isolates the policy side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "throughput"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=["dream", "real", "identity"], default="dream")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per mode (and sub-envs when batched)")
    parser.add_argument("--policy", default="smollm2-135m")
    parser.add_argument("--world-model", default="smollm2-135m", help="dream env only")
    parser.add_argument("--max-steps", type=int, default=2, help="agent step limit (dream length for dreams)")
    parser.add_argument("--max-turn-tokens", type=int, default=48)
    parser.add_argument("--world-model-max-new-tokens", type=int, default=256)
    parser.add_argument("--max-axtree-chars", type=int, default=1500)
    parser.add_argument("--task", default="miniwob.click-button", help="real env only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "rollout_throughput.json")
    return parser.parse_args(argv)


def make_env(args: argparse.Namespace, num_envs: int):
    from dynaweb_trainer.config import GSPOConfig
    from dynaweb_trainer.env_factory import make_vector_env
    from dynaweb_trainer.identity_env import make_click_button_vector_env

    if args.env == "identity":
        return make_click_button_vector_env(num_envs, max_steps=args.max_steps)
    config = GSPOConfig(
        output_dir="/tmp/unused", environment=args.env, world_model=args.world_model, dream_length=args.max_steps,
        agent_max_steps=args.max_steps, world_model_max_new_tokens=args.world_model_max_new_tokens,
        tasks=[args.task] if args.env == "real" else None,
    )  # fmt: skip
    return make_vector_env(args.env, config, num_envs, [args.task])


def start_options(args: argparse.Namespace) -> list[dict]:
    from dynaweb_env.data.start_states import load_start_states
    from dynaweb_trainer.identity_env import TASK_ID

    if args.env == "dream":
        states = load_start_states(include_intermediate=False)
        return [{"start_state": states[i % len(states)].to_dict()} for i in range(args.episodes)]
    task = TASK_ID if args.env == "identity" else args.task
    return [{"task": task, "task_seed": i} for i in range(args.episodes)]


def run_mode(args, backend, encoder, options, num_envs: int) -> dict:
    from dynaweb_env.llm.base import SamplingParams
    from dynaweb_trainer.rollout import RolloutStats, run_episodes, summarize_episodes

    env = make_env(args, num_envs)
    stats = RolloutStats()
    sampling = SamplingParams(max_new_tokens=args.max_turn_tokens, temperature=0.7, top_p=0.9)
    try:
        results = run_episodes(env, backend, encoder, options, sampling, args.max_steps, seed=args.seed, stats=stats)
    finally:
        env.close()
    return {"num_envs": num_envs, **stats.to_dict(), **summarize_episodes(results)}


def raw_generate(args, backend, encoder, options) -> dict:
    """One ``generate_from_ids`` call on all first-turn prompts vs one call per prompt."""
    from dynaweb_env.llm.base import SamplingParams

    env = make_env(args, 1)
    prompts = []
    for option in options:
        observation, _ = env.reset(options=option)
        prompts.append(encoder.prompt_ids({key: values[0] for key, values in observation.items()}))
    env.close()
    sampling = SamplingParams(max_new_tokens=args.max_turn_tokens, temperature=0.7, top_p=0.9, seed=args.seed)
    tick = time.perf_counter()
    batched = backend.generate_from_ids(prompts, sampling)
    batched_seconds = time.perf_counter() - tick
    tick = time.perf_counter()
    single = [backend.generate_from_ids([prompt], sampling)[0] for prompt in prompts]
    single_seconds = time.perf_counter() - tick
    return {
        "prompts": len(prompts),
        "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts),
        "batched_seconds": batched_seconds,
        "sequential_seconds": single_seconds,
        "batched_tokens": sum(len(g.completion_ids) for g in batched),
        "sequential_tokens": sum(len(g.completion_ids) for g in single),
        "time_ratio_batched_over_sequential": batched_seconds / single_seconds,
    }


def main(argv: list[str] | None = None) -> dict:
    import torch
    from transformers import AutoTokenizer

    from dynaweb_env.agent import POLICY_SYSTEM_PROMPT
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_env.models import resolve_model
    from dynaweb_trainer.encoding import EpisodeEncoder

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    backend = TransformersBackend(args.policy)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.policy), trust_remote_code=False)
    encoder = EpisodeEncoder(tokenizer, POLICY_SYSTEM_PROMPT, args.max_axtree_chars)
    options = start_options(args)
    print(f"rollout_throughput: {args.env}, {len(options)} episodes, policy {args.policy}", flush=True)
    batched = run_mode(args, backend, encoder, options, num_envs=len(options))
    print(f"  batched:    {batched['wall_seconds']:.1f}s, {batched['policy_tokens_per_second']:.1f} tok/s", flush=True)
    sequential = run_mode(args, backend, encoder, options, num_envs=1)
    print(f"  sequential: {sequential['wall_seconds']:.1f}s, {sequential['policy_tokens_per_second']:.1f} tok/s")
    raw = raw_generate(args, backend, encoder, options)
    print(f"  raw generate time ratio (batched / one by one): {raw['time_ratio_batched_over_sequential']:.2f}")
    result = {
        "command": "python benchmarks/rollout_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {key: str(value) for key, value in vars(args).items()},
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average": os.getloadavg(),
        },  # fmt: skip
        "batched": batched,
        "sequential": sequential,
        "wall_time_ratio_batched_over_sequential": batched["wall_seconds"] / sequential["wall_seconds"],
        "raw_generate": raw,
    }
    print(f"  rollout time ratio (batched / one at a time): {result['wall_time_ratio_batched_over_sequential']:.2f}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"  saved {args.output}")
    return result


if __name__ == "__main__":
    main()
