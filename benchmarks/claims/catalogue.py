"""The experiment catalogue: which arms each experiment compares, and the runs (arm x seed) they make."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jobs import (
    TRAINED_WORLD_MODEL,
    CheckpointJob,
    Context,
    Job,
    eval_job,
    evaluation_of,
    models_job,
    rel,
    sft_job,
    train_job,
)

EXPERIMENTS: tuple[str, ...] = ("table1", "dream_length", "expert_frac", "world_model", "dreams_only", "learning_curve")
SWEEPS: dict[str, tuple[float, ...]] = {"dream_length": (1, 3, 5, 8), "expert_frac": (0.0, 0.25, 0.5, 1.0)}

EXPERIMENT_DOCS = {
    "table1": "Held-out success on real MiniWoB++ pages: base model, SFT start, real-browser GSPO, DynaWeb "
    "(same number of policy updates), with the real-environment steps each consumed.",
    "dream_length": "DynaWeb held-out success vs dream length (Figure 3a analog).",
    "expert_frac": "DynaWeb held-out success vs fraction of expert trajectories (Figure 3b analog).",
    "world_model": "DynaWeb with the trained world model vs the untrained base model as world model (Figure 4 analog).",
    "dreams_only": "The decisive comparison: DynaWeb on dreams only (expert fraction 0) vs real-browser GSPO, from the "
    "same SFT start with the same number of updates; held-out success on real pages and each gain over the start.",
    "learning_curve": "Held-out success on real pages against the real-environment steps behind the policy, at every "
    "checkpoint (every save_steps updates up to train_steps) of real-browser GSPO and of DynaWeb on dreams only, "
    "from the same SFT start; and the real-step ratio at which DynaWeb reaches GSPO's final success.",
}
#: The real-browser GSPO arm's flags (model-free, the WebAgent-R1 style).
GSPO_REAL_FLAGS: dict[str, Any] = {"--env": "real", "--expert-frac": 0.0}


@dataclass(frozen=True)
class Arm:
    """One method or setting of an experiment.

    Attributes:
        key: Short name (``--arms`` selects by it; run names start with it).
        method: ``base``, ``sft``, ``gspo-real`` or ``dynaweb``.
        label: For tables and plots.
        x: The swept value (sweeps only).
        train_flags: ``dynaweb-train`` flags of this arm (over the shared ones).
        world_model: ``shipped`` (the default trained one), ``untrained``, ``custom``, ``demonstrations`` (world
            model and judge trained on the demonstrations, ``--model-data demonstrations``) or ``None`` (no dreams).
        checkpoint: Evaluate the training run's checkpoint after this many updates instead of its final policy
            (``None``: the final one). The arms of one method in ``learning_curve`` share one training run.
    """

    key: str
    method: str
    label: str
    x: float | None = None
    train_flags: dict[str, Any] = field(default_factory=dict)
    world_model: str | None = None
    checkpoint: int | None = None


def dynaweb_arm(ctx: Context, key: str, label: str, x: float | None = None, **settings: Any) -> Arm:
    """A DynaWeb arm: dreams + expert replays, with ``dream_length``, ``expert_frac`` or ``untrained`` varied."""
    dream_length = settings.get("dream_length", ctx.budget.dream_length)
    untrained = settings.get("untrained", False)
    flags: dict[str, Any] = {
        "--env": "dream",
        "--expert-frac": settings.get("expert_frac", 0.5),
        "--dream-length": dream_length,
        # A dream cannot outlast the agent's step limit: raise it so only the dream length varies.
        "--agent-max-steps": max(ctx.budget.agent_max_steps, dream_length),
        "--world-model-max-new-tokens": ctx.budget.world_model_max_new_tokens,
        "--judge-max-new-tokens": ctx.budget.judge_max_new_tokens,
        "--judge": ctx.judge,
        "--start-states": rel(ctx.train_data),
        "--expert-trajectories": rel(ctx.train_data),
    }
    # Always in the command, since the cpu-small preset's own values changed; the paper's dream (no guards, any
    # page, no resamples) stays out of the run's hash (jobs.RESTATED_FLAGS), so recorded runs keep their hashes.
    guards = json.dumps(ctx.reward_guards, sort_keys=True, separators=(",", ":")) if ctx.reward_guards else "none"
    flags["--reward-guards"] = guards
    flags["--include-intermediate"] = "false" if ctx.dream_starts == "first" else "true"
    flags["--dream-resamples"] = str(ctx.dream_resamples)
    world_model = ctx.untrained_world_model if untrained else ctx.world_model
    if world_model is not None:
        flags["--world-model"] = world_model
    kind = "untrained" if untrained else ("custom" if ctx.world_model is not None else "shipped")
    if ctx.model_data == "demonstrations" and not untrained:
        flags["--world-model"] = flags["--judge"] = rel(models_job(ctx).output_dir)
        kind = "demonstrations"
    return Arm(key, "dynaweb", label, x, flags, kind)


def experiment_arms(experiment: str, ctx: Context) -> list[Arm]:
    """The arms of an experiment, in table / plot order."""
    if experiment == "table1":
        return [
            Arm("base", "base", "base model"),
            Arm("sft", "sft", "SFT start"),
            Arm("gspo-real", "gspo-real", "GSPO, real browser", train_flags=GSPO_REAL_FLAGS),
            dynaweb_arm(ctx, "dynaweb", "DynaWeb"),
        ]
    if experiment == "dream_length":
        return [dynaweb_arm(ctx, f"{x}", f"dream length {x}", x, dream_length=x) for x in SWEEPS[experiment]]
    if experiment == "expert_frac":
        return [dynaweb_arm(ctx, f"{x}", f"expert fraction {x}", x, expert_frac=x) for x in SWEEPS[experiment]]
    if experiment == "dreams_only":
        return [
            Arm("sft", "sft", "SFT start"),
            Arm("gspo-real", "gspo-real", "GSPO, real browser", train_flags=GSPO_REAL_FLAGS),
            dynaweb_arm(ctx, "dynaweb-dreams", "DynaWeb, dreams only", expert_frac=0.0),
        ]
    if experiment == "learning_curve":
        return [Arm("sft", "sft", "SFT start", x=0), *curve_arms(ctx)]
    if experiment == "world_model":
        return [
            dynaweb_arm(ctx, "trained", f"trained ({trained_models(ctx)})"),
            dynaweb_arm(ctx, "untrained", f"untrained ({ctx.untrained_world_model})", untrained=True),
        ]
    raise ValueError(f"unknown experiment {experiment!r}; known: {', '.join(EXPERIMENTS)}")


def trained_models(ctx: Context) -> str:
    """What DynaWeb's trained world model is, for labels."""
    if ctx.model_data == "demonstrations":
        return "on the demonstrations"
    return ctx.world_model or TRAINED_WORLD_MODEL


