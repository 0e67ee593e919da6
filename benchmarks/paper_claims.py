"""The paper's claims at small scale on real MiniWoB++ pages (issue 5): Table 1, Figures 3a, 3b and 4.

One driver, four named experiments. Every number is held-out success on *real* MiniWoB++ pages in
Chromium (``dynaweb-eval``, greedy decoding) over the shipped training tasks (the 9 tasks of
``dynaweb_env/data/builtin/miniwob_small.jsonl``) at task seeds of the test split (``seed % 5 == 4``,
:func:`dynaweb_env.data.shipped.split_of`) from 104 on, so no method ever trained on them: SFT and
DynaWeb use only train-split demonstrations, real-browser GSPO samples task seeds 0-15. The
demonstrations (the SFT data, DynaWeb's start states and expert pool) are the first N train-split
seeds per task (``--demonstrations N``, default 40), collected first by the scripted expert
(``dynaweb-collect --policy expert``, recorded with the results; 40 per task: 360 episodes, 681
actions, 582 s), or the 4 per task shipped in ``miniwob_small.jsonl`` (``--demonstrations shipped``).
With the shipped 36 the SFT start solved 3 of 90 held-out episodes, which left both RL methods
nothing to learn from (``paper_claims_table1_36demos.json``); with 360 it solves 60 of 90.

``table1``
    Table 1 analog. The base model prompted (evaluation only, seed-independent: greedy decoding on
    fixed pages, so it runs once), the SFT start (``dynaweb-sft`` on the train split), model-free
    online GSPO in the real browser from the SFT start (``dynaweb-train --env real --expert-frac 0``,
    the WebAgent-R1 style) and DynaWeb from the SFT start (``dynaweb-train --env dream --expert-frac
    0.5``), both with the same number of policy updates. Each run also reports the real-environment
    steps it consumed: demonstration steps behind the SFT start, real-browser policy steps during
    training, replays of expert steps (from the same demonstrations, so not new interactions), and
    the real transitions behind the world model beyond the demonstrations (the shipped world model's
    default data adds the train split of ``miniwob_explore.jsonl``).
``dream_length``
    Figure 3a analog: DynaWeb with dream length 1, 3, 5, 8 (the agent's step limit in training is
    raised to the dream length where it is shorter, so only the dream length varies).
``expert_frac``
    Figure 3b analog: DynaWeb with expert fraction 0, 0.25, 0.5, 1.0.
``world_model``
    Figure 4 analog: DynaWeb with the shipped trained world model (``smollm2-135m-wm``, the default)
    vs. the untrained base ``smollm2-135m`` prompted as world model.

The judge of dreams is fixed (``--judge``, default the shipped trained judge ``smollm2-135m-judge``) in
every DynaWeb run, unlike ``dynaweb-train``'s default (the world model's backend): otherwise the
``world_model`` experiment would swap the judge together with the world model. The trained judge because
the prompted 135M model never says SUCCESS (``benchmarks/results/judge_accuracy.json``), which would give
every dream reward 0 and GSPO no signal from dreams at all.

The SFT start is trained once per seed and shared by that seed's arms; with ``--sft-seed S`` every RL
seed starts from the one SFT start of seed S, as the paper starts every method from one SFT
checkpoint. That saves ~37 min per extra seed, and the spread over ``--seeds`` is then the RL's alone
(the SFT row is one run). A training run whose configuration is identical in several
experiments (e.g. DynaWeb at dream length 3 and expert fraction 0.5) is trained and evaluated once:
the tools write into ``<runs-dir>/shared/<name>-<hash of the command>/`` and each experiment's run
writes its ``result.json`` into ``<runs-dir>/<experiment>/<run-name>/``.

Commands (from the repository root; each can be interrupted and rerun: finished runs are skipped, an
interrupted ``dynaweb-train`` resumes from its last checkpoint via ``--resume``, ``dynaweb-sft`` via
``--resume_from_checkpoint last``)::

    python benchmarks/paper_claims.py table1 --seeds 0 1 2
    python benchmarks/paper_claims.py table1 --seeds 0 1 2 --sft-seed 0   # one SFT start, 3 RL seeds
    python benchmarks/paper_claims.py dream_length --seeds 0 1 2
    python benchmarks/paper_claims.py expert_frac --seeds 0 1 2
    python benchmarks/paper_claims.py world_model --seeds 0 1 2
    nohup python benchmarks/paper_claims.py table1 dream_length expert_frac world_model > runs/claims.log 2>&1 &
    python benchmarks/paper_claims.py table1 --dry-run          # the exact commands, nothing run
    python benchmarks/paper_claims.py table1 --aggregate-only   # JSON + PNG from the runs finished so far

Each experiment writes ``benchmarks/results/paper_claims_<experiment>.json`` (the driver command, the
exact tool commands, seeds, budget, per-run success and real-environment steps, each RL run paired
page by page with its SFT start (pages gained and lost, successes by task), mean / std / min / max
over seeds; for ``table1`` also the issue's two criteria, for the others the SFT start's success)
and a PNG beside it (bars with the seed spread for ``table1`` and ``world_model``, lines for the
sweeps; the SFT start dashed).

Time on this machine (2 CPU cores, no GPU, otherwise idle) with SmolLM2-135M and ``--budget small``.
These are *estimates*, extrapolated from measured speeds, not measured runs: a batched world-model
step of 8 dreams with 384 tokens takes ~108 s and one dream ~28 s
(``benchmarks/results/env_throughput.json``, so ~35 s for a batch of 2), a policy turn of a batch
~10-15 s (``rollout_throughput.json``), a real-browser reset ~2.5 s and a click ~0.9 s (DESIGN.md),
a GSPO update on 4 multi-turn episodes ~1 min (prefill-bound forward + backward of ~10k tokens).

=================================  ===========================================================
Expert demonstrations (40 / task)  10 min once (measured: 582 s), shared by every seed
SFT start (30 steps of 8)          ~37 min per seed (measured: 2188 s, ~73 s a step)
DynaWeb, dream length 3            ~3.5 min per update (2 dreams: 3 x (policy 10 s + world model
                                   35 s) + judge 15 s, then the update) -> ~30 min for 8 updates
DynaWeb, dream length 1 / 5 / 8    ~15 / ~45 / ~65 min (at 8, the 4096-token episode cap
                                   ``max_completion_length`` may end the longest dreams early)
DynaWeb, expert fraction 0 / 1.0   ~40 min (4 dreams per update) / ~10 min (no dreams at all)
GSPO in the real browser           ~2-2.5 min per update (4 browsers, up to 5 turns) -> ~20 min
Evaluation (9 tasks x 10 seeds)    ~15-25 min (4 browsers, up to 5 turns of 64 tokens)
``table1``, 3 seeds                ~8 h
``dream_length``, 3 seeds          ~9 h after ``table1`` (dream length 3 and the SFT starts shared)
``expert_frac``, 3 seeds           ~7 h after ``table1`` (0.5 shared)
``world_model``, 3 seeds           ~2.5 h after ``table1`` (the trained arm shared)
=================================  ===========================================================

Measured in ``table1`` seed 0 with the defaults (2188 s for the SFT start, as above): real-browser
GSPO's 8 updates 515 s, DynaWeb's 8 updates 896 s, an evaluation 571-616 s alone (1044 s for the SFT
start's, which shared the CPU for a while). A policy that solves most pages ends episodes early, so
these are shorter than the estimates; with the 36-demonstration start (3% success, every episode to
its step limit, the machine shared) an evaluation took 53 min and DynaWeb's updates 25 min.
Seeds 1 and 2 with ``--sft-seed 0`` (no SFT to train): real-browser GSPO 491 s and 893 s, DynaWeb
817 s and 1176 s (the second of each shared the CPU with test runs), evaluations 679-771 s; both seeds in
~1 h 40 min. The world model experiment's untrained arm trained in 1188 s (dreams always run to
their full length, as the untrained model never predicts an end). Dream length 1 / 5 / 8 trained in
646 / 1150 / 1003 s (the trained world model ends most dreams before the cap: 1.9 policy steps a
dream at 8), expert fraction 0 / 1.0 in 1010 / 366 s; each evaluation 10-15 min.

``--budget paper-ish`` (G = 8, 32 updates, 10-step episodes, dream length 5, 30 evaluation seeds)
is meant for a larger machine: on this CPU it would take days per experiment.

Smoke runs use tiny models and a tiny budget (all of it in ``tests/test_paper_claims.py``)::

    python benchmarks/paper_claims.py dream_length --arms 1 --seeds 0 --skip-eval --demonstrations shipped \\
        --policy tiny-random --world-model tiny-random --judge tiny-random --runs-dir /tmp/claims \\
        --results-dir /tmp/claims \\
        --set sft_steps=1 train_steps=1 num_generations=2 per_device_train_batch_size=2 \\
        gradient_accumulation_steps=1 ...
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import itertools
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from dynaweb_env.models import TRAINED_JUDGE
from dynaweb_trainer.evaluate import DEFAULT_TASKS

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS: tuple[str, ...] = ("table1", "dream_length", "expert_frac", "world_model")
SWEEPS: dict[str, tuple[float, ...]] = {"dream_length": (1, 3, 5, 8), "expert_frac": (0.0, 0.25, 0.5, 1.0)}
#: Console script -> module run with ``python -m`` (the same interpreter as this driver).
TOOLS: dict[str, str] = {
    "dynaweb-sft": "dynaweb_trainer.sft",
    "dynaweb-train": "dynaweb_trainer.cli",
    "dynaweb-eval": "dynaweb_trainer.evaluate",
    "dynaweb-collect": "dynaweb_trainer.collect",
}
#: Flags that change where or how a tool writes, not what it computes: left out of the run's hash.
NON_SEMANTIC_FLAGS = frozenset({"--num-envs", "--save-steps", "--save_steps", "--resume"})
DEMONSTRATIONS = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_small.jsonl"))
EXPLORATION = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_explore.jsonl"))
TRAINED_WORLD_MODEL = "smollm2-135m-wm"


def held_out_seeds(first: int, count: int) -> str:
    """``count`` task seeds of the test split (``seed % 5 == 4``) from ``first`` on, as a ``dynaweb-eval`` spec."""
    start = first + (4 - first % 5) % 5
    return ",".join(str(start + 5 * i) for i in range(count))


@dataclass(frozen=True)
class Budget:
    """How much compute each run gets; ``--set NAME=VALUE`` overrides any field.

    Attributes:
        sft_steps: Optimizer steps of ``dynaweb-sft`` (30 x 8 examples: two thirds of a pass over 360).
        sft_learning_rate: Its learning rate (``None``: ``dynaweb-sft``'s 2e-4, which after 15 steps left
            the loss at 1.13; 1e-3 took it to 0.04 in 30).
        sft_batch_size, sft_gradient_accumulation_steps: ``dynaweb-sft`` makes one step of their product in
            examples (8), passing ``sft_batch_size`` through the model at once: 8 whole episodes at once
            were killed for memory on this 24 GB machine (24.4 GB resident); 2 at once peak near 16 GB.
        train_steps: Policy updates of every RL run (the same for every method).
        train_learning_rate: Their learning rate (``None``: the ``cpu-small`` preset's 1e-5, with which 8
            LoRA updates left DynaWeb's greedy evaluation task for task where the SFT start's was).
        num_generations: Group size G; ``per_device_train_batch_size x gradient_accumulation_steps``
            rollouts make one update (one task query when it equals G), all rolled out in one batch;
            the update passes ``per_device_train_batch_size`` episodes through the model at once (1: the
            memory of a whole multi-turn episode, see ``sft_batch_size``).
        agent_max_steps: The agent's step limit in training and evaluation.
        dream_length: DynaWeb's dream length where the experiment does not vary it.
        max_turn_tokens, max_axtree_chars, max_completion_length: Policy turn budget, tree cut (also
            in SFT and evaluation, so the policy always sees what it trained on) and episode cap.
        world_model_max_new_tokens, judge_max_new_tokens: Token budgets of one prediction / verdict.
        save_steps: Checkpoint interval (what an interrupted run loses at most).
        eval_seeds: Held-out task seeds of ``dynaweb-eval`` (every task with every seed).
        eval_envs: Browsers in parallel during evaluation.
    """

    sft_steps: int = 30
    sft_learning_rate: float | None = 1e-3
    sft_batch_size: int = 2
    sft_gradient_accumulation_steps: int = 4
    train_steps: int = 8
    train_learning_rate: float | None = 1e-4
    num_generations: int = 4
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 4
    agent_max_steps: int = 5
    dream_length: int = 3
    max_turn_tokens: int = 64
    max_axtree_chars: int = 1500
    max_completion_length: int = 4096
    world_model_max_new_tokens: int = 384
    judge_max_new_tokens: int = 128
    save_steps: int = 2
    eval_seeds: str = held_out_seeds(100, 10)
    eval_envs: int = 4


BUDGETS: dict[str, Budget] = {
    "small": Budget(),
    "paper-ish": Budget(
        sft_steps=45,
        train_steps=32,
        num_generations=8,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        agent_max_steps=10,
        dream_length=5,
        max_turn_tokens=128,
        max_axtree_chars=4000,
        max_completion_length=8192,
        world_model_max_new_tokens=768,
        judge_max_new_tokens=256,
        save_steps=4,
        eval_seeds=held_out_seeds(100, 30),
    ),
}


def apply_overrides(budget: Budget, assignments: Sequence[str]) -> Budget:
    """``budget`` with ``NAME=VALUE`` assignments applied (``ValueError`` for unknown names or bad values)."""
    types = {item.name: item.type for item in dataclasses.fields(Budget)}
    values: dict[str, Any] = {}
    for assignment in assignments:
        name, equals, text = assignment.partition("=")
        if not equals or name not in types:
            raise ValueError(f"--set {assignment!r}: use NAME=VALUE with NAME one of {', '.join(types)}")
        parse = {"int": int, "float | None": float}.get(types[name], str)  # annotations are strings here
        values[name] = parse(text)
    return dataclasses.replace(budget, **values)


@dataclass
class Context:
    """What every run of an invocation shares (models, budget, seeds, where files go)."""

    budget: Budget
    seeds: list[int]
    policy: str = "smollm2-135m"
    world_model: str | None = None
    untrained_world_model: str = "smollm2-135m"
    judge: str = "smollm2-135m"
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    runs_dir: Path = ROOT / "runs" / "claims"
    skip_eval: bool = False
    demonstrations: int | None = 40
    #: Every RL seed starts from the SFT start of this seed (``None``: each seed trains its own).
    sft_seed: int | None = None

    @property
    def train_data(self) -> Path:
        """The demonstrations of the train split: the SFT data, DynaWeb's start states and expert pool."""
        if self.demonstrations is None:
            return self.runs_dir / "data" / "miniwob_small.train.jsonl"
        return collect_job(self).result_file


