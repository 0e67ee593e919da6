"""Jobs of the paper-claims driver: the budget, the shared context, and one tool invocation per job.

A :class:`Job` is one ``dynaweb-collect`` / ``dynaweb-sft`` / ``dynaweb-train`` / ``dynaweb-eval``
command; its output directory is named by a hash of what it computes, so an identical job of two
experiments runs once (:func:`make_job`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynaweb_env.agent import check_page_history
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES, split_of
from dynaweb_env.models import TRAINING_WORLD_MODEL
from dynaweb_env.ship import TRAINING_RECORD_FILE
from dynaweb_trainer.evaluate import DEFAULT_TASKS

if TYPE_CHECKING:
    from .catalogue import Arm

ROOT = Path(__file__).resolve().parent.parent.parent
#: Console script -> module run with ``python -m`` (the same interpreter as this driver).
TOOLS: dict[str, str] = {
    "dynaweb-sft": "dynaweb_trainer.sft",
    "dynaweb-train": "dynaweb_trainer.cli",
    "dynaweb-eval": "dynaweb_trainer.evaluate",
    "dynaweb-collect": "dynaweb_trainer.collect",
    "dynaweb-train-wm": "dynaweb_trainer.world_model_sft",
}
#: Flags that change where or how a tool writes, not what it computes: left out of the run's hash.
NON_SEMANTIC_FLAGS = frozenset({"--num-envs", "--save-steps", "--save_steps", "--save-total-limit", "--resume"})
#: Flags with the values every run recorded before the ``cpu-small`` preset took the measured best dream settings
#: (first pages, resamples, guards) had implicitly: stated in every command now, left out of the hash, so that a run
#: of the paper's dream keeps the directory and the recorded results of its identical earlier command.
RESTATED_FLAGS = {"--reward-guards": "none", "--include-intermediate": "true", "--dream-resamples": "0"}
DEMONSTRATIONS = EXPERT_TRAJECTORIES
#: What ``dynaweb-train`` dreams with when no ``--world-model`` is given (its presets'). The runs recorded in
#: ``paper_claims_{table1,dream_length,expert_frac,world_model}.json`` predate commit c4f2d74 and dreamed with
#: the tree model ``smollm2-135m-wm`` (their JSON names it); a rerun of their commands now dreams with this one.
TRAINED_WORLD_MODEL = TRAINING_WORLD_MODEL
#: Written beside the collected demonstrations: how long their collection took.
COLLECT_SECONDS_FILE = "collect_seconds.json"


def held_out_seed_list(first: int, count: int) -> list[int]:
    """``count`` task seeds of the test split (:func:`~dynaweb_env.data.shipped.split_of`) from ``first`` on: the
    pages no model of the project trained on."""
    return list(itertools.islice((seed for seed in itertools.count(first) if split_of(seed) == "test"), count))


def held_out_seeds(first: int, count: int) -> str:
    """:func:`held_out_seed_list` as a ``dynaweb-eval`` seed specification (``"104,109,..."``)."""
    return ",".join(map(str, held_out_seed_list(first, count)))


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
        page_history: How the policy sees pages after the first, in SFT, training and evaluation alike:
            ``"full"`` (whole), ``"edits"`` (the edits of the page before) or ``"actions"`` (a prompt of its own each
            turn: the latest page and the actions so far); ``EpisodeEncoder``.
        world_model_max_new_tokens, judge_max_new_tokens: Token budgets of one prediction / verdict.
        save_steps: Checkpoint interval (what an interrupted run loses at most).
        model_steps: Optimizer steps (of 4 examples) of the world model and judge trained on the demonstrations
            alone (``--model-data demonstrations``): 350 is about one pass over the 360 demonstrations' 681
            transitions and their 720 judge cases.
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
    page_history: str = "full"
    world_model_max_new_tokens: int = 384
    judge_max_new_tokens: int = 128
    save_steps: int = 2
    model_steps: int = 350
    eval_seeds: str = held_out_seeds(100, 10)
    eval_envs: int = 4

    def __post_init__(self) -> None:
        check_page_history(self.page_history)


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
    # The long suite (``--suite long`` picks it): measured on every expert episode of the all-tasks data
    # (``python -m benchmarks.observation_cut``, docs/training.md). Its experts take 3 to 16 steps (number-checkboxes
    # 13-16): the paper's 10, which ``TASK_STEP_LIMITS`` raises to 15 or 20 for all but form-sequence (3-6); a
    # 1500-character tree drops the acted-on element of 18% of their actions,
    # 3000 of 2%; at this cut whole pages make 39 of 90 episodes fit 4,096 tokens, pages as edits 74 (every episode
    # of 7 of the 9 tasks; book-flight and choose-date rewrite their pages wholesale). One SFT episode at a time.
    "long": Budget(
        sft_batch_size=1,
        sft_gradient_accumulation_steps=8,
        agent_max_steps=10,
        max_axtree_chars=3000,
        page_history="edits",
    ),
}
#: The budget a task suite runs on unless ``--budget`` says otherwise (every other suite: ``"small"``).
SUITE_BUDGETS = {"long": "long"}


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
    #: ``reward_guards`` of every DynaWeb run (``dynaweb-train --reward-guards``; ``None``: none, the paper's dream).
    reward_guards: dict[str, Any] | None = None
    #: Where dreams start: ``"all"`` recorded pages (the paper), or only each recording's ``"first"``.
    dream_starts: str = "all"
    #: ``dynaweb-train --dream-resamples`` of every DynaWeb run: flat dream groups dreamed again (``0``: off).
    dream_resamples: int = 0
    #: Order of every RL run's task queries (``dynaweb-train --task-order``): ``"shuffled"`` or ``"balanced"``.
    task_order: str = "shuffled"
    #: DynaWeb's world model and judge: ``"shipped"`` (trained models, ``world_model``/``judge`` above) or
    #: ``"demonstrations"``: one adapter trained as both on the SFT start's demonstrations alone, as the paper's
    #: world model learns from its agents' SFT data, so DynaWeb adds no real step beyond them.
    model_data: str = "shipped"
    #: With ``model_data="demonstrations"``: the judge also learns each demonstration's final action taken too early
    #: as a failure (``dynaweb-train-wm --judge_early_final``), the near misses a judge of successes pays for.
    judge_near_misses: bool = False
    #: A learning-curve point trains its run only up to its checkpoint, then stops (``--stop-after-step``); the
    #: next point resumes it. Off: the first point trains the run to ``train_steps``.
    train_to_checkpoint: bool = False
    #: Committed results files whose runs stand in for runs of identical commands with no outputs on disk.
    recorded: tuple[Path, ...] = ()

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


@dataclass
class CheckpointJob(Job):
    """A training job as one of its checkpoints' evaluations sees it: done once that checkpoint is saved.

    A learning curve's early points need not wait for the run's last update, so a second driver can evaluate
    ``checkpoint-8`` while the first still trains. Running this job runs (or resumes) the whole training, or with
    ``stop`` only up to ``checkpoint``; the flag is not in the recorded command, since it does not change the run.

    Attributes:
        checkpoint: The update whose checkpoint the evaluation reads.
        stop: Stop the training there (``dynaweb-train --stop-after-step``); a later job resumes it.
    """

    checkpoint: int = 0
    stop: bool = False

    def argv(self) -> list[str]:
        return [*super().argv(), *(["--stop-after-step", str(self.checkpoint)] if self.stop else [])]

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / f"checkpoint-{self.checkpoint}"

    def finished(self) -> bool:
        """The whole training is done (its summary is written)."""
        return super().done()

    def done(self) -> bool:
        # The Trainer writes a checkpoint's trainer_state.json after its weights and optimizer state: once it
        # reads as JSON, the checkpoint is whole.
        state = self.checkpoint_dir / "trainer_state.json"
        try:
            return self.finished() or (state.is_file() and isinstance(json.loads(state.read_text()), dict))
        except (OSError, ValueError):  # being written right now
            return False


def make_job(
    ctx: Context, name: str, tool: str, args: list[str], output_flag: str, result_name: str, output_file: bool = False
) -> Job:
    """A job whose output directory is named by ``name`` and a hash of what it computes.

    Identical invocations from different experiments land in the same directory, so they run once;
    any change of model, budget or setting gives a new directory instead of reusing a stale result.
    """
    semantic, skip = [], False
    for index, item in enumerate(args):
        if skip:
            skip = False
            continue
        if item in NON_SEMANTIC_FLAGS:
            skip = item != "--resume"  # the others take a value
            continue
        if item in RESTATED_FLAGS and index + 1 < len(args) and args[index + 1] == RESTATED_FLAGS[item]:
            skip = True
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
    if b.page_history != "full":  # only when set, so that the other budgets' runs keep their commands and hashes
        flags["--page_history"] = b.page_history
    if b.sft_learning_rate is not None:
        flags["--learning_rate"] = b.sft_learning_rate
    if ctx.demonstrations is not None:  # else dynaweb-sft's default: the shipped demonstrations
        flags["--dataset_path"] = rel(ctx.train_data)
    job = make_job(ctx, f"sft-seed{seed}", "dynaweb-sft", to_args(flags), "--output_dir", "sft_summary.json")
    job.resume_args = ["--resume_from_checkpoint", "last"]  # an error without a checkpoint, so only then
    return job


def models_job(ctx: Context) -> Job:
    """``dynaweb-train-wm --examples both`` on the demonstrations: DynaWeb's world model and judge in one adapter.

    The shipped world model's recipe (patch output, LoRA r=8, learning rate 1e-3) from the untrained base model,
    with the judge's cases of the same trajectories (each success, and the cut before its last action as a
    failure; with ``judge_near_misses`` also its final action taken too early) in grounded prompts, as the
    shipped judge is prompted.
    """
    flags = {
        "--model_name_or_path": ctx.untrained_world_model,
        "--dataset_path": rel(ctx.train_data),
        "--examples": "both",
        "--output_mode": "patch",
        "--prompt_style": "grounded",
        "--judge_prefixes": "last",
        "--lora_r": 8,
        "--lora_alpha": 16,
        "--learning_rate": 1e-3,
        "--warmup_steps": 5,
        "--max_steps": ctx.budget.model_steps,
        "--save_steps": 20,
    }
    if ctx.judge_near_misses:  # only when set, so that the first demonstrations model keeps its command and hash
        flags["--judge_early_final"] = "true"
    job = make_job(ctx, "models-demos", "dynaweb-train-wm", to_args(flags), "--output_dir", TRAINING_RECORD_FILE)
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
    if b.page_history != "full":
        flags["--page-history"] = b.page_history
    if b.train_learning_rate is not None:
        flags["--learning-rate"] = b.train_learning_rate
    flags.update(arm.train_flags)
    balanced = ctx.task_order == "balanced"
    if balanced:  # only when set, so that the paper's runs keep their commands and hashes
        flags["--task-order"] = "balanced"
    flags["--save-steps"] = b.save_steps
    # Every checkpoint kept (the preset keeps 2): the learning curve evaluates each of them.
    flags["--save-total-limit"] = -(-b.train_steps // b.save_steps)
    # Named by the configuration, not the arm: the same run in two experiments is the same directory.
    parts = (arm.method, describe(arm.train_flags), "balanced" if balanced else "", f"seed{seed}")
    name = "-".join(part for part in parts if part)
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
    # Only word characters, dots and dashes: a spec's "ct2:" or "transformers:" must not put a colon in a path.
    world_model = re.sub(r"[^\w.-]+", "_", str(flags.get("--world-model", "shipped")).strip("/"))[-24:]
    guarded = "-guarded" if flags.get("--reward-guards", "none") != "none" else ""
    return f"dl{flags['--dream-length']}-ef{flags['--expert-frac']}-wm_{world_model}{guarded}"


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
    if b.page_history != "full":
        flags["--page-history"] = b.page_history
    return make_job(ctx, f"eval-{name}", "dynaweb-eval", to_args(flags), "--output", "eval.json", output_file=True)


def evaluation_of(ctx: Context, policy_job: Job) -> Job:
    """The evaluation of the policy a training or SFT job writes (one per policy, shared by experiments)."""
    return eval_job(ctx, policy_job.output_dir.name, rel(policy_job.output_dir))


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, path)  # atomic: an interrupted write never leaves a half result behind
