"""``dynaweb-dream``: watch a policy act in a dream, step by step.

    dynaweb-dream                                   # embedded policy, shipped world model and start state
    dynaweb-dream --policy expert                   # the scripted expert acts: watch the world model answer
    dynaweb-dream --task miniwob.click-checkboxes --seed 3 --dream-length 4
    dynaweb-dream --policy outputs/dynaweb-gspo --world-model openai:wm@http://localhost:8000/v1
    dynaweb-dream --judge world-model               # the world model's backend judges (DreamWeb-v0's default)

Each step prints the page the policy saw, its response, and the world model's predicted state
changes; the episode ends with the judge's verdict. The policy-environment loop is
:func:`~dynaweb_trainer.rollout.run_episodes`, the same one training and evaluation use.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import gymnasium as gym
from gymnasium.vector import AutoresetMode

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.start_states import load_start_states
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.models import TRAINED_JUDGE
from dynaweb_env.observation import truncate_axtree

from .encoding import EpisodeEncoder
from .policy import load_policy
from .rollout import run_episodes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dynaweb-dream", description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="smollm2-135m", help="policy reference, as dynaweb-eval takes it")
    parser.add_argument("--world-model", default=None, help="world-model backend spec (default: the shipped one)")
    parser.add_argument(
        "--judge",
        default=TRAINED_JUDGE,
        help="judge backend spec (default: the shipped trained judge, as the cpu-small preset trains with; "
        "'world-model' for the world model's own backend, DreamWeb-v0's default)",
    )
    parser.add_argument("--output-mode", choices=["tree", "patch"], default=None, help="world-model output mode")
    parser.add_argument("--task", default=None, help="task of the start state (default: any)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dream-length", type=int, default=3)
    parser.add_argument("--policy-max-new-tokens", type=int, default=64)
    parser.add_argument("--world-model-max-new-tokens", type=int, default=384)
    parser.add_argument("--max-axtree-chars", type=int, default=1500, help="tree budget in prompts and in the printout")
    args = parser.parse_args(argv)

    states = [s for s in load_start_states(None) if args.task in (None, s.task_id)]
    if not states:
        parser.error(f"no shipped start state for task {args.task!r}")
    start = states[args.seed % len(states)]
    env = gym.make_vec(
        "DreamWeb-v0",
        num_envs=1,
        autoreset_mode=AutoresetMode.DISABLED,
        world_model=args.world_model,
        judge=None if args.judge == "world-model" else args.judge,
        output_mode=args.output_mode,
        dream_length=args.dream_length,
        max_new_tokens=args.world_model_max_new_tokens,
        max_axtree_chars=args.max_axtree_chars,
    )
    policy = load_policy(args.policy)
    encoder = EpisodeEncoder(policy.tokenizer, max_axtree_chars=args.max_axtree_chars)
    world_model = args.world_model or f"shipped ({args.output_mode or 'tree'} mode)"
    print(f"policy {policy.name} | world model {world_model} | judge {args.judge}")
    print(f"task {start.task_id} (step {start.step_index} of a real trajectory)")
    result = run_episodes(
        env,
        policy.policy,
        encoder,
        [{"start_state": start.to_dict()}],
        SamplingParams(max_new_tokens=args.policy_max_new_tokens, temperature=0.7, top_p=0.9),
        max_steps=args.dream_length,
        seed=args.seed,
    )[0]
    env.close()

    print(f"\nGOAL: {start.goal}")
    for index, response in enumerate(result.responses):
        observation = result.observations[index]
        print(f"\n--- step {index + 1} | {observation['url']}")
        print(truncate_axtree(observation["axtree"], args.max_axtree_chars))
        print(f"POLICY: {' '.join(response.split())}")
        info = result.infos[index] if index < len(result.infos) else {}
        if info.get("changes"):
            print(f"WORLD MODEL CHANGES: {info['changes']}")
        if info.get("world_model_error"):
            print(f"WORLD MODEL ERROR: {info['world_model_error']}")
        if result.observations[index + 1 : index + 2] and result.observations[index + 1]["last_action_error"]:
            print(f"ACTION ERROR: {result.observations[index + 1]['last_action_error']}")
    final = result.final_info
    print(f"\nEND: {result.end_reason} after {result.num_steps} steps | reward {result.reward:.0f}")
    if final.get("judge_reasoning"):
        print(f"JUDGE: {' '.join(str(final['judge_reasoning']).split())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