def rel(path: Path) -> str:
    """``path`` relative to the repository root when inside it (commands stay readable and portable)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# -- jobs: one tool invocation each ------------------------------------------------------------
@dataclass
class Job:
    """One ``dynaweb-sft`` / ``dynaweb-train`` / ``dynaweb-eval`` invocation and the file that marks it done.

    Attributes:
        tool: The console script.
        args: Its arguments, output location included (the recorded command).
        output_dir: Where it writes (shared by every run that needs the same invocation).
        result_file: Written last by the tool; its existence means the job is done.
        resume_args: Appended when ``output_dir`` already holds a checkpoint.
    """

    tool: str
    args: list[str]
    output_dir: Path
    result_file: Path
    resume_args: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join([self.tool, *self.args])

    def done(self) -> bool:
        return self.result_file.is_file()

    def has_checkpoint(self) -> bool:
        return any(self.output_dir.glob("checkpoint-*"))

    def argv(self) -> list[str]:
        """What actually runs: the tool's module under this interpreter, resuming when it can."""
        resume = self.resume_args if self.resume_args and self.has_checkpoint() else []
        return [sys.executable, "-m", TOOLS[self.tool], *self.args, *resume]


def make_job(
    ctx: Context, name: str, tool: str, args: list[str], output_flag: str, result_name: str, output_file: bool = False
) -> Job:
    """A job whose output directory is named by ``name`` and a hash of what it computes.

    Identical invocations from different experiments land in the same directory, so they run once;
    any change of model, budget or setting gives a new directory instead of reusing a stale result.
    """
    semantic, skip = [], False
    for item in args:
        if skip:
            skip = False
            continue
        if item in NON_SEMANTIC_FLAGS:
            skip = item != "--resume"  # the others take a value
            continue
        semantic.append(item)
    digest = hashlib.sha1(json.dumps([tool, *semantic]).encode()).hexdigest()[:8]
    output_dir = ctx.runs_dir / "shared" / f"{name}-{digest}"
    target = output_dir / result_name if output_file else output_dir
    return Job(tool, [*args, output_flag, rel(target)], output_dir, output_dir / result_name)


