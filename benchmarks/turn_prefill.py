"""What keeping whole prompts saves on long tasks: the same multi-turn episodes with and without it, side by side.

An agent's prompt at turn ``t`` is its prompt at turn ``t - 1``, its answer and the new page. Without
:class:`~dynaweb_env.llm.kv_cache.PromptStates` a CPU prefills the whole conversation again every turn (only the
system prompt's cache is kept), which was 81% of ``dynaweb eval``'s time on the long tasks.

Episodes: each task's first held-out expert episode (the all-tasks dataset's validation split), encoded turn by
turn as ``dynaweb eval`` encodes a policy's episode (:class:`~dynaweb_trainer.encoding.EpisodeEncoder`, trees cut at
``--max-axtree-chars``, ``--page-history``), up to the task's step limit. ``--num-envs`` episodes go at a time,
and at each turn the policy answers every episode still running in one call, greedy, as ``dynaweb eval
--num-envs`` calls it; the conversation goes on with the expert's action, so both settings see the same prompts.

Two settings of :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` on the same loaded weights,
taking turns call by call so that load from other processes falls on both alike:

- ``system``: the system prompt's KV cache kept between calls (an evaluated policy before 2026-12-07);
- ``turns``: whole prompts kept too (``prompt_states``, what an evaluated policy has now).

Reported: seconds per call and in all, their ratio, and whether the greedy answers are the same tokens.

Command (the one that produced ``benchmarks/results/throughput/turn_prefill.json``)::

    python -m benchmarks.turn_prefill --policy /work/runs/claims/shared/sft-seed0-2adef35d
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "throughput"


@dataclass
class ExpertEpisode:
    """A held-out expert episode encoded turn by turn: the prompt before each policy turn and the expert's action."""

    task_id: str
    trajectory_id: str
    prompts: list[list[int]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


def expert_episodes(tasks: list[str], encoder: Any, max_steps: int, per_task: int = 1) -> list[ExpertEpisode]:
    """The first ``per_task`` held-out expert episodes of each task (the all-tasks dataset's validation split),
    encoded as ``dynaweb eval`` encodes a policy's episode, the conversation going on with the expert's actions."""
    from dynaweb_env.agent import format_policy_response
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.shipped import ALL_TASKS_DATA_DIR
    from dynaweb_env.data.tasks import step_limit
    from dynaweb_trainer.encoding import trajectory_observations

    episodes: list[ExpertEpisode] = []
    counts = dict.fromkeys(tasks, 0)
    for trajectory in read_trajectories(ALL_TASKS_DATA_DIR / "validation" / "expert.jsonl.xz"):
        if counts.get(trajectory.task_id, per_task) >= per_task:
            continue
        counts[trajectory.task_id] += 1
        steps = [step for step in trajectory.steps if step.action][: step_limit(trajectory.task_id, max_steps)]
        observations = trajectory_observations(trajectory)
        state = encoder.start(observations[0])
        episode = ExpertEpisode(trajectory.task_id, trajectory.id)
        for index, step in enumerate(steps):
            if index:
                encoder.add_observation(state, observations[index])
            episode.prompts.append(list(state.input_ids))
            episode.actions.append(step.action)
            state.add_policy_turn(encoder.response_ids(format_policy_response(step.reasoning, step.action)))
        episodes.append(episode)
    if missing := sorted(task for task, count in counts.items() if not count):
        raise ValueError(f"no held-out expert episode of {missing}")
    return episodes


def replay_calls(episodes: list[ExpertEpisode], num_envs: int) -> Iterator[tuple[list[int], int]]:
    """The policy calls of a replay as ``dynaweb eval --num-envs`` makes them: ``num_envs`` episodes at a time, one
    call a turn for every episode of the group still running, as ``(episode indices, turn)``."""
    for first in range(0, len(episodes), num_envs):
        group = range(first, min(first + num_envs, len(episodes)))
        for turn in range(max(len(episodes[i].prompts) for i in group)):
            yield [i for i in group if turn < len(episodes[i].prompts)], turn


def replay_side_by_side(
    episodes: list[ExpertEpisode], backends: dict[str, Any], params: Any, num_envs: int
) -> tuple[list[tuple[int, int]], dict[str, list[float]], dict[str, list[Any]]]:
    """Every policy call of a replay (:func:`replay_calls`) made by each backend, the backends taking turns call by
    call so that load from other processes falls on all alike.

    Returns:
        ``(rows, seconds, generations)``: the ``(episode index, turn)`` of each answer in call order; each
        backend's seconds per call; each backend's generations, aligned with ``rows``.
    """
    rows: list[tuple[int, int]] = []
    seconds: dict[str, list[float]] = {name: [] for name in backends}
    generations: dict[str, list[Any]] = {name: [] for name in backends}
    for indices, turn in replay_calls(episodes, num_envs):
        rows += [(i, turn) for i in indices]
        call = [episodes[i].prompts[turn] for i in indices]
        for name, backend in backends.items():
            tick = time.perf_counter()
            generations[name] += backend.generate_from_ids(call, params)
            seconds[name].append(time.perf_counter() - tick)
    return rows, seconds, generations


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a replay of held-out expert episodes as ``dynaweb eval`` would play them (the long suite's
    observation by default): ``--policy --tasks --num-envs --max-steps --max-axtree-chars --page-history
    --max-new-tokens``."""
    from dynaweb_env.data.tasks import TASK_SUITES

    parser.add_argument("--policy", default="smollm2-135m", help="dynaweb eval's --policy (a model or an adapter)")
    parser.add_argument("--tasks", nargs="+", default=list(TASK_SUITES["long"]))
    parser.add_argument("--num-envs", type=int, default=4, help="episodes a call")
    parser.add_argument("--max-steps", type=int, default=10, help="step limit (raised for long tasks, as in eval)")
    parser.add_argument("--max-axtree-chars", type=int, default=3000)
    parser.add_argument("--page-history", default="edits")
    parser.add_argument("--max-new-tokens", type=int, default=64)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from dynaweb_env.llm.base import SamplingParams
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_trainer.encoding import EpisodeEncoder
    from dynaweb_trainer.policy import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/turn_prefill.py")
    add_replay_arguments(parser)
    parser.add_argument("--output", type=Path, default=RESULTS / "turn_prefill.json")
    args = parser.parse_args(argv)

    loaded = load_policy(args.policy)
    model, tokenizer = loaded.policy.backend.model, loaded.policy.backend.tokenizer
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=args.max_axtree_chars, page_history=args.page_history)
    episodes = expert_episodes(args.tasks, encoder, args.max_steps)
    backends = {
        name: TransformersBackend(model, tokenizer, frozen=True, keep_prompts=name == "turns")
        for name in ("system", "turns")
    }
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0)
    started = time.perf_counter()
    _, seconds, generations = replay_side_by_side(episodes, backends, params, args.num_envs)
    answers = {name: [list(g.completion_ids) for g in generated] for name, generated in generations.items()}
    total = {name: sum(values) for name, values in seconds.items()}
    report: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks.turn_prefill", *(sys.argv[1:] if argv is None else argv)]),
        "policy": args.policy,
        "tasks": [episode.task_id for episode in episodes],
        "turns_per_episode": [len(episode.prompts) for episode in episodes],
        "prompt_tokens_last_turn": [len(episode.prompts[-1]) for episode in episodes],
        "num_envs": args.num_envs,
        "calls": len(seconds["system"]),
        "observation": {"max_axtree_chars": args.max_axtree_chars, "page_history": args.page_history},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        **{
            name: {
                "seconds_per_call": round(statistics.fmean(seconds[name]), 3),
                "seconds_total": round(total[name], 1),
                "prompts_extended": getattr(backends[name].prompt_states, "hits", 0),
            }
            for name in backends
        },
        "turns_over_system": round(total["turns"] / total["system"], 3),
        "same_tokens": answers["turns"] == answers["system"],
        "answers_differing": sum(a != b for a, b in zip(answers["turns"], answers["system"], strict=True)),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{report['calls']} calls of up to {args.num_envs} episodes: system prompt kept {total['system']:.0f} s, "
        f"whole prompts kept {total['turns']:.0f} s ({report['turns_over_system']:.2f}x); "
        f"same tokens: {report['same_tokens']} ({report['answers_differing']} answers differ)"
    )
    return report


if __name__ == "__main__":
    main()
