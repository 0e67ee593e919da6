"""``dynaweb-dream``: watch a policy act in a dream, step by step.

    dynaweb-dream                                   # embedded policy, shipped world model and start state
    dynaweb-dream --policy expert                   # the scripted expert acts: watch the world model answer
    dynaweb-dream --task miniwob.click-checkboxes --seed 3 --dream-length 4
    dynaweb-dream --policy outputs/dynaweb-gspo --world-model openai:wm@http://localhost:8000/v1
    dynaweb-dream --judge world_model               # the world model's backend judges (the paper's one LLM)

Each step prints the page the policy saw, its response, and the world model's predicted state
changes; the episode ends with the judge's verdict. The policy-environment loop is
:func:`~dynaweb_trainer.rollout.run_episodes`, the same one training and evaluation use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from dynaweb_env.agent import PAGE_HISTORIES, PAGE_HISTORY_HELP
from dynaweb_env.data.start_states import load_start_states
from dynaweb_env.envs.dream_setup import resolve_judge, resolve_world_model
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.models import DEFAULT_JUDGE
from dynaweb_env.observation import truncate_axtree

from .config import DreamEnvSettings
from .encoding import EpisodeEncoder
from .env_factory import make_dream_vector_env
from .policy import load_policy
from .rollout import run_episodes


@dataclass
class DreamDemoConfig(DreamEnvSettings):
    """Configuration of ``dynaweb-dream``: the dream env's settings (shorter defaults) plus these fields.

    Parameters:
        policy (`str`, *optional*, defaults to `"smollm2-135m"`):
            Policy reference, as ``dynaweb-eval`` takes it (``expert`` for the scripted experts).
        task (`str` or `None`, *optional*):
            Task of the start state (default: any).
        seed (`int`, *optional*, defaults to `0`):
            Picks the start state and seeds sampling.
        policy_max_new_tokens (`int`, *optional*, defaults to `64`):
            Token budget of one policy turn.
        max_axtree_chars (`int`, *optional*, defaults to `1500`):
            Tree budget in prompts and in the printout.
        page_history (`str`, *optional*, defaults to `"full"`):
            The policy's page history (`"edits"` for a policy trained with it), see `dynaweb-train`.
    """

    policy: str = field(default="smollm2-135m", metadata={"help": "Policy reference, as dynaweb-eval takes it."})
    judge: str | None = field(
        default=DEFAULT_JUDGE,
        metadata={
            "help": "Judge backend spec (default: the shipped trained judge, DreamWeb-v0's default; "
            "'world_model' for the world model's own backend, the paper's one-LLM setting)."
        },
    )
    world_model_output_mode: str | None = field(
        default=None, metadata={"help": "World-model output: tree or patch.", "aliases": ["--output-mode"]}
    )
    dream_length: int = field(default=3, metadata={"help": "Most steps of the dream."})
    world_model_max_new_tokens: int = field(default=384, metadata={"help": "Token budget of one WM prediction."})
    task: str | None = field(default=None, metadata={"help": "Task of the start state (default: any)."})
    seed: int = field(default=0, metadata={"help": "Picks the start state and seeds sampling."})
    policy_max_new_tokens: int = field(default=64, metadata={"help": "Token budget of one policy turn."})
    max_axtree_chars: int = field(default=1500, metadata={"help": "Tree budget in prompts and in the printout."})
    page_history: str = field(default="full", metadata={"help": PAGE_HISTORY_HELP, "choices": list(PAGE_HISTORIES)})

    def __post_init__(self) -> None:
        self.validate_dream_settings()


def parse_config(argv: Sequence[str] | None = None) -> DreamDemoConfig:
    """Parse ``dynaweb-dream`` arguments (``--config x.yaml`` gives defaults that flags override)."""
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags

    (config,) = word_negated_flags(TrlParser(DreamDemoConfig, prog="dynaweb-dream")).parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_config(list(sys.argv[1:] if argv is None else argv))
    states = [s for s in load_start_states(None) if args.task in (None, s.task_id)]
    if not states:
        print(f"dynaweb-dream: error: no shipped start state for task {args.task!r}", file=sys.stderr)
        return 2
    start = states[args.seed % len(states)]
    env = make_dream_vector_env(1, **{**args.env_kwargs(), "max_axtree_chars": args.max_axtree_chars})
    policy = load_policy(args.policy)
    encoder = EpisodeEncoder(policy.tokenizer, max_axtree_chars=args.max_axtree_chars, page_history=args.page_history)
    world_model, output_mode = resolve_world_model(args.world_model, args.world_model_output_mode)
    judge = "the world model" if resolve_judge(args.judge) is None else resolve_judge(args.judge)
    print(f"policy {policy.name} | world model {world_model} ({output_mode} mode) | judge {judge}")
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
    if result.final_info.get("judge_pending"):  # group-relative judging: a group of one dream
        ((reward, update),) = env.judge_groups([[result.final_info]], seed=args.seed)[0]
        result.reward = reward
        result.final_info.update(update)
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
    if len(result.observations) > len(result.responses):  # the last dreamed page, which no policy turn read
        last = result.observations[len(result.responses)]
        print(f"\n--- final page | {last['url']}")
        print(truncate_axtree(last["axtree"], args.max_axtree_chars))
    print(f"\nEND: {result.end_reason} after {result.num_steps} steps | reward {result.reward:g}")
    if final.get("judge_reasoning"):
        print(f"JUDGE: {' '.join(str(final['judge_reasoning']).split())}")
    elif final.get("judge_error"):
        print(f"JUDGE: no verdict ({final['judge_error']})")
    for guard in ("termination_gated", "objective_unmet", "judge_abstained"):  # a guard that withheld the reward
        if final.get(guard):
            print(f"GUARD {guard}: {final[guard]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