@dataclass
class CollectJob(Job):
    """``dynaweb-collect``: done when every requested episode is in its output, not when the file exists.

    The tool appends to its output and skips the episodes already there, so rerunning it resumes.
    """

    episodes: frozenset[tuple[str, int]] = frozenset()

    def done(self) -> bool:
        import warnings

        from dynaweb_env.data.io import iter_trajectories

        if not self.result_file.is_file():
            return False
        with warnings.catch_warnings():  # a line being written right now is not done yet, nor worth a warning
            warnings.simplefilter("ignore")
            found = {(item.task_id, item.metadata.get("seed")) for item in iter_trajectories(self.result_file)}
        return self.episodes <= found


def train_seeds(per_task: int) -> list[int]:
    """The first ``per_task`` task seeds of the train split (:func:`dynaweb_env.data.shipped.split_of`)."""
    from dynaweb_env.data.shipped import split_of

    return list(itertools.islice((seed for seed in itertools.count() if split_of(seed) == "train"), per_task))


def collect_job(ctx: Context) -> CollectJob:
    """The scripted expert's demonstrations on ``ctx.demonstrations`` train-split seeds of every task."""
    seeds = train_seeds(ctx.demonstrations or 0)
    flags = {"--policy": "expert", "--tasks": ctx.tasks, "--seeds": ",".join(map(str, seeds))}
    job = make_job(
        ctx, f"demos-expert-{len(seeds)}", "dynaweb-collect", to_args(flags), "--output", "trajectories.jsonl", True
    )
    return CollectJob(**vars(job), episodes=frozenset((task, seed) for task in ctx.tasks for seed in seeds))