def checkpoint_steps(ctx: Context) -> list[int]:
    """The updates after which a learning curve evaluates the policy: every ``save_steps`` and the last."""
    b = ctx.budget
    return sorted({*range(b.save_steps, b.train_steps + 1, b.save_steps), b.train_steps})


def curve_arms(ctx: Context) -> list[Arm]:
    """One arm per method and checkpoint (``gspo-real@8``); the last checkpoint is the run's final policy."""
    gspo = Arm("gspo-real", "gspo-real", "GSPO, real browser", train_flags=GSPO_REAL_FLAGS)
    dreams = dynaweb_arm(ctx, "dynaweb-dreams", "DynaWeb, dreams only", expert_frac=0.0)
    last = ctx.budget.train_steps
    return [
        dataclasses.replace(
            arm, key=f"{arm.key}@{k}", label=f"{arm.label}, {k} updates", x=k, checkpoint=None if k == last else k
        )
        for arm in (gspo, dreams)
        for k in checkpoint_steps(ctx)
    ]


@dataclass
class Run:
    """One arm x seed of an experiment: its jobs in order and where its result goes."""

    experiment: str
    arm: Arm
    seed: int | None
    sft: Job | None
    train: Job | None
    eval: Job | None
    result_file: Path
    models: Job | None = None  # the world model and judge trained on the demonstrations, when the arm uses them

    @property
    def name(self) -> str:
        return self.arm.key if self.seed is None else f"{self.arm.key}-seed{self.seed}"

    @property
    def jobs(self) -> list[Job]:
        return [job for job in (self.sft, self.models, self.train, self.eval) if job is not None]

    def done(self, ctx: Context) -> bool:
        """Finished: a result of this configuration exists, evaluated unless evaluation is skipped, and its jobs'
        outputs are still on disk (a result whose run directory was moved away is rerun, not trusted)."""
        from .statistics import current_result

        result = current_result(self, ctx)
        finished = result is not None and (ctx.skip_eval or bool(result.get("evaluated")))
        needed = [job for job in self.jobs if not (ctx.skip_eval and job is self.eval)]
        return finished and all(job.done() for job in needed)


def plan(experiment: str, ctx: Context, arms: Sequence[str] | None = None) -> list[Run]:
    """The runs of an experiment (``arms``: keep only these arm keys), seed by seed.

    Seed-major order makes the first seed's full comparison available first, while the rest runs.
    """
    selected = [arm for arm in experiment_arms(experiment, ctx) if not arms or arm.key in arms]
    # Greedy evaluation of the untrained base model on fixed pages does not depend on a seed: once.
    pairs = [(arm, None) for arm in selected if arm.method == "base"]
    if ctx.sft_seed is not None:  # one shared SFT start: it is one run, whatever the RL seeds
        pairs += [(arm, ctx.sft_seed) for arm in selected if arm.method == "sft"]
        selected = [arm for arm in selected if arm.method != "sft"]
    pairs += [(arm, seed) for seed in ctx.seeds for arm in selected if arm.method != "base"]
    return [make_run(experiment, arm, seed, ctx) for arm, seed in pairs]


def make_run(experiment: str, arm: Arm, seed: int | None, ctx: Context) -> Run:
    """One run's jobs: the SFT start (not for the base model), the models it dreams with where they are trained
    on the demonstrations, training (RL arms), evaluation."""
    start = None if seed is None else sft_job(ctx, seed if ctx.sft_seed is None else ctx.sft_seed)
    train = train_job(ctx, arm, seed, start) if arm.method in ("gspo-real", "dynaweb") else None
    if train is not None and arm.checkpoint is not None:  # a learning-curve point: needs its checkpoint only
        train = CheckpointJob(**vars(train), checkpoint=arm.checkpoint, stop=ctx.train_to_checkpoint)
    policy_job = train or start
    evaluation = None
    if not ctx.skip_eval and isinstance(train, CheckpointJob):
        checkpoint = train.checkpoint_dir
        evaluation = eval_job(ctx, f"{train.output_dir.name}-{checkpoint.name}", rel(checkpoint))
    elif not ctx.skip_eval:
        base = f"base-{ctx.policy.strip('/').replace('/', '_')}"
        evaluation = evaluation_of(ctx, policy_job) if policy_job else eval_job(ctx, base, ctx.policy)
    run_name = arm.key if seed is None else f"{arm.key}-seed{seed}"
    models = models_job(ctx) if arm.world_model == "demonstrations" else None
    result_file = ctx.runs_dir / experiment / run_name / "result.json"
    return Run(experiment, arm, seed, start, train, evaluation, result_file, models)
