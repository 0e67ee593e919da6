"""Recording episodes on real pages as trajectory records; rebuilds the shipped start-state dataset.

Rebuild ``dynaweb_env/data/builtin/miniwob_small.jsonl`` (expert demonstrations on real MiniWoB++
pages, a few minutes on two CPU cores)::

    python -m dynaweb_env.data.record --out dynaweb_env/data/builtin/miniwob_small.jsonl \\
        --tasks miniwob.click-button miniwob.click-checkboxes miniwob.click-dialog miniwob.click-option \\
            miniwob.click-tab miniwob.enter-password miniwob.enter-text miniwob.focus-text miniwob.login-user \\
        --seeds 0 1 2 3 4 --test-seeds 4

:func:`record_episode` is the one place that turns an env rollout into a
:class:`~dynaweb_env.data.schema.Trajectory`; ``dynaweb-collect`` uses it too.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from ..actions import extract_action, extract_reasoning
from ..experts.base import ExpertPolicy, PolicyLike
from .io import write_trajectories
from .schema import SOURCES, Step, Trajectory


def record_episode(
    env: gym.Env,
    policy: PolicyLike,
    task_id: str,
    task_seed: int,
    *,
    source: str = "expert",
    max_steps: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode of ``policy`` in ``env`` and return it as a trajectory record.

    ``steps[i]`` holds the observation before action ``i``, the action and its reasoning; the last
    step holds the final page with an empty action, unless the episode ended with ``stop [...]``, whose
    step is then the last. ``success`` is ``reward >= 1`` for the final reward.

    Args:
        env: A DynaWeb env (``RealWeb-v0``; any env with the shared observation space works).
        policy: An :class:`~dynaweb_env.experts.base.ExpertPolicy`, or a callable from an observation to
            ``(reasoning, action)`` or to a whole response text (``REASON: ... ACTION: ...``).
        task_id: Passed to ``env.reset(options={"task": ...})``.
        task_seed: Passed as ``options["task_seed"]``: the same seed gives the same page.
        source: The record's ``source`` (``expert`` for demonstrations, ``real`` for other policies).
        max_steps: Stop after this many actions even if the env has not ended the episode
            (default: only the env's own limit).
        metadata: Stored in the record; ``seed`` is added.

    Returns:
        The :class:`~dynaweb_env.data.schema.Trajectory`.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    observation, info = env.reset(options={"task": task_id, "task_seed": int(task_seed)})
    steps: list[Step] = []
    reward, done, stopped = 0.0, False, False
    while not done:
        if max_steps is not None and len(steps) >= max_steps:
            break
        reasoning, action = _ask(policy, observation)
        steps.append(_step(observation, action, reasoning))
        stopped = action.strip().startswith("stop")
        observation, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    if not stopped:
        steps.append(_step(observation, "", ""))
    return Trajectory(
        id=f"{task_id}/seed-{task_seed}/{source}",
        task_id=task_id,
        goal=observation["goal"],
        source=source,
        steps=steps,
        success=float(reward) >= 1.0,
        reward=float(reward),
        metadata={**(metadata or {}), "seed": int(task_seed)},
    )


def _ask(policy: PolicyLike, observation: dict[str, str]) -> tuple[str, str]:
    answer = policy.act(observation) if isinstance(policy, ExpertPolicy) else policy(observation)
    if isinstance(answer, str):
        return extract_reasoning(answer), extract_action(answer)
    reasoning, action = answer
    return str(reasoning), str(action)


def _step(observation: dict[str, str], action: str, reasoning: str) -> Step:
    return Step(
        url=observation["url"],
        axtree=observation["axtree"],
        action=action,
        reasoning=reasoning,
        last_action_error=observation.get("last_action_error", ""),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Record expert episodes on real pages into a JSONL file (see the module docstring)."""
    import dynaweb_env  # noqa: F401  (registers RealWeb-v0)

    from ..experts import EXPERTS, get_expert

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSONL file to write (overwritten)")
    parser.add_argument("--tasks", nargs="+", default=sorted(EXPERTS), help="task ids with an expert")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="task seeds per task")
    parser.add_argument(
        "--test-seeds", nargs="*", type=int, default=[], help="seeds whose records get metadata split=test"
    )
    parser.add_argument("--max-steps", type=int, default=10, help="env step limit")
    parser.add_argument("--allow-failures", action="store_true", help="keep failed episodes instead of aborting")
    args = parser.parse_args(argv)

    for task_id in args.tasks:
        get_expert(task_id)  # fail early on a task without an expert
    env = gym.make("RealWeb-v0", task=args.tasks[0], max_steps=args.max_steps)
    trajectories = []
    started = time.time()
    total = len(args.tasks) * len(args.seeds)
    try:
        for task_id in args.tasks:
            for seed in args.seeds:
                split = "test" if seed in args.test_seeds else "train"
                trajectory = record_episode(env, get_expert(task_id), task_id, seed, metadata={"split": split})
                trajectories.append(trajectory)
                elapsed = time.time() - started
                eta = elapsed / len(trajectories) * (total - len(trajectories))
                print(
                    f"[{len(trajectories)}/{total}] {task_id} seed {seed}: reward {trajectory.reward:g}, "
                    f"{len(trajectory.actions)} actions ({elapsed:.0f} s, ETA {eta:.0f} s)",
                    file=sys.stderr,
                )
                if not trajectory.success and not args.allow_failures:
                    print(f"expert failed on {task_id} seed {seed}; use --allow-failures to keep it", file=sys.stderr)
                    return 1
    finally:
        env.close()
    count = write_trajectories(args.out, trajectories)
    print(f"wrote {count} trajectories to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