def sft_job(ctx: Context, seed: int) -> Job:
    """The SFT start of one seed: ``dynaweb-sft`` on the train split of the demonstrations."""
    b = ctx.budget
    flags = {
        "--model_name_or_path": ctx.policy,
        "--max_steps": b.sft_steps,
        "--per_device_train_batch_size": b.sft_batch_size,
        "--gradient_accumulation_steps": b.sft_gradient_accumulation_steps,
        "--max_axtree_chars": b.max_axtree_chars,
        "--seed": seed,
        "--save_steps": b.save_steps,
    }
    if b.sft_learning_rate is not None:
        flags["--learning_rate"] = b.sft_learning_rate
    if ctx.demonstrations is not None:  # else dynaweb-sft's default: the shipped demonstrations
        flags["--dataset_path"] = rel(ctx.train_data)
    job = make_job(ctx, f"sft-seed{seed}", "dynaweb-sft", to_args(flags), "--output_dir", "sft_summary.json")
    job.resume_args = ["--resume_from_checkpoint", "last"]  # an error without a checkpoint, so only then
    return job


def train_job(ctx: Context, arm: Arm, seed: int, start: Job) -> Job:
    """``dynaweb-train`` of one arm and seed from the SFT start (always with ``--resume``)."""
    b = ctx.budget
    flags: dict[str, Any] = {
        "--preset": "cpu-small",
        "--policy": rel(start.output_dir),
        "--seed": seed,
        "--max-steps": b.train_steps,
        "--num-generations": b.num_generations,
        "--per-device-train-batch-size": b.per_device_train_batch_size,
        "--gradient-accumulation-steps": b.gradient_accumulation_steps,
        "--agent-max-steps": b.agent_max_steps,
        "--max-turn-tokens": b.max_turn_tokens,
        "--max-axtree-chars": b.max_axtree_chars,
        "--max-completion-length": b.max_completion_length,
        "--tasks": ctx.tasks,
    }
    if b.train_learning_rate is not None:
        flags["--learning-rate"] = b.train_learning_rate
    flags.update(arm.train_flags)
    flags["--save-steps"] = b.save_steps
    # Named by the configuration, not the arm: the same run in two experiments is the same directory.
    name = "-".join(part for part in (arm.method, describe(arm.train_flags), f"seed{seed}") if part)
    return make_job(ctx, name, "dynaweb-train", [*to_args(flags), "--resume"], "--output-dir", "summary.json")


def to_args(flags: dict[str, Any]) -> list[str]:
    """``{"--flag": value}`` as command-line arguments (a list value gives several arguments)."""
    args: list[str] = []
    for flag, value in flags.items():
        args += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    return args


def describe(flags: dict[str, Any]) -> str:
    """A short readable name of an arm's training settings (the hash in the directory name is the exact one)."""
    if flags.get("--env") != "dream":
        return ""
    world_model = str(flags.get("--world-model", "shipped")).strip("/").replace("/", "_")[-24:]
    return f"dl{flags['--dream-length']}-ef{flags['--expert-frac']}-wm_{world_model}"


def eval_job(ctx: Context, name: str, policy: str) -> Job:
    """``dynaweb-eval`` of one policy on the held-out seeds of every task."""
    b = ctx.budget
    flags = {
        "--policy": policy,
        "--tasks": ctx.tasks,
        "--seeds": b.eval_seeds,
        "--max-steps": b.agent_max_steps,
        "--max-new-tokens": b.max_turn_tokens,
        "--max-axtree-chars": b.max_axtree_chars,
        "--num-envs": b.eval_envs,
    }
    return make_job(ctx, f"eval-{name}", "dynaweb-eval", to_args(flags), "--output", "eval.json", output_file=True)


def evaluation_of(ctx: Context, policy_job: Job) -> Job:
    """The evaluation of the policy a training or SFT job writes (one per policy, shared by experiments)."""
    return eval_job(ctx, policy_job.output_dir.name, rel(policy_job.output_dir))


# -- experiments: arms x seeds ---------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """One method or setting of an experiment.

    Attributes:
        key: Short name (``--arms`` selects by it; run names start with it).
        method: ``base``, ``sft``, ``gspo-real`` or ``dynaweb``.
        label: For tables and plots.
        x: The swept value (sweeps only).
        train_flags: ``dynaweb-train`` flags of this arm (over the shared ones).
        world_model: ``shipped`` (the default trained one), ``untrained``, ``custom`` or ``None`` (no dreams).
    """

    key: str
    method: str
    label: str
    x: float | None = None
    train_flags: dict[str, Any] = field(default_factory=dict)
    world_model: str | None = None


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
    world_model = ctx.untrained_world_model if untrained else ctx.world_model
    if world_model is not None:
        flags["--world-model"] = world_model
    kind = "untrained" if untrained else ("custom" if ctx.world_model is not None else "shipped")
    return Arm(key, "dynaweb", label, x, flags, kind)


def experiment_arms(experiment: str, ctx: Context) -> list[Arm]:
    """The arms of an experiment, in table / plot order."""
    if experiment == "table1":
        return [
            Arm("base", "base", "base model"),
            Arm("sft", "sft", "SFT start"),
            Arm("gspo-real", "gspo-real", "GSPO, real browser", train_flags={"--env": "real", "--expert-frac": 0.0}),
            dynaweb_arm(ctx, "dynaweb", "DynaWeb"),
        ]
    if experiment == "dream_length":
        return [dynaweb_arm(ctx, f"{x}", f"dream length {x}", x, dream_length=x) for x in SWEEPS[experiment]]
    if experiment == "expert_frac":
        return [dynaweb_arm(ctx, f"{x}", f"expert fraction {x}", x, expert_frac=x) for x in SWEEPS[experiment]]
    if experiment == "world_model":
        return [
            dynaweb_arm(ctx, "trained", f"trained ({ctx.world_model or TRAINED_WORLD_MODEL})"),
            dynaweb_arm(ctx, "untrained", f"untrained ({ctx.untrained_world_model})", untrained=True),
        ]
    raise ValueError(f"unknown experiment {experiment!r}; known: {', '.join(EXPERIMENTS)}")


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

    @property
    def name(self) -> str:
        return self.arm.key if self.seed is None else f"{self.arm.key}-seed{self.seed}"

    @property
    def jobs(self) -> list[Job]:
        return [job for job in (self.sft, self.train, self.eval) if job is not None]

    def done(self, ctx: Context) -> bool:
        """Finished: a result of this configuration exists, evaluated unless evaluation is skipped."""
        result = current_result(self, ctx)
        return result is not None and (ctx.skip_eval or bool(result.get("evaluated")))


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
    """One run's jobs: the SFT start (not for the base model), training (RL arms), evaluation."""
    start = None if seed is None else sft_job(ctx, seed if ctx.sft_seed is None else ctx.sft_seed)
    train = train_job(ctx, arm, seed, start) if arm.method in ("gspo-real", "dynaweb") else None
    policy_job = train or start
    evaluation = None
    if not ctx.skip_eval:
        base = f"base-{ctx.policy.strip('/').replace('/', '_')}"
        evaluation = evaluation_of(ctx, policy_job) if policy_job else eval_job(ctx, base, ctx.policy)
    run_name = arm.key if seed is None else f"{arm.key}-seed{seed}"
    return Run(experiment, arm, seed, start, train, evaluation, ctx.runs_dir / experiment / run_name / "result.json")


