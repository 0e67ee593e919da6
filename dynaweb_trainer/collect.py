"""Record real-browser trajectories of any policy as JSONL: ``dynaweb-collect``.

The policy is any ``--policy`` ``dynaweb-eval`` accepts (``expert``, an embedded model, an SFT/RL
directory, a LoRA adapter, a server spec), or ``explore``: the scripted expert, replaced with
probability ``--epsilon`` at each step by a random valid action on the page (a click or hover on an
element of the tree, text typed into a textbox, a scroll or a key press), so the data holds the
failures and odd transitions a world model must also learn; or ``near-miss``: the expert, whose click
or ``type`` goes with probability ``--epsilon`` to another element of the same role (the wrong
checkbox, tab or field), the mistakes a judge must tell from success (:mod:`.exploration`). Every
``task x seed`` episode runs on ``RealWeb-v0`` with ``--num-envs`` browsers through
:func:`~dynaweb_trainer.rollout.run_episodes`.

Command line::

    dynaweb-collect --policy expert --tasks miniwob.click-menu miniwob.login-user-popup --seeds 0-99 \\
        --output data/expert.jsonl
    dynaweb-collect --policy explore --epsilon 0.3 --seeds 0-99 --output data/explore.jsonl
    dynaweb-collect --policy near-miss --epsilon 0.5 --seeds 200-259 --output data/near-miss.jsonl
    dynaweb-collect --policy runs/sft --temperature 0.7 --seed 1 --output data/sft.jsonl

Output: one :class:`~dynaweb_env.data.schema.Trajectory` per line, ``source`` ``"expert"`` for the
expert and ``"real"`` otherwise, ``metadata`` with ``seed`` (the task seed), ``policy`` (see
:func:`policy_label`), ``split`` (:func:`~dynaweb_env.data.shipped.split_of`: task seeds ``4 mod 5``
are ``test``, the rest ``train``, as in the shipped ``miniwob_small.jsonl``), ``end_reason`` and the
reset ``options``.

Resuming: a run appends to ``--output`` and first skips every ``(task, seed, policy)`` already
there, so re-running the same command finishes an interrupted collection. Episodes are written as
soon as their batch (``--batch-size``, default ``--num-envs`` episodes run side by side) ends: an
interruption loses at most that batch. A corrupt line (a write cut short) is skipped with a warning,
and a cut-short last line is removed before appending; a file that is not JSONL is refused, untouched.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaweb_env.agent import format_policy_response
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import split_of
from dynaweb_env.llm.base import SamplingParams

from .encoding import EpisodeEncoder
from .evaluate import EvalConfig, make_real_vector_env
from .exploration import EXPLORING_POLICIES, NEAR_MISS_POLICY
from .policy import (
    EXPERT_POLICY,
    LoadedPolicy,
    PolicyLoadError,
    PolicyTurn,
    ScriptedPolicy,
    load_policy,
)


def expert_tasks() -> list[str]:
    """The MiniWoB++ tasks with a registered scripted expert, sorted."""
    from dynaweb_env.experts import EXPERTS

    return sorted(task for task in EXPERTS if task.startswith("miniwob."))


@dataclass
class CollectConfig(EvalConfig):
    """Configuration of ``dynaweb-collect``: :class:`~dynaweb_trainer.evaluate.EvalConfig` plus these fields.

    Parameters:
        policy (`str`, *optional*, defaults to `"expert"`):
            ``expert``, ``explore``, ``near-miss``, or any policy reference ``dynaweb-eval`` accepts.
        tasks (`list[str]`, *optional*):
            Task ids (default: every MiniWoB++ task with a scripted expert).
        seeds (`str`, *optional*, defaults to `"0-19"`):
            Task seeds; ``dynaweb-eval`` defaults to ``100-109``, so default data and evaluation do not overlap.
        output (`str`, *optional*, defaults to `"trajectories.jsonl"`):
            JSONL file the trajectories are appended to (episodes already in it are skipped).
        epsilon (`float`, *optional*, defaults to `0.3`):
            ``explore``: probability of a random action instead of the expert's at each step;
            ``near-miss``: probability of aiming the expert's click or ``type`` at another element.
        batch_size (`int`, *optional*):
            Episodes run side by side and then written (default: ``num_envs``); larger batches
            leave fewer browsers idle at batch ends, an interruption loses at most one batch.
        seed (`int`, *optional*, defaults to `0`):
            Seeds the exploration's random actions and the sampling of model policies.
    """

    policy: str = field(
        default=EXPERT_POLICY, metadata={"help": "expert, explore, near-miss, model name, checkpoint dir, spec."}
    )
    tasks: list[str] = field(default_factory=expert_tasks, metadata={"help": "BrowserGym task ids to collect on."})
    seeds: str = field(default="0-19", metadata={"help": "Task seeds, e.g. 0-99 or 1,5,9."})
    seed: int = field(default=0, metadata={"help": "Seeds exploration and model sampling."})
    output: str = field(default="trajectories.jsonl", metadata={"help": "JSONL file to append trajectories to."})
    epsilon: float = field(default=0.3, metadata={"help": "explore / near-miss: probability of a mistake per step."})
    batch_size: int | None = field(default=None, metadata={"help": "Episodes per written batch (default num_envs)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.plan:
            raise ValueError(
                f"dynaweb-collect records the policy's own actions and does not plan (got --plan {self.plan}); "
                "to measure planning use dynaweb eval --plan"
            )


def policy_label(config: CollectConfig) -> str:
    """The policy's name in ``metadata["policy"]`` and in resume keys.

    ``expert``; ``explore-e<epsilon>-s<seed>``; ``near-miss-e<epsilon>-s<seed>``; a model reference as given, plus
    ``@t<temperature>-s<seed>`` when it samples (greedy decoding does not depend on the seed).
    """
    if config.policy in EXPLORING_POLICIES:
        return f"{config.policy}-e{config.epsilon:g}-s{config.seed}"
    if config.policy == EXPERT_POLICY or config.temperature == 0:
        return config.policy
    return f"{config.policy}@t{config.temperature:g}-s{config.seed}"


def read_done(path: str | os.PathLike[str]) -> set[tuple[str, int, str]]:
    """``(task_id, task seed, policy label)`` of every trajectory already in ``path`` (none if it does not exist).

    A last line cut short by an interrupted write (no final newline, not valid JSON) is removed; any
    other corrupt line is skipped with a warning.

    Raises:
        ValueError: If ``path`` is not a JSONL file (no line is a JSON object); it is left untouched.
    """
    from dynaweb_env.data.io import iter_trajectories
    from dynaweb_env.data.jsonl import prepare_for_append

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return set()
    prepare_for_append(path)
    done = set()
    for trajectory in iter_trajectories(path, on_error="skip"):
        seed, policy = trajectory.metadata.get("seed"), trajectory.metadata.get("policy")
        if isinstance(seed, int) and isinstance(policy, str):
            done.add((trajectory.task_id, seed, policy))
    return done


def _load(config: CollectConfig) -> LoadedPolicy:
    exploring_policy_cls = EXPLORING_POLICIES.get(config.policy)
    if exploring_policy_cls is not None:
        expert = load_policy(EXPERT_POLICY, config.tokenizer)
        details = {"epsilon": config.epsilon, "seed": config.seed, **expert.details}
        policy = exploring_policy_cls(expert.tokenizer, config.epsilon, config.seed)
        return LoadedPolicy(config.policy, config.policy, expert.tokenizer, policy, details)
    return load_policy(config.policy, config.tokenizer, config.device, config.max_batch_size)


def record_episode(
    env: Any,
    policy: Any,
    task_id: str,
    task_seed: int,
    *,
    source: str = "expert",
    max_steps: int | None = None,
    metadata: dict[str, Any] | None = None,
    tokenizer: Any = None,
) -> Trajectory:
    """Run one episode of a scripted ``policy`` in one ``env`` and return it as a trajectory record.

    The episode goes through :func:`~dynaweb_trainer.rollout.run_episodes` (on a one-env vector),
    the same loop ``dynaweb-collect`` uses. ``steps[i]`` holds the observation before action ``i``,
    the action and its reasoning; the last step holds the final page with an empty action, unless
    the episode ended with ``stop [...]``, whose step is then the last.

    Args:
        env: A DynaWeb env (``RealWeb-v0``; any env with the shared observation space works). Not closed.
        policy: An :class:`~dynaweb_env.experts.base.ExpertPolicy`, or a callable from an observation to
            ``(reasoning, action)`` or to a whole response text (``REASON: ... ACTION: ...``).
        task_id: Passed to ``env.reset(options={"task": ...})``.
        task_seed: Passed as ``options["task_seed"]``: the same seed gives the same page.
        source: The record's ``source`` (``expert`` for demonstrations, ``real`` for other policies).
        max_steps: Stop after this many actions even if the env has not ended the episode
            (default: only the env's own limit).
        metadata: Stored in the record; ``seed`` is added.
        tokenizer: Tokenizer of the episode encoding (default: the embedded default model's).
    """
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from dynaweb_env.data.schema import SOURCES

    from .rollout import run_episodes

    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if tokenizer is None:
        tokenizer = load_policy(EXPERT_POLICY).tokenizer

    def respond(turn: PolicyTurn) -> str:
        answer = policy.act(turn.observation) if hasattr(policy, "act") else policy(turn.observation)
        return answer if isinstance(answer, str) else format_policy_response(str(answer[0]), str(answer[1]))

    vector_env = SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.DISABLED)
    options = {"task": task_id, "task_seed": int(task_seed)}
    (result,) = run_episodes(
        vector_env, ScriptedPolicy(tokenizer, respond), EpisodeEncoder(tokenizer), [options], SamplingParams(),
        max_steps=max_steps or sys.maxsize, send_response=False,
    )  # fmt: skip
    result.source = source
    trajectory = result.to_trajectory(
        f"{task_id}/seed-{task_seed}/{source}", {**(metadata or {}), "seed": int(task_seed)}
    )
    if trajectory.actions and trajectory.actions[-1].strip().startswith("stop") and not trajectory.steps[-1].action:
        trajectory.steps.pop()  # the page after ``stop`` is not a step of the demonstration
    return trajectory


def collect(
    config: CollectConfig,
    policy: LoadedPolicy | None = None,
    vector_env: Any = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Run every ``task x seed`` episode not yet in ``config.output`` and append it there.

    Args:
        config: What to collect and how.
        policy: An already-loaded policy (default: loaded from ``config.policy``).
        vector_env: A vector env to use instead of building ``RealWeb-v0`` (it is not closed here).
        show_progress: Show a tqdm bar over episodes.

    Returns:
        Counts: ``requested``, ``skipped`` (already in the file), ``collected``, ``successes``,
        ``wall_seconds``, ``output`` and the policy ``label``.
    """
    from tqdm.auto import tqdm

    from dynaweb_env.agent import policy_system_prompt
    from dynaweb_env.data.io import write_trajectories
    from dynaweb_env.experts import EXPERTS

    from .rollout import run_episodes

    missing = [task for task in config.tasks if task not in EXPERTS]
    # The expert and its near misses need an expert on every task; exploration plays randomly without one.
    needs_expert = config.policy in (EXPERT_POLICY, NEAR_MISS_POLICY)
    if needs_expert and (policy is None or policy.kind == config.policy) and missing:
        raise ValueError(f"no scripted expert for {', '.join(missing)}; experts exist for: {', '.join(expert_tasks())}")
    started = time.perf_counter()
    output = Path(config.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    label = policy_label(config)
    requested = config.start_options()
    done = read_done(output)
    todo = [options for options in requested if (options["task"], options["task_seed"], label) not in done]
    counts: dict[str, Any] = {"requested": len(requested), "skipped": len(requested) - len(todo), "collected": 0}
    counts.update(successes=0, output=str(output), label=label)
    if todo:
        policy = policy or _load(config)
        encoder = EpisodeEncoder(
            policy.tokenizer,
            policy_system_prompt(config.response_style),  # type: ignore[arg-type]
            config.max_axtree_chars,
            config.page_history,
        )
        owns_env = vector_env is None
        if owns_env:
            vector_env = make_real_vector_env(config, min(config.num_envs, len(todo)))
        try:
            sampling = SamplingParams(
                max_new_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p
            )
            batch_size = config.batch_size or int(vector_env.num_envs)
            source = "expert" if policy.kind == EXPERT_POLICY else "real"
            with tqdm(total=len(requested), initial=counts["skipped"], desc=f"collect {label}", unit="episode",
                      disable=not show_progress) as bar:  # fmt: skip
                for start in range(0, len(todo), batch_size):
                    batch = todo[start : start + batch_size]
                    results = run_episodes(
                        vector_env, policy.policy, encoder, batch, sampling, max_steps=config.max_steps,
                        seed=config.seed + start, progress=bar,
                    )  # fmt: skip
                    trajectories = []
                    for result in results:
                        task, seed = result.options["task"], int(result.options["task_seed"])
                        result.source = source
                        metadata = {"seed": seed, "policy": label, "split": split_of(seed)}
                        trajectories.append(result.to_trajectory(f"{task}/seed-{seed}/{label}", metadata))
                    write_trajectories(output, trajectories, append=True)
                    counts["collected"] += len(trajectories)
                    counts["successes"] += sum(trajectory.success for trajectory in trajectories)
                    bar.set_postfix(success=f"{counts['successes'] / counts['collected']:.2f}")
        finally:
            if owns_env:
                vector_env.close()
    counts["wall_seconds"] = round(time.perf_counter() - started, 2)
    return counts


def parse_config(argv: Sequence[str] | None = None) -> CollectConfig:
    """Parse command-line arguments (``--config x.yaml`` gives defaults that flags override)."""
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags

    parser = word_negated_flags(TrlParser(CollectConfig, prog="dynaweb-collect"))
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-collect``.

    Returns:
        ``0`` on success; ``2`` (with the reason on stderr) when the policy or configuration is unusable.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(argv)
        counts = collect(config)
    except (PolicyLoadError, ValueError) as error:
        print(f"dynaweb-collect: error: {error}", file=sys.stderr)
        return 2
    rate = f", success rate {counts['successes'] / counts['collected']:.3f}" if counts["collected"] else ""
    print(
        f"{shlex.join(['dynaweb-collect', *argv])}: {counts['collected']} new trajectories ({counts['skipped']} "
        f"already there){rate} in {counts['wall_seconds']:.0f} s; appended to {counts['output']}"
    )
    return 0


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()


__all__ = [
    "CollectConfig",
    "collect",
    "expert_tasks",
    "main",
    "policy_label",
    "record_episode",
    "read_done",
]
