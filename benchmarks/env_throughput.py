"""Transitions per second of real and dreamed web environments, measured side by side in one run.

    python benchmarks/env_throughput.py                       # the defaults (shipped patch world model, CTranslate2)
    python benchmarks/env_throughput.py --dream-tokens 128 --real-steps 12   # quicker look

What it measures (saved to ``benchmarks/results/throughput/env_throughput.json``):

- ``real_1``: ``RealWeb-v0``, one Chromium, scripted experts acting on MiniWoB++ tasks.
- ``real_4``: ``RealWeb-v0`` in an ``AsyncVectorEnv`` of 4 browsers (one process each).
- ``dream_1``: ``DreamWeb-v0``, one env.
- ``dream_8_batched`` vs ``dream_8_sequential``: 8 start states of 8 different tasks and their
  recorded expert actions, stepped through ``DreamWebVectorEnv`` (one batched world-model call per
  step) and through 8 ``DreamWebEnv`` one by one. Each way gets its own backend of the same model,
  warmed up as its own process would have it (a bare shipped name serves single prompts on
  CTranslate2 and batches on transformers: ``dynaweb_env.llm.routed_backend``; ``engines`` records
  which served each arm). Both decode greedily, so they generate the same next pages (the token
  counts are reported to show it). The dreams that end on the step are judged, also on a judge of
  each arm's own (``judge_seconds``). Beside the env ratio, the ratio of the time spent inside the world
  model's ``generate`` is reported: the env's own overhead should be near zero.
- ``group_8_batched`` vs ``group_8_sequential``: the shape ``dynaweb-train`` steps, a GSPO group: 8
  sub-envs reset to one start state (the trainer resets a group together), each taking a different
  action on that page (the expert's, then clicks on the page's other elements, as sampled members
  do), batched vs one by one. Batched, the 8 prompts share the page, which the engine prefills once.

Dream actions are real, valid actions on their page, so every dream step asks the world model for a
next page.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from tqdm import tqdm

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.start_states import builtin_start_states_path, load_start_states
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.experts import EXPERTS, get_expert
from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import Conversation, Generation, SamplingParams
from dynaweb_env.models import DEFAULT_JUDGE, DEFAULT_WORLD_MODEL, model_prompt_style, world_model_output_mode
from dynaweb_env.world_model.judge import judge_system_prompt
from dynaweb_env.world_model.model import OUTPUT_MODE_PROMPTS

RESULTS = Path(__file__).parent / "results" / "throughput" / "env_throughput.json"


class TimedBackend:
    """Wraps a backend to count calls, sequences, generated tokens and seconds spent generating."""

    def __init__(self, backend):
        self.backend = backend
        self.model_name = backend.model_name
        self.reset_counters()

    def reset_counters(self) -> None:
        self.calls = self.sequences = self.tokens = 0
        self.seconds = 0.0

    def _timed(self, method, batch, params: SamplingParams) -> list[Generation]:
        start = time.perf_counter()
        generations = method(batch, params)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.sequences += len(generations)
        self.tokens += sum(len(g.completion_ids) for g in generations)
        return generations

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        return self._timed(self.backend.generate, conversations, params)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        return self._timed(self.backend.generate_from_ids, prompt_ids, params)


def expert_tasks() -> list[str]:
    """MiniWoB++ tasks with a scripted expert, in a fixed order."""
    return sorted(task for task in EXPERTS if task.startswith("miniwob."))


def bench_real_single(steps: int, seed: int) -> dict:
    """One browser, expert actions, episodes over the expert tasks until ``steps`` transitions."""
    tasks = expert_tasks()
    env = gym.make("RealWeb-v0", task=tasks[0]).unwrapped
    transitions, resets, reset_seconds, step_seconds = 0, 0, 0.0, 0.0
    bar = tqdm(total=steps, desc="real x1", unit="step")
    try:
        while transitions < steps:
            task = tasks[resets % len(tasks)]
            start = time.perf_counter()
            observation, _ = env.reset(seed=seed + resets, options={"task": task, "task_seed": seed + resets})
            reset_seconds += time.perf_counter() - start
            resets += 1
            done = False
            while not done and transitions < steps:
                _, action = get_expert(task).act(observation)
                start = time.perf_counter()
                observation, _, terminated, truncated, _ = env.step(action)
                step_seconds += time.perf_counter() - start
                transitions += 1
                bar.update()
                done = terminated or truncated
    finally:
        env.close()
        bar.close()
    return {
        "transitions": transitions,
        "resets": resets,
        "step_seconds": step_seconds,
        "reset_seconds": reset_seconds,
        "transitions_per_second": transitions / step_seconds,
        "transitions_per_second_with_resets": transitions / (step_seconds + reset_seconds),
    }


def bench_real_vector(num_envs: int, steps: int, seed: int) -> dict:
    """``num_envs`` browsers in an AsyncVectorEnv (autoreset), expert actions, ``steps`` transitions."""
    tasks = expert_tasks()[:num_envs]
    env = gym.make_vec(
        "RealWeb-v0",
        num_envs,
        vectorization_mode="async",
        vector_kwargs={"shared_memory": False, "autoreset_mode": AutoresetMode.NEXT_STEP},
        tasks=tasks,
    )
    bar = tqdm(total=steps, desc=f"real x{num_envs}", unit="step")
    try:
        start = time.perf_counter()
        observations, infos = env.reset(seed=seed)
        reset_seconds = time.perf_counter() - start
        transitions, step_seconds = 0, 0.0
        while transitions < steps:
            actions = []
            for i in range(num_envs):
                observation = {key: observations[key][i] for key in observations}
                actions.append(get_expert(str(infos["task_id"][i])).act(observation)[1])
            start = time.perf_counter()
            # With NEXT_STEP autoreset a finished sub-env is reset by this call (its action ignored):
            # such a call is counted as a transition too, as every vectorized RL loop pays for it.
            observations, _, _, _, infos = env.step(tuple(actions))
            step_seconds += time.perf_counter() - start
            transitions += num_envs
            bar.update(num_envs)
    finally:
        env.close()
        bar.close()
    return {
        "num_envs": num_envs,
        "transitions": transitions,
        "step_seconds": step_seconds,
        "reset_seconds": reset_seconds,
        "transitions_per_second": transitions / step_seconds,
    }


def dream_start_states(count: int) -> tuple[list, list[str]]:
    """``count`` start states, one per task first, with the recorded expert action taken in each."""
    trajectories = {t.id: t for t in read_trajectories(builtin_start_states_path())}
    candidates = []
    for state in load_start_states(None):
        action = trajectories[state.trajectory_id].steps[state.step_index].action
        if action and not action.startswith("stop"):
            candidates.append((state, action))
    # Round-robin over tasks so the batch mixes pages of different sizes, as a training batch does.
    by_task: dict[str, list] = {}
    for state, action in candidates:
        by_task.setdefault(state.task_id, []).append((state, action))
    chosen = []
    while len(chosen) < count and any(by_task.values()):
        for task in sorted(by_task):
            if by_task[task] and len(chosen) < count:
                chosen.append(by_task[task].pop(0))
    return [state for state, _ in chosen], [action for _, action in chosen]


def group_start(count: int) -> tuple[list, list[str]]:
    """One GSPO group: the first start state whose page has ``count`` elements to click, ``count`` times,
    with its recorded expert action first and then clicks on the page's other elements, in page order."""
    trajectories = {t.id: t for t in read_trajectories(builtin_start_states_path())}
    for state in load_start_states(None):
        action = trajectories[state.trajectory_id].steps[state.step_index].action
        if not action or action.startswith("stop"):
            continue
        others = [f"click [{bid}]" for bid in dict.fromkeys(re.findall(r"\[(\d+)\]", state.axtree))]
        actions = [action, *(other for other in others if other != action)][:count]
        if len(actions) == count:
            return [state] * count, actions
    raise ValueError(f"no start state has {count} elements to click")