# -- running -----------------------------------------------------------------------------------
class JobFailed(RuntimeError):
    """A tool exited non-zero or without writing its result file."""


def execute(job: Job, echo: bool = True) -> None:
    """Run one job, its output appended to ``<output_dir>/<tool>.log`` (and echoed when ``echo``).

    Raises:
        JobFailed: With the log's path, if the tool fails.
    """
    job.output_dir.mkdir(parents=True, exist_ok=True)
    log = job.output_dir / f"{job.tool}.log"
    argv = job.argv()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    with open(log, "ab", buffering=0) as handle:  # unbuffered: the log shows a running tool's progress
        handle.write(f"\n$ {shlex.join(argv)}\n".encode())
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            # Raw chunks, not lines: progress bars redraw with \r, which line reading would turn into floods.
            for chunk in iter(lambda: process.stdout.read1(1 << 16), b""):
                handle.write(chunk)
                if echo:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
        except BaseException:
            # Interrupted (Ctrl-C, kill): stop the tool too; its last checkpoint is where a rerun resumes.
            process.terminate()
            process.wait()
            raise
        status = process.wait()
    if status != 0 or not job.done():
        raise JobFailed(f"{job.tool} exited with status {status}; see {rel(log)}")


def prepare_demonstrations(ctx: Context, echo: bool = True) -> None:
    """Make ``ctx.train_data``: collect the expert's demonstrations, or write the shipped ones' train split.

    Raises:
        JobFailed: If the collection fails (rerunning resumes it).
    """
    if ctx.demonstrations is None:
        write_train_split(ctx)
        return
    job = collect_job(ctx)
    if not job.done():
        log = rel(job.output_dir / f"{job.tool}.log")
        print(f"paper_claims: collecting demonstrations: {job.command}\n  log: {log}", flush=True)
        execute(job, echo)


def write_train_split(ctx: Context) -> None:
    """Write the train split of the shipped demonstrations: DynaWeb never sees held-out seeds."""
    lines = [line for line in DEMONSTRATIONS.read_text().splitlines() if line.strip()]
    train = "".join(line + "\n" for line in lines if json.loads(line).get("metadata", {}).get("split") == "train")
    if ctx.train_data.is_file() and ctx.train_data.read_text() == train:
        return  # unchanged: keep the file (and its timestamp) as the finished runs saw it
    ctx.train_data.parent.mkdir(parents=True, exist_ok=True)
    temporary = ctx.train_data.with_suffix(".tmp")
    temporary.write_text(train)
    os.replace(temporary, ctx.train_data)


def preflight(runs: Sequence[Run], ctx: Context) -> list[str]:
    """Problems that would make pending runs fail late (missing world model, missing browser)."""
    pending = [run for run in runs if not run.done(ctx)]
    problems = []
    if any(run.arm.world_model == "shipped" for run in pending):
        from dynaweb_env.models import ADAPTER_CONFIG_FILE, SHIPPED_ADAPTERS

        path = SHIPPED_ADAPTERS[TRAINED_WORLD_MODEL].path
        if not (path / ADAPTER_CONFIG_FILE).is_file():
            problems.append(
                f"the shipped world model {TRAINED_WORLD_MODEL} is missing ({path}): train and ship it first, "
                "or leave the DynaWeb arms out for now with --arms"
            )
    if any(run.eval or run.arm.method == "gspo-real" for run in pending):
        from dynaweb_env.envs.browser import BrowserNotFoundError, find_chromium

        try:
            find_chromium()
        except BrowserNotFoundError as error:
            problems.append(f"real-browser runs need Chromium: {error}")
    return problems


def run_all(runs: Sequence[Run], ctx: Context, echo: bool = True) -> list[str]:
    """Run every unfinished run in order (its unfinished jobs only); returns the failures.

    A failed job is reported and not retried by later runs of this invocation (they are skipped).
    """
    failed: dict[Path, str] = {}
    failures = []
    for index, run in enumerate(runs, 1):
        prefix = f"[{index}/{len(runs)}] {run.experiment}/{run.name}"
        if run.done(ctx):
            print(f"{prefix}: done, skipped ({rel(run.result_file)})", flush=True)
            continue
        try:
            for job in run.jobs:
                if job.output_dir in failed:
                    raise JobFailed(f"needs {rel(job.output_dir)}, which failed: {failed[job.output_dir]}")
                if job.done():
                    print(f"{prefix}: {job.tool} already done ({rel(job.output_dir)})", flush=True)
                    continue
                action = "resuming" if job.has_checkpoint() else "running"
                log = rel(job.output_dir / f"{job.tool}.log")
                print(f"{prefix}: {action} {job.command}\n  log: {log}", flush=True)
                try:
                    execute(job, echo)
                except JobFailed as error:
                    failed[job.output_dir] = str(error)
                    raise
        except JobFailed as error:
            failures.append(f"{run.experiment}/{run.name}: {error}")
            print(f"{prefix}: FAILED: {error}", flush=True)
            continue
        write_json(run.result_file, build_result(run, ctx))
        print(f"{prefix}: finished ({len(runs) - index} left)", flush=True)
    return failures


# -- results -----------------------------------------------------------------------------------
def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, path)  # atomic: an interrupted write never leaves a half result behind


