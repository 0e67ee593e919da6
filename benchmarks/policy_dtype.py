"""An evaluated policy in float32 or bfloat16 on a CPU: seconds and answers, side by side on long-task turns.

``dynaweb eval`` loads a local policy in float32 on a CPU (``TransformersBackend``'s default), while the world
model's batches run in bfloat16 where the CPU multiplies bf16 matrices natively (AVX-512 BF16 / AMX). Whether the
policy should too turns on two things measured here on the same calls: the time, and whether its greedy answers
change (bfloat16 rounds every activation; a greedy policy may then pick another action).

Episodes: held-out expert episodes of the long tasks, replayed turn by turn as ``dynaweb eval --num-envs`` calls
the policy (:func:`~benchmarks.turn_prefill.replay_calls`; the conversation goes on with the expert's action), as
in :mod:`benchmarks.expert_agreement`. Both settings keep whole prompts between calls (``keep_prompts``, what an
evaluated policy has now) and take turns call by call, so that load from other processes falls on both alike.

Reported per setting: seconds per call and in all, the expert's action rate (``same_action``, as
``expert_agreement`` scores it); between them: the time ratio, the answers with the same tokens, and the turns
whose parsed action differs.

Command (the one that produced ``benchmarks/results/throughput/policy_dtype.json``)::

    python -m benchmarks.policy_dtype --policy /work/runs/claims/shared/sft-seed0-2adef35d \\
        --tasks miniwob.click-checkboxes-large miniwob.book-flight --num-envs 2
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.expert_agreement import compare  # noqa: E402
from benchmarks.turn_prefill import add_replay_arguments, expert_episodes, replay_side_by_side  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "throughput"
SETTINGS = ("float32", "bfloat16")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch

    from dynaweb_env.llm.base import SamplingParams, cpu_supports_bf16
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_trainer.encoding import EpisodeEncoder
    from dynaweb_trainer.policy import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/policy_dtype.py")
    add_replay_arguments(parser)
    parser.add_argument("--episodes-per-task", type=int, default=1, help="held-out expert episodes of each task")
    parser.add_argument("--output", type=Path, default=RESULTS / "policy_dtype.json")
    args = parser.parse_args(argv)

    loaded = load_policy(args.policy, device="cpu").policy.backend
    model, tokenizer = loaded.model, loaded.tokenizer
    models = {"float32": model.float(), "bfloat16": copy.deepcopy(model).to(torch.bfloat16)}
    backends = {name: TransformersBackend(models[name], tokenizer, frozen=True, keep_prompts=True) for name in SETTINGS}
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=args.max_axtree_chars, page_history=args.page_history)
    episodes = expert_episodes(args.tasks, encoder, args.max_steps, args.episodes_per_task)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0)
    started = time.perf_counter()
    rows, seconds, generations = replay_side_by_side(episodes, backends, params, args.num_envs)
    experts = [episodes[i].actions[turn] for i, turn in rows]
    texts = {name: [g.text for g in generated] for name, generated in generations.items()}
    tokens = {name: [list(g.completion_ids) for g in generated] for name, generated in generations.items()}
    scored = {
        name: [compare(text, expert) for text, expert in zip(texts[name], experts, strict=True)] for name in SETTINGS
    }
    total = {name: sum(values) for name, values in seconds.items()}
    actions_differ = [
        i for i, (a, b) in enumerate(zip(texts["float32"], texts["bfloat16"], strict=True)) if _action(a) != _action(b)
    ]
    report: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks.policy_dtype", *(sys.argv[1:] if argv is None else argv)]),
        "policy": args.policy,
        "tasks": [episode.task_id for episode in episodes],
        "turns": len(experts),
        "calls": len(seconds["float32"]),
        "num_envs": args.num_envs,
        "observation": {"max_axtree_chars": args.max_axtree_chars, "page_history": args.page_history},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu_bf16": cpu_supports_bf16()},
        **{
            name: {
                "seconds_per_call": round(statistics.fmean(seconds[name]), 3),
                "seconds_total": round(total[name], 1),
                "same_action_as_expert": round(statistics.fmean(row[0] for row in scored[name]), 3),
                "unparsable": round(statistics.fmean(row[2] for row in scored[name]), 3),
            }
            for name in SETTINGS
        },
        "bfloat16_over_float32": round(total["bfloat16"] / total["float32"], 3),
        "answers_same_tokens": sum(a == b for a, b in zip(tokens["float32"], tokens["bfloat16"], strict=True)),
        "turns_action_differs": len(actions_differ),
        "differing": [
            {"expert": experts[i], "float32": texts["float32"][i], "bfloat16": texts["bfloat16"][i]}
            for i in actions_differ
        ],
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{report['turns']} turns in {report['calls']} calls: float32 {total['float32']:.0f} s, bfloat16 "
        f"{total['bfloat16']:.0f} s ({report['bfloat16_over_float32']:.2f}x); same tokens on "
        f"{report['answers_same_tokens']}, another action on {report['turns_action_differs']}; expert's action "
        f"{report['float32']['same_action_as_expert']} / {report['bfloat16']['same_action_as_expert']}"
    )
    return report


def _action(answer: str) -> tuple[str, tuple[Any, ...]] | None:
    """The parsed action an answer writes, as ``(name, args)`` (``None``: it writes none in the grammar)."""
    from dynaweb_env.actions import extract_action, parse_action

    try:
        action = parse_action(extract_action(answer))
    except ValueError:
        return None
    return action.name, tuple(action.args)


if __name__ == "__main__":
    main()