def system_prompt(spec: str, role: str) -> str:
    """The system prompt the env gives the model ``spec`` names as its world model or judge (``role``)."""
    style = model_prompt_style(spec)
    if role == "judge":
        return judge_system_prompt(style)
    return OUTPUT_MODE_PROMPTS[world_model_output_mode(spec) or "tree"](style)


def fresh_backend(spec: str, rows: int, role: str = "world_model") -> TimedBackend:
    """A backend of its own for one arm, warmed up (loaded) with a call of ``rows`` prompts, as a process
    that steps one env (``rows=1``) or a vector env (``rows>1``) has it after its first step: a bare
    shipped name serves single prompts on CTranslate2 and batches on transformers (``dynaweb_env.llm``),
    and both keep the model's system prompt (its ``role``'s) from its first call on."""
    backend = make_backend(spec, cache=False)
    system = system_prompt(spec, role)
    warm_up = [[{"role": "system", "content": system}, {"role": "user", "content": f"Page {i}"}] for i in range(rows)]
    backend.generate(warm_up, SamplingParams(max_new_tokens=1, temperature=0.0))
    return TimedBackend(backend)


def bench_dream(
    backend: TimedBackend,
    states,
    actions,
    max_new_tokens: int,
    batched: bool,
    output_mode: str | None = None,
    judge: TimedBackend | None = None,
) -> dict:
    """One dream step from each start state, batched in a vector env or one env at a time.

    ``output_mode``: the world model's (``patch`` for the shipped default); a bare backend records none.
    ``judge``: the judge of the dreams that end on this step (default: the env's, shared by every arm).
    """
    kwargs = dict(
        world_model=backend, world_model_temperature=0.0, max_new_tokens=max_new_tokens, dream_length=5,
        output_mode=output_mode,
    )  # fmt: skip
    if judge is not None:
        kwargs["judge"] = judge
        judge.reset_counters()
    backend.reset_counters()
    if batched:
        env = gym.make_vec("DreamWeb-v0", num_envs=len(states), autoreset_mode=AutoresetMode.DISABLED, **kwargs)
        env.reset(seed=0)  # the first reset covers every sub-env; then pin each one's start state
        for i, state in enumerate(states):
            mask = np.zeros(len(states), dtype=bool)
            mask[i] = True
            env.reset(seed=i, options={"reset_mask": mask, "start_state": state})
        start = time.perf_counter()
        env.step(tuple(actions))
        seconds = time.perf_counter() - start
        env.close()
    else:
        envs = [DreamWebEnv(**kwargs) for _ in states]
        for i, (env, state) in enumerate(zip(envs, states, strict=True)):
            env.reset(seed=i, options={"start_state": state})
        start = time.perf_counter()
        for env, action in tqdm(list(zip(envs, actions, strict=True)), desc="dream x8 one by one", unit="env"):
            env.step(action)
        seconds = time.perf_counter() - start
    return {
        "num_envs": len(states),
        "transitions": len(states),
        "seconds": seconds,
        "transitions_per_second": len(states) / seconds,
        "generate_calls": backend.calls,
        "generate_seconds": backend.seconds,
        "generated_tokens": backend.tokens,
        "env_overhead_seconds": seconds - backend.seconds - (judge.seconds if judge else 0.0),
        **({"judge_calls": judge.calls, "judge_seconds": judge.seconds} if judge else {}),
    }


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--world-model", default=DEFAULT_WORLD_MODEL,
        help=f"backend spec of the world model (default: DreamWeb-v0's, {DEFAULT_WORLD_MODEL}, in its output mode)",
    )  # fmt: skip
    parser.add_argument(
        "--judge", default=DEFAULT_JUDGE, help=f"backend spec of the judge (default: DreamWeb-v0's, {DEFAULT_JUDGE})"
    )
    parser.add_argument("--dream-tokens", type=int, default=384, help="max new tokens per world-model call")
    parser.add_argument("--real-steps", type=int, default=30, help="transitions per real-env measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--skip-real", action="store_true", help="measure only the dream envs")
    args = parser.parse_args(argv)

    results: dict = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "config": vars(args) | {"output": str(args.output)},
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": _cpus(),
            "cores_used": _cores_used(),
        },
    }
    if not args.skip_real:
        results["real_1"] = bench_real_single(args.real_steps, args.seed)
        results["real_4"] = bench_real_vector(4, args.real_steps + args.real_steps % 4, args.seed)

    states, actions = dream_start_states(8)
    results["dream_start_states"] = [
        {"task_id": s.task_id, "step_index": s.step_index, "action": a} for s, a in zip(states, actions, strict=True)
    ]
    mode = world_model_output_mode(args.world_model)
    results["world_model_output_mode"] = mode
    group_states, group_actions = group_start(8)
    results["group_start_state"] = {
        "task_id": group_states[0].task_id, "step_index": group_states[0].step_index, "actions": group_actions,
    }  # fmt: skip
    # Each way of stepping gets its own backend, as its own process would have it: one by one (and dream_1)
    # on a backend that has only seen single prompts, batched on one that has seen a batch.
    # So does the judge of the dreams that end on the step.
    results["judge"] = args.judge
    single, judge = fresh_backend(args.world_model, 1), fresh_backend(args.judge, 1, "judge")
    results["engines"] = {"one_by_one": _engine(single.backend)}
    for key, arm in (("dream_1", (states[:1], actions[:1])), ("dream_8_sequential", (states, actions))):
        results[key] = bench_dream(single, *arm, args.dream_tokens, False, mode, judge)
    results["group_8_sequential"] = bench_dream(single, group_states, group_actions, args.dream_tokens, False, mode)
    del single, judge
    batch, judge = fresh_backend(args.world_model, 2), fresh_backend(args.judge, 2, "judge")
    results["engines"]["batched"] = _engine(batch.backend)
    results["dream_8_batched"] = bench_dream(batch, states, actions, args.dream_tokens, True, mode, judge)
    results["group_8_batched"] = bench_dream(batch, group_states, group_actions, args.dream_tokens, True, mode)
    batched, sequential = results["dream_8_batched"], results["dream_8_sequential"]
    results["dream_batched_over_sequential_time"] = batched["seconds"] / sequential["seconds"]
    results["generate_batched_over_sequential_time"] = batched["generate_seconds"] / sequential["generate_seconds"]
    group_batched, group_sequential = results["group_8_batched"], results["group_8_sequential"]
    results["group_batched_over_sequential_time"] = group_batched["seconds"] / group_sequential["seconds"]

    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print_summary(results)
    print(f"saved {args.output}")
    return results