def count_actions(path: Path, split: str = "train", successful_only: bool = False) -> int:
    """Actions (= real transitions) of the trajectories of ``split`` in a shipped JSONL file."""
    from dynaweb_env.data.io import read_trajectories

    return sum(
        len(trajectory.actions)
        for trajectory in read_trajectories(path)
        if trajectory.metadata.get("split") == split and (trajectory.success or not successful_only)
    )


def env_steps(run: Run, train: dict[str, Any] | None, demonstrations: Path) -> dict[str, int | None]:
    """The real-environment steps behind a run's policy, by source.

    ``total`` counts distinct real interactions: demonstration steps (what SFT and expert replays
    use), the policy's real-browser steps in training, and the world model's extra real transitions
    (``None`` when unknown, for a world model given with ``--world-model``). Replays of demonstrations
    are reported apart (``expert_replay``), not added: they reuse steps already counted.
    """
    sft = count_actions(demonstrations, successful_only=True) if run.arm.method != "base" else 0
    online = train.get("real_env_steps") if train else 0
    replay = train.get("expert_env_steps") if train else 0
    world_model = {"shipped": count_actions(EXPLORATION), "untrained": 0, "custom": None, None: 0}[run.arm.world_model]
    parts = (sft, online, world_model)
    total = None if any(part is None for part in parts) else sum(parts)
    return {
        "sft_demonstrations": sft,
        "online_real": online,
        "expert_replay": replay,
        "world_model_extra": world_model,
        "total": total,
    }


def build_result(run: Run, ctx: Context) -> dict[str, Any]:
    """The ``result.json`` of a finished run, from the summaries its tools wrote."""
    sft = read_json(run.sft.result_file) if run.sft else None
    train = read_json(run.train.result_file) if run.train else None
    evaluation = read_json(run.eval.result_file) if run.eval else None
    summary = (evaluation or {}).get("summary", {})
    return {
        "experiment": run.experiment,
        "run": run.name,
        "arm": run.arm.key,
        "method": run.arm.method,
        "label": run.arm.label,
        "x": run.arm.x,
        "seed": run.seed,
        "evaluated": evaluation is not None,
        "success": summary.get("success_rate"),
        "eval_episodes": summary.get("episodes"),
        "eval_mean_steps": summary.get("mean_steps"),
        "train_success_last": (train or {}).get("success_rate_last"),
        "real_env_steps": env_steps(run, train, ctx.train_data),
        "seconds": {
            "sft": (sft or {}).get("runtime_s"),
            "train": (train or {}).get("train_seconds"),
            "eval": (evaluation or {}).get("wall_seconds"),
        },
        "commands": [job.command for job in run.jobs],
        "output_dirs": [rel(job.output_dir) for job in run.jobs],
        "train_summary": train,
    }


def current_result(run: Run, ctx: Context) -> dict[str, Any] | None:
    """The run's result in this configuration, ``None`` while it is unfinished.

    ``result.json`` sits at ``<experiment>/<run name>/``, whatever the budget, models or data, so it
    may hold another configuration's result: that one is stale, and the result is rebuilt from the
    tools' outputs when this configuration's jobs are all done (switching back and forth costs nothing).
    """
    result = read_json(run.result_file)
    mine = [rel(job.output_dir) for job in run.jobs]
    if result is not None and result.get("output_dirs", [])[: len(mine)] == mine:
        return result
    if run.jobs and all(job.done() for job in run.jobs):
        return build_result(run, ctx)
    return None


def paired_with_sft_start(run: Run, ctx: Context) -> dict[str, Any] | None:
    """An RL run's held-out episodes against its own SFT start's, page by page (same task and seed).

    ``gained``: pages the start failed and the run solves; ``lost``: the reverse. Two runs with the
    same success rate can differ a lot here, which the mean alone hides. ``per_task``: successes of
    the start and of the run, by task. ``None`` until both evaluations exist.
    """
    if run.arm.method not in ("gspo-real", "dynaweb") or run.sft is None or run.eval is None:
        return None
    start_eval = evaluation_of(ctx, run.sft)
    mine, start = read_json(run.eval.result_file), read_json(start_eval.result_file)
    if mine is None or start is None:
        return None

    def outcomes(evaluation: dict[str, Any]) -> dict[tuple[str, int], bool]:
        return {(episode["task_id"], episode["task_seed"]): episode["success"] for episode in evaluation["episodes"]}

    ours, theirs = outcomes(mine), outcomes(start)
    shared = sorted(ours.keys() & theirs.keys())
    per_task: dict[str, dict[str, int]] = {}
    for task, seed in shared:
        counts = per_task.setdefault(task, {"episodes": 0, "sft_start": 0, "run": 0})
        counts["episodes"] += 1
        counts["sft_start"] += theirs[task, seed]
        counts["run"] += ours[task, seed]
    return {
        "sft_start_eval": rel(start_eval.result_file),
        "episodes": len(shared),
        "gained": sum(ours[key] and not theirs[key] for key in shared),
        "lost": sum(theirs[key] and not ours[key] for key in shared),
        "per_task": per_task,
    }


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample standard deviation (``None`` below 2 values), min and max."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def summarize(results: Sequence[dict[str, Any]], arms: Sequence[Arm], metric: str) -> list[dict[str, Any]]:
    """One row per arm: the metric over seeds and the mean real-environment steps by source."""
    rows = []
    for arm in arms:
        mine = [result for result in results if result["arm"] == arm.key]
        values = [result[metric] for result in mine if result[metric] is not None]
        steps = {}
        for key in ("sft_demonstrations", "online_real", "expert_replay", "world_model_extra", "total"):
            counts = [result["real_env_steps"][key] for result in mine]
            steps[key] = statistics.fmean(counts) if counts and None not in counts else None
        rows.append(
            {
                "arm": arm.key,
                "method": arm.method,
                "label": arm.label,
                "x": arm.x,
                "runs": len(mine),
                "seeds": [result["seed"] for result in mine],
                "values": [result[metric] for result in mine],
                metric: spread(values),
                "real_env_steps_mean": steps,
            }
        )
    return rows


def table1_criteria(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's bar: DynaWeb >= SFT + 10 points, with <= 10% of real-browser GSPO's real steps."""
    by_arm = {row["arm"]: row for row in rows}

    def get(arm: str, *keys: str) -> Any:
        value: Any = by_arm.get(arm)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    dynaweb, sft = get("dynaweb", "success", "mean"), get("sft", "success", "mean")
    gain = None if dynaweb is None or sft is None else 100 * (dynaweb - sft)
    ratios = {}
    for name, keys in (("total", ("total",)), ("training_only", ("online_real", "world_model_extra"))):
        parts = [[get(arm, "real_env_steps_mean", key) for key in keys] for arm in ("dynaweb", "gspo-real")]
        ours, theirs = (None if None in part else sum(part) for part in parts)
        ratios[name] = None if ours is None or not theirs else ours / theirs
    return {
        "dynaweb_minus_sft_points": gain,
        "dynaweb_beats_sft_by_10_points": None if gain is None else gain >= 10,
        "dynaweb_over_gspo_real_steps": ratios,
        "dynaweb_at_most_10pct_of_gspo_real_steps": None if ratios["total"] is None else ratios["total"] <= 0.1,
    }


def aggregate(experiment: str, runs: Sequence[Run], ctx: Context, command: str) -> dict[str, Any]:
    """The experiment's results file: configuration, every finished run, and the per-arm summary.

    The plotted metric is held-out success when any run was evaluated, else (``--skip-eval``) the
    training success of the last quarter of updates, which is named as such.
    """
    per_run = [current_result(run, ctx) for run in runs]
    for run, result in zip(runs, per_run, strict=True):
        if result is not None:  # not stored in result.json: finished runs gain it without a rerun
            result["vs_sft_start"] = paired_with_sft_start(run, ctx)
    results = [result for result in per_run if result is not None]
    metric = "success" if any(result["evaluated"] for result in results) else "train_success_last"
    arms = list({run.arm.key: run.arm for run in runs}.values())
    rows = summarize(results, arms, metric)
    report = {
        "experiment": experiment,
        "description": EXPERIMENT_DOCS[experiment],
        "command": command,
        "metric": metric,
        "seeds": ctx.seeds,
        "budget": dataclasses.asdict(ctx.budget),
        "config": {
            "policy": ctx.policy,
            "world_model": ctx.world_model or TRAINED_WORLD_MODEL,
            "untrained_world_model": ctx.untrained_world_model,
            "judge": ctx.judge,
            "tasks": ctx.tasks,
            "eval_seeds": ctx.budget.eval_seeds,
            "train_data": rel(ctx.train_data),
            "demonstrations": "shipped" if ctx.demonstrations is None else collect_job(ctx).command,
            "skip_eval": ctx.skip_eval,
            "sft_seed": ctx.sft_seed,
        },
        "summary": rows,
        "complete": all(result is not None and (ctx.skip_eval or result["evaluated"]) for result in per_run),
        "missing": [f"{run.experiment}/{run.name}" for run, found in zip(runs, per_run, strict=True) if not found],
        "runs": results,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if experiment == "table1":
        report["criteria"] = table1_criteria(rows)
    else:
        report["sft_start"] = sft_start_reference(ctx, metric)
    return report


def sft_start_reference(ctx: Context, metric: str) -> dict[str, Any] | None:
    """The SFT start's own score, drawn as the line an RL arm has to clear (``None`` until evaluated).

    Every arm of the sweeps and of ``world_model`` starts from the SFT start of its seed (or of
    ``--sft-seed``): its evaluation is the ``table1`` SFT run's, shared, so reading it costs nothing.
    """
    if metric != "success":
        return None
    results = [(run.name, current_result(run, ctx)) for run in plan("table1", ctx, ["sft"])]
    evaluated = [(name, result) for name, result in results if result is not None and result["evaluated"]]
    if not evaluated:
        return None
    return {
        "label": "SFT start",
        "runs": [f"table1/{name}" for name, _ in evaluated],
        "success": spread([result["success"] for _, result in evaluated]),
    }


EXPERIMENT_DOCS = {
    "table1": "Held-out success on real MiniWoB++ pages: base model, SFT start, real-browser GSPO, DynaWeb "
    "(same number of policy updates), with the real-environment steps each consumed.",
    "dream_length": "DynaWeb held-out success vs dream length (Figure 3a analog).",
    "expert_frac": "DynaWeb held-out success vs fraction of expert trajectories (Figure 3b analog).",
    "world_model": "DynaWeb with the trained world model vs the untrained base model as world model (Figure 4 analog).",
}


def plot(report: dict[str, Any], path: Path) -> None:
    """Bars with the seed spread (``table1``, ``world_model``) or a line over the swept value (sweeps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, rows = report["metric"], report["summary"]
    means = [row[metric]["mean"] if row[metric]["mean"] is not None else math.nan for row in rows]
    stds = [row[metric]["std"] or 0.0 for row in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sweep = report["experiment"] in SWEEPS
    positions = [row["x"] for row in rows] if sweep else list(range(len(rows)))
    if sweep:
        ax.errorbar(positions, means, yerr=stds, marker="o", capsize=4, label="mean ± std over seeds")
        ax.set_xlabel(report["experiment"].replace("_", " "))
        ax.set_xticks(positions)
    else:
        ax.bar(positions, means, yerr=stds, capsize=4, color="#8fb3d9", label="mean ± std over seeds")
        labels = []
        for row in rows:
            steps = row["real_env_steps_mean"]["total"]
            labels.append(row["label"] + ("" if steps is None else f"\n{steps:.0f} real steps"))
        ax.set_xticks(positions, labels, fontsize=8)
    for position, row in zip(positions, rows, strict=True):
        values = [value for value in row["values"] if value is not None]
        ax.scatter([position] * len(values), values, color="black", s=12, zorder=3)
    reference = report.get("sft_start")
    if reference:
        ax.axhline(reference["success"]["mean"], color="gray", linestyle="--", label=reference["label"])
    ylabel = {"success": "held-out success rate (real pages)", "train_success_last": "training success (NOT held-out)"}
    ax.set_ylabel(ylabel[metric])
    ax.set_ylim(0, 1.05)
    sft_seed = report["config"].get("sft_seed")
    seeds = (
        f"seeds {report['seeds']}"
        if sft_seed is None
        else f"RL seeds {report['seeds']}, one SFT start (seed {sft_seed})"
    )
    ax.set_title(f"{report['experiment']}: {seeds}" + ("" if report["complete"] else " (incomplete)"), fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line ------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/paper_claims.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring for what each experiment measures and how long it takes.",
    )
    parser.add_argument(
        "experiments",
        nargs="+",
        choices=EXPERIMENTS,
        metavar="experiment",
        help=f"one or more of: {', '.join(EXPERIMENTS)}",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (default 0 1 2)")
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="small", help="compute budget (default small)")
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=VALUE",
        help="override budget fields, e.g. train_steps=4 eval_seeds=104,109",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        help="only these arms (table1: base sft gspo-real dynaweb; dream_length: 1 3 5 8; "
        "expert_frac: 0.0 0.25 0.5 1.0; world_model: trained untrained)",
    )
    parser.add_argument("--policy", default="smollm2-135m", help="base policy model (default smollm2-135m)")
    parser.add_argument(
        "--world-model",
        default=None,
        help=f"DynaWeb's world model (default: the shipped trained {TRAINED_WORLD_MODEL})",
    )
    parser.add_argument(
        "--untrained-world-model",
        default="smollm2-135m",
        help="the world_model experiment's untrained arm (default smollm2-135m)",
    )
    parser.add_argument(
        "--judge", default=TRAINED_JUDGE, help=f"judge of every DynaWeb run (default the shipped {TRAINED_JUDGE})"
    )
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="tasks (default: the 9 shipped)")
    parser.add_argument(
        "--demonstrations",
        default="40",
        metavar="N|shipped",
        help="the SFT start's data, DynaWeb's start states and expert pool: N train-split seeds per task "
        "collected with the scripted expert (dynaweb-collect --policy expert), or the 4 per task shipped in "
        "miniwob_small.jsonl (default 40)",
    )
    parser.add_argument(
        "--sft-seed",
        type=int,
        default=None,
        metavar="S",
        help="start every RL seed from the one SFT start of seed S, as the paper starts every method from one "
        "SFT checkpoint; the spread over --seeds is then the RL's alone (default: each seed trains its own)",
    )
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "claims", help="default runs/claims")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=ROOT / "benchmarks" / "results",
        help="where the JSON and PNG go (default benchmarks/results)",
    )
    parser.add_argument(
        "--skip-eval", action="store_true", help="train only, no browser (smoke runs); rerun without it to evaluate"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--aggregate-only", action="store_true", help="write JSON + PNG from finished runs only")
    parser.add_argument("--quiet", action="store_true", help="do not echo the tools' output (it is in their logs)")
    return parser.parse_args(argv)


def make_context(args: argparse.Namespace) -> Context:
    return Context(
        budget=apply_overrides(BUDGETS[args.budget], args.set),
        seeds=list(dict.fromkeys(args.seeds)),
        policy=args.policy,
        world_model=args.world_model,
        untrained_world_model=args.untrained_world_model,
        judge=args.judge,
        tasks=list(args.tasks),
        runs_dir=args.runs_dir.resolve(),
        skip_eval=args.skip_eval,
        demonstrations=parse_demonstrations(args.demonstrations),
        sft_seed=args.sft_seed,
    )


def parse_demonstrations(text: str) -> int | None:
    """``--demonstrations``: ``None`` for the shipped ones, else a positive count (``ValueError`` otherwise)."""
    if text == "shipped":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--demonstrations {text!r}: use a positive number of seeds per task, or 'shipped'")
    return int(text)


def dry_run(runs: Sequence[Run], ctx: Context) -> None:
    """Print every run's jobs with their state and exact command (run from the repository root)."""
    print(f"# from {ROOT}")
    if ctx.demonstrations is not None:
        job = collect_job(ctx)
        print(f"[demonstrations] [{'done' if job.done() else 'todo'}] {job.command}")
    for index, run in enumerate(runs, 1):
        state = "done" if run.done(ctx) else "pending"
        print(f"[{index}/{len(runs)}] {run.experiment}/{run.name} ({state})")
        for job in run.jobs:
            status = "done" if job.done() else ("resume" if job.has_checkpoint() else "todo")
            print(f"  [{status}] {job.command}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 if a run failed, 2 for unusable arguments or set-up)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        ctx = make_context(args)
        known = {arm.key for experiment in args.experiments for arm in experiment_arms(experiment, ctx)}
        if set(args.arms or ()) - known:
            raise ValueError(f"unknown --arms {sorted(set(args.arms) - known)}; known here: {sorted(known)}")
        plans = {experiment: plan(experiment, ctx, args.arms) for experiment in args.experiments}
    except ValueError as error:
        print(f"paper_claims: error: {error}", file=sys.stderr)
        return 2
    runs = [run for runs in plans.values() for run in runs]
    if not runs:
        print(f"paper_claims: error: no runs (check --arms {args.arms})", file=sys.stderr)
        return 2
    if args.dry_run:
        dry_run(runs, ctx)
        return 0
    failures: list[str] = []
    if args.aggregate_only and ctx.demonstrations is None:
        write_train_split(ctx)  # results rebuilt from finished jobs count its actions
    if not args.aggregate_only:
        problems = preflight(runs, ctx)
        if problems:
            print("paper_claims: cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 2
        try:
            prepare_demonstrations(ctx, echo=not args.quiet)
        except JobFailed as error:
            print(f"paper_claims: collecting demonstrations failed: {error}", file=sys.stderr)
            return 1
        pending = sum(not run.done(ctx) for run in runs)
        print(f"paper_claims: {len(runs)} runs, {pending} to do, {len(runs) - pending} finished", flush=True)
        failures = run_all(runs, ctx, echo=not args.quiet)
    command = shlex.join(["python", "benchmarks/paper_claims.py", *argv])
    for experiment, experiment_runs in plans.items():
        report = aggregate(experiment, experiment_runs, ctx, command)
        if not report["runs"]:
            print(f"paper_claims: {experiment}: no finished runs yet, nothing written")
            continue
        output = args.results_dir / f"paper_claims_{experiment}.json"
        write_json(output, report)
        plot(report, output.with_suffix(".png"))
        done = f"{len(report['runs'])}/{len(experiment_runs)} runs"
        print(f"paper_claims: {experiment}: {done} in {rel(output)} (+ .png)")
    if failures:
        print("paper_claims: failed runs (rerun the same command to retry):\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