def print_summary(results: dict) -> None:
    print("\nenvironment            transitions/s")
    arms = ("dream_8_batched", "dream_8_sequential", "group_8_batched", "group_8_sequential")
    for key in ("real_1", "real_4", "dream_1", *arms):
        if key in results:
            print(f"  {key:<20} {results[key]['transitions_per_second']:8.3f}")
    batched, sequential = results["dream_8_batched"], results["dream_8_sequential"]
    print(
        f"dream x8 batched / one by one: {results['dream_batched_over_sequential_time']:.2f}x the time "
        f"(raw generate on the same prompts: {results['generate_batched_over_sequential_time']:.2f}x; "
        f"tokens {batched['generated_tokens']} vs {sequential['generated_tokens']})"
    )
    if "group_batched_over_sequential_time" in results:
        ratio = results["group_batched_over_sequential_time"]
        print(f"one GSPO group of 8, batched / one by one: {ratio:.2f}x the time")


def _engine(backend) -> str:
    """The engine a backend serves on now (a routed backend's current one) and, for transformers, its weights' dtype."""
    engine = getattr(backend, "engine", None) or type(backend).__name__
    model = getattr(getattr(backend, "_backend", backend), "model", None)
    dtype = next(model.parameters()).dtype if hasattr(model, "parameters") else None
    return f"{engine} ({str(dtype).removeprefix('torch.')})" if dtype is not None else engine


def _cpus() -> int:
    return os.cpu_count() or 0


def _cores_used() -> int:
    """Cores this process may run on (``taskset`` pins it to fewer than the machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else _cpus()


if __name__ == "__main__":
    main()
