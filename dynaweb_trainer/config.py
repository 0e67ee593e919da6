"""`GSPOConfig`: TRL's `GRPOConfig` set up as GSPO with the DynaWeb paper's recipe, plus DynaWeb fields.

Defaults follow the paper (appendix A.3, Table 3) where it gives a value, and the GSPO paper
(v2, section 5.1) for the clipping range it leaves open. Named presets
(``dynaweb_trainer/presets/*.yaml``) adapt them to a machine: ``cpu-small`` (the default of
``dynaweb-train``: embedded 135M policy with LoRA, small groups, minutes on a laptop CPU) and
``paper`` (Table 3 on 8 GPUs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from dynaweb_env.agent import PAGE_HISTORIES, PAGE_HISTORY_HELP, check_page_history
from dynaweb_env.data.tasks import expand_tasks

from .sft_base import LoraSettings

#: Environments a run can train on.
ENVIRONMENTS: tuple[str, ...] = ("dream", "real", "mix")
#: Response styles of :func:`dynaweb_env.agent.policy_system_prompt`.
RESPONSE_STYLES: tuple[str, ...] = ("compact", "paper")
#: Orders of a run's task queries (``GSPOConfig.task_order``).
TASK_ORDERS: tuple[str, ...] = ("shuffled", "balanced")
#: Where the named presets live.
PRESETS_DIR = Path(__file__).parent / "presets"


def _require_positive(config: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass
class DreamEnvSettings:
    """The DreamWeb-v0 arguments a run or a CLI sets: declared once, used by ``dynaweb-train`` and ``dynaweb-dream``.

    See :class:`GSPOConfig` for what each field means; :meth:`env_kwargs` maps them onto
    ``gym.make_vec("DreamWeb-v0", ...)``.
    """

    world_model: str | None = field(
        default=None, metadata={"help": "World-model backend spec (default: the shipped trained world model)."}
    )
    world_model_output_mode: str | None = field(
        default=None, metadata={"help": "World-model output: tree or patch (default: the world model's own)."}
    )
    judge: str | None = field(
        default=None,
        metadata={
            "help": "Judge backend spec (default: the shipped trained judge of the tasks; 'world_model': the world "
            "model's)."
        },
    )
    world_model_temperature: float = field(default=0.7, metadata={"help": "World-model temperature (Table 3: 0.7)."})
    world_model_max_new_tokens: int = field(default=768, metadata={"help": "Token budget of one WM prediction."})
    judge_max_new_tokens: int = field(default=256, metadata={"help": "Token budget of one judge verdict."})
    dream_length: int = field(default=5, metadata={"help": "Most steps per dream (paper: up to 5)."})
    start_states: str | None = field(
        default=None, metadata={"help": "Trajectory JSONL (file or dir) of dream start states (default: shipped)."}
    )
    include_intermediate: bool = field(
        default=True, metadata={"help": "Also start dreams from intermediate pages (paper)."}
    )
    # `dict | str`: a YAML mapping arrives as a dict, a flag as a JSON string (as TrainingArguments' dict fields).
    reward_guards: dict | str | None = field(
        default=None,
        metadata={
            "help": "Reward guards of dreams: a JSON object of dynaweb_env.envs.dream_guards.RewardGuards fields, "
            'e.g. \'{"judge_votes": 5}\' or \'{"group_judging": "votes", "judge_votes": 4}\' (default: none).'
        },
    )

    def validate_dream_settings(self) -> None:
        """``ValueError`` for a setting DreamWeb-v0 would refuse (``reward_guards`` is read into a dict here)."""
        from dynaweb_env.envs.dream_guards import RewardGuards

        _require_positive(self, ("dream_length", "world_model_max_new_tokens", "judge_max_new_tokens"))
        if self.world_model_output_mode not in (None, "tree", "patch"):
            raise ValueError(
                f"world_model_output_mode must be 'tree', 'patch' or None, got {self.world_model_output_mode!r}"
            )
        if self.world_model_temperature < 0:
            raise ValueError(f"world_model_temperature must be >= 0, got {self.world_model_temperature}")
        guards = self.reward_guards
        if isinstance(guards, str):
            try:
                guards = json.loads(guards) if guards.strip() not in ("", "none") else None
            except json.JSONDecodeError as error:
                raise ValueError(f"reward_guards must be a JSON object, got {self.reward_guards!r}: {error}") from None
        # Checked now, not at the first dream; kept as given (only the fields set), so records stay short.
        RewardGuards.parse(guards)
        self.reward_guards = dict(guards) if guards else None

    def env_kwargs(self) -> dict[str, Any]:
        """The ``DreamWeb-v0`` keyword arguments of these settings (plus ``tasks`` when the config has them)."""
        tasks = getattr(self, "tasks", None)
        return {
            "world_model": self.world_model,
            "judge": self.judge,
            "start_states": self.start_states,
            "tasks": list(tasks) if tasks else None,
            "dream_length": self.dream_length,
            "include_intermediate": self.include_intermediate,
            "world_model_temperature": self.world_model_temperature,
            "max_new_tokens": self.world_model_max_new_tokens,
            "judge_max_new_tokens": self.judge_max_new_tokens,
            "output_mode": self.world_model_output_mode,
            "reward_guards": self.reward_guards,
        }


@dataclass
class GSPOConfig(GRPOConfig, DreamEnvSettings, LoraSettings):
    r"""
    Configuration class for [`~dynaweb_trainer.trainer.DynaWebTrainer`]: GSPO on dreamed and real web episodes.

    Only the parameters specific to DynaWeb, and the GRPO ones whose defaults differ, are listed here; see
    [`trl.GRPOConfig`] and [`transformers.TrainingArguments`] for the rest. Every field is also a command-line flag of
    `dynaweb-train` (`--expert_frac 0.5` or `--expert-frac 0.5`) and a key of a `--config` YAML file.

    Parameters:
        > GSPO (defaults differ from `GRPOConfig`)

        importance_sampling_level (`str`, *optional*, defaults to `"sequence"`):
            GSPO's sequence-level ratio s_i = exp(mean_k log π_θ/π_old) over the policy's own tokens (paper eq. 9).
        loss_type (`str`, *optional*, defaults to `"grpo"`):
            Per-sequence normalisation; with sequence-level ratios this is the paper's eq. 8.
        beta (`float`, *optional*, defaults to `0.0`):
            KL coefficient; the paper disables KL regularisation.
        epsilon (`float`, *optional*, defaults to `3e-4`) and epsilon_high (`float`, *optional*, defaults to `4e-4`):
            Clipping range of the sequence ratio (GSPO paper v2, section 5.1; DynaWeb does not state one).
        num_generations (`int`, *optional*, defaults to `8`):
            Group size G: rollouts per task query (Table 3, n = 8).
        temperature (`float`, *optional*, defaults to `0.7`) and top_p (`float`, *optional*, defaults to `0.9`):
            Policy rollout sampling (Table 3).
        learning_rate (`float`, *optional*, defaults to `1e-6`):
            Policy learning rate (Table 3).
        max_completion_length (`int`, *optional*, defaults to `16000`):
            Cap on an episode's completion tokens (all assistant turns *and* observation turns after the first
            prompt); an episode that reaches it ends (Table 3: max response length 16,000).

        > Environment

        environment (`str`, *optional*, defaults to `"dream"`):
            `"dream"` (DreamWeb-v0: world model + judge), `"real"` (RealWeb-v0: MiniWoB++ in Chromium) or `"mix"`
            (both, `real_frac` of the task queries real). Flag `--env`.
        real_frac (`float`, *optional*, defaults to `0.5`):
            With `environment="mix"`, the fraction of task queries run in the real environment.
        num_envs (`int` or `None`, *optional*, defaults to `None`):
            Parallel episodes per vector env; `None` runs a whole generation batch at once.
        tasks (`list[str]` or `None`, *optional*, defaults to `None`):
            Task ids to train on (e.g. `miniwob.click-button`), or suite names that stand for their tasks (`"long"`);
            `None`: every task of the start states.
        task_order (`str`, *optional*, defaults to `"shuffled"`):
            Order of the task queries: `"shuffled"` (TRL's seeded shuffle) or `"balanced"` (every task once before
            any task again, [`~dynaweb_trainer.task_queries.balanced_order`]; sets `shuffle_dataset=False`).
        real_task_seeds (`int`, *optional*, defaults to `16`):
            Task seeds per task in the real-environment query set (seeds `0 .. real_task_seeds - 1`).
        agent_max_steps (`int`, *optional*, defaults to `10`):
            Most policy turns per episode (Table 3).
        dream_resamples (`int`, *optional*, defaults to `0`):
            Dynamic sampling in imagination (after DAPO): a group of dreams whose rewards are all equal gives GSPO
            no advantage, so it is dreamed again from a new start state drawn from the run's start states, up to
            this many times, and replaced by the first draw whose rewards differ. Costs world-model calls only,
            never a real step. Groups with an expert replay or a real episode are kept. `0`: off.

        > Dreams (DreamWeb-v0)

        world_model (`str` or `None`, *optional*, defaults to `None`):
            World-model backend spec for `dynaweb_env.llm.make_backend` (embedded name, shipped adapter, local
            path, `openai:<model>@<url>`, ...); `None` is DreamWeb-v0's default world model of
            `world_model_output_mode` (`smollm2-135m-wm-patch-all`, or `smollm2-135m-wm` in tree mode). The
            `cpu-small` and `gpu` presets name `smollm2-135m-wm-patch`, the world model of every recorded run.
        world_model_output_mode (`str` or `None`, *optional*, defaults to `None`):
            `"tree"` (the paper's full next tree) or `"patch"` (edits of the current tree); `None` is the
            world model's recorded mode (`"patch"` when no world model is named), else `"tree"`.
        judge (`str` or `None`, *optional*, defaults to `None`):
            Judge backend spec; `None` is DreamWeb-v0's default, the shipped trained judge of the dreamed tasks
            (`dynaweb_env.models.default_judge`: `"smollm2-135m-judge-dagger"`, or `"smollm2-135m-judge-all"` when a
            task is one the first never trained on, e.g. the long tasks). `"world_model"` reuses the world model's
            backend (the paper's setting: one LLM), which writes no verdict on most dreams.
        world_model_temperature (`float`, *optional*, defaults to `0.7`):
            World-model sampling temperature (Table 3).
        world_model_max_new_tokens (`int`, *optional*, defaults to `768`):
            Token budget of one world-model prediction (Table 3 allows 8,192 with a 120B model on GPUs).
        judge_max_new_tokens (`int`, *optional*, defaults to `256`):
            Token budget of one judge verdict (reasoning + verdict).
        dream_length (`int`, *optional*, defaults to `5`):
            Most steps per dream (paper: up to 5).
        start_states (`str` or `None`, *optional*, defaults to `None`):
            Trajectory JSONL file or directory of dream start states; `None`: the shipped MiniWoB++ set.
        include_intermediate (`bool`, *optional*, defaults to `True`):
            Also start dreams from intermediate pages of the recorded trajectories (paper).
        reward_guards (`dict` or `None`, *optional*, defaults to `None`):
            Reward guards of every dream (:class:`dynaweb_env.envs.dream_guards.RewardGuards` fields: judge votes,
            world-model samples, gated termination, group-relative judging); a mapping in YAML, a JSON object as a
            flag (`--reward-guards '{"judge_votes": 5}'`). `None`: none, the paper's dream. Recorded in the run's
            `summary.json`.

        > Expert interleaving

        expert_frac (`float`, *optional*, defaults to `0.5`):
            Probability that a rollout slot is replaced by a real expert trajectory of the same task (paper: 50%).
        expert_trajectories (`str` or `None`, *optional*, defaults to `None`):
            Expert trajectory JSONL file or directory; `None`: the experts of `start_states` (the shipped start
            states are the large dataset's train-split experts), so that every task a run draws has experts.

        > Policy

        policy (`str`, *optional*, defaults to `"smollm2-135m"`):
            Policy model: an embedded name (`smollm2-135m`, `tiny-random`), a local checkpoint or a hub id.
        response_style (`str`, *optional*, defaults to `"compact"`):
            `"compact"` (REASON + ACTION) or `"paper"` (the paper's five sections), see `dynaweb_env.agent`.
        system_prompt (`str` or `None`, *optional*, defaults to `None`):
            Policy system prompt; `None` uses `dynaweb_env.agent.policy_system_prompt(response_style)` (appendix
            A.1). Set it only for a policy fine-tuned with another prompt (or tiny test policies).
        max_axtree_chars (`int`, *optional*, defaults to `4000`):
            Accessibility trees in policy prompts are cut to this many characters at line boundaries with
            `dynaweb_env.observation.truncate_axtree` (the one way long trees are cut); `0` never cuts.
        page_history (`str`, *optional*, defaults to `"full"`):
            How pages after the first appear in the episode: `"full"`, or `"edits"` (each page as the edits of the
            page before where shorter, `dynaweb_env.agent.observation_edits_message`: long tasks' episodes fit the
            completion budget), or `"actions"`: a prompt of its own each turn, the latest page whole and the actions
            so far; every turn is then a row of the update with its episode's advantage
            (`dynaweb_trainer.turn_rows`). Train, evaluate and SFT a policy with the same value.
        max_turn_tokens (`int`, *optional*, defaults to `256`):
            Token budget of one policy turn.
        use_engine (`bool`, *optional*, defaults to `False`):
            Generate policy rollouts with the CTranslate2 engine on the CPU, as TRL does with vLLM: the merged
            policy is re-converted after every optimizer step and the engine's sampling log-probs feed TRL's
            importance-sampling correction (see `dynaweb_trainer.engine_policy`). Needs `dynaweb[engine]`.
        engine_quantization (`str`, *optional*, defaults to `"int8"`):
            Weight type of the policy on the engine (`"float32"` matches torch most closely).
        use_peft (`bool`, *optional*, defaults to `True`):
            Train a LoRA adapter (peft) instead of all weights (flag also `--use_lora`). The LoRA fields are
            TRL's `ModelConfig` names; the adapter is built by `trl.get_peft_config`.
        lora_r (`int`, *optional*, defaults to `16`), lora_alpha (`int`, *optional*, defaults to `32`),
        lora_dropout (`float`, *optional*, defaults to `0.05`):
            LoRA rank, scale and dropout.
        lora_target_modules (`list[str]`, *optional*, defaults to `["all-linear"]`):
            Modules LoRA adapts (`all-linear` or module names such as `q_proj v_proj`).

        bf16 (`bool` or `None`, *optional*, defaults to `None`):
            Unset: on when a bf16-capable GPU is present (Table 3: bfloat16), off on CPU.

        > Run

        resume (`bool`, *optional*, defaults to `False`):
            Resume from the last `checkpoint-*` in `output_dir` (or from `resume_from_checkpoint` if set).
        stop_after_step (`int` or `None`, *optional*, defaults to `None`):
            Save `checkpoint-<stop_after_step>` and stop there, short of `max_steps`, without the final model or
            `summary.json`: a later run with `resume` goes on from it. Trains a learning curve's early points
            first without changing the run (its schedule still ends at `max_steps`).
        save_episodes (`bool`, *optional*, defaults to `True`):
            Append every training episode (dreams with the judge's reasoning, real episodes, expert replays)
            to `output_dir/episodes.jsonl` as trajectory records, tagged with the update they trained
            (:mod:`dynaweb_trainer.episode_log`).
        memory_check (`bool`, *optional*, defaults to `True`):
            Estimate the run's peak memory from its budgets before loading anything
            (:func:`~dynaweb_trainer.memory.estimate_training_memory`) and refuse it, naming the flags that bring
            it down, when it exceeds the memory available.
    """

    # -- GSPO defaults (differ from GRPOConfig) --------------------------------------------------
    importance_sampling_level: str = field(
        default="sequence",
        metadata={"help": "'sequence' is GSPO (paper eq. 9): one ratio per episode over the policy's own tokens."},
    )
    loss_type: str = field(
        default="grpo", metadata={"help": "Per-sequence normalised loss; with sequence-level ratios it is eq. 8."}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient (the paper disables KL)."})
    epsilon: float = field(default=3e-4, metadata={"help": "Lower clip range of the sequence ratio (GSPO paper)."})
    epsilon_high: float | None = field(
        default=4e-4, metadata={"help": "Upper clip range of the sequence ratio (GSPO paper)."}
    )
    num_generations: int | None = field(default=8, metadata={"help": "Group size G per task query (Table 3: 8)."})
    temperature: float = field(default=0.7, metadata={"help": "Policy rollout temperature (Table 3: 0.7)."})
    top_p: float = field(default=0.9, metadata={"help": "Policy rollout top-p (Table 3: 0.9)."})
    learning_rate: float = field(default=1e-6, metadata={"help": "Policy learning rate (Table 3: 1e-6)."})
    max_completion_length: int | None = field(
        default=16000,
        metadata={"help": "Cap on an episode's completion tokens (all turns after the first prompt)."},
    )
    output_dir: str | None = field(
        default="outputs/dynaweb-gspo", metadata={"help": "Where checkpoints and the run summary are written."}
    )

    # -- environment -----------------------------------------------------------------------------
    environment: str = field(
        default="dream",
        metadata={
            "help": "Training environment: dream, real or mix.",
            "choices": list(ENVIRONMENTS),
            "aliases": ["--env"],
        },
    )
    real_frac: float = field(default=0.5, metadata={"help": "With --env mix: fraction of task queries run for real."})
    num_envs: int | None = field(
        default=None, metadata={"help": "Parallel episodes per vector env (default: the whole generation batch)."}
    )
    tasks: list[str] | None = field(
        default=None, metadata={"help": "Task ids or suites to train on (default: every task of the start states)."}
    )
    task_order: str = field(
        default="shuffled",
        metadata={
            "help": "Task-query order: shuffled, or balanced (every task once before any task again).",
            "choices": list(TASK_ORDERS),
        },
    )
    real_task_seeds: int = field(default=16, metadata={"help": "Task seeds per task for the real environment."})
    agent_max_steps: int = field(default=10, metadata={"help": "Most policy turns per episode (Table 3: 10)."})
    dream_resamples: int = field(
        default=0,
        metadata={
            "help": "Dream a group again from a new start state, up to this many times, while all its dreams earn "
            "the same reward (dynamic sampling in imagination; 0: off)."
        },
    )

    # -- expert interleaving ---------------------------------------------------------------------
    expert_frac: float = field(
        default=0.5, metadata={"help": "Probability a rollout slot is replaced by an expert trajectory (paper: 0.5)."}
    )
    expert_trajectories: str | None = field(
        default=None,
        metadata={"help": "Expert trajectory JSONL (file or dir) (default: the experts of --start-states)."},
    )

    # -- policy ----------------------------------------------------------------------------------
    policy: str = field(default="smollm2-135m", metadata={"help": "Policy model: embedded name, local path or hub id."})
    response_style: str = field(
        default="compact", metadata={"help": "Policy response format.", "choices": list(RESPONSE_STYLES)}
    )
    system_prompt: str | None = field(
        default=None,
        metadata={"help": "Policy system prompt override (default: the paper's prompt for response_style)."},
    )
    max_axtree_chars: int = field(
        default=4000, metadata={"help": "Cut trees in policy prompts to this many characters (0: never)."}
    )
    page_history: str = field(
        default="full",
        metadata={"help": PAGE_HISTORY_HELP, "choices": list(PAGE_HISTORIES)},
    )
    max_turn_tokens: int = field(default=256, metadata={"help": "Token budget of one policy turn."})
    use_engine: bool = field(
        default=False,
        metadata={
            "help": "Roll out the policy on the CTranslate2 engine (CPU), re-converted after every optimizer step, "
            "with TRL's importance-sampling correction of the engine's sampling log-probs (needs dynaweb[engine])."
        },
    )
    engine_quantization: str = field(
        default="int8", metadata={"help": "Weight type of the policy on the engine (int8, float32, ...)."}
    )

    # -- run -------------------------------------------------------------------------------------
    resume: bool = field(
        default=False, metadata={"help": "Resume from the last checkpoint in output_dir (or resume_from_checkpoint)."}
    )
    stop_after_step: int | None = field(
        default=None,
        metadata={"help": "Save this update's checkpoint and stop there, short of max_steps (resume goes on)."},
    )
    save_episodes: bool = field(
        default=True, metadata={"help": "Append every training episode to output_dir/episodes.jsonl."}
    )
    memory_check: bool = field(
        default=True,
        metadata={"help": "Refuse, before loading anything, a run whose estimated peak memory exceeds free memory."},
    )

    def __post_init__(self):
        if self.tasks is not None:
            self.tasks = expand_tasks(self.tasks)
        if self.environment not in ENVIRONMENTS:
            raise ValueError(f"environment must be one of {ENVIRONMENTS}, got {self.environment!r}")
        if self.task_order not in TASK_ORDERS:
            raise ValueError(f"task_order must be one of {TASK_ORDERS}, got {self.task_order!r}")
        if self.task_order == "balanced":
            self.shuffle_dataset = False  # the order is the point
        if self.response_style not in RESPONSE_STYLES:
            raise ValueError(f"response_style must be one of {RESPONSE_STYLES}, got {self.response_style!r}")
        for name in ("real_frac", "expert_frac"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        _require_positive(self, ("agent_max_steps", "max_turn_tokens", "real_task_seeds"))
        if self.stop_after_step is not None:
            _require_positive(self, ("stop_after_step",))
        if (
            isinstance(self.dream_resamples, bool)
            or not isinstance(self.dream_resamples, int)
            or self.dream_resamples < 0
        ):
            raise ValueError(f"dream_resamples must be an integer >= 0, got {self.dream_resamples!r}")
        self.validate_dream_settings()
        self.validate_lora()
        if self.num_envs is not None and self.num_envs < 1 or self.max_axtree_chars < 0:
            raise ValueError(
                f"num_envs must be >= 1 or None and max_axtree_chars >= 0, got {self.num_envs}, {self.max_axtree_chars}"
            )
        check_page_history(self.page_history)
        if self.max_completion_length is not None and self.max_completion_length < self.max_turn_tokens:
            raise ValueError(
                f"max_completion_length ({self.max_completion_length}) must be >= max_turn_tokens "
                f"({self.max_turn_tokens}): an episode must fit at least one turn"
            )
        if self.importance_sampling_level != "sequence" or self.loss_type != "grpo" or self.beta != 0.0:
            # Allowed (for ablations), but then this is not the paper's GSPO: say so once.
            import warnings

            warnings.warn(
                f"GSPOConfig with importance_sampling_level={self.importance_sampling_level!r}, "
                f"loss_type={self.loss_type!r}, beta={self.beta}: not the paper's GSPO (sequence, grpo, 0.0)",
                stacklevel=2,
            )
        self.use_cpu = self.use_cpu or _multi_process_without_accelerator()
        if self.bf16 is None and not self.fp16:
            # TRL turns bf16 on when unset; on a machine without an accelerator that only slows training down.
            import torch

            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        super().__post_init__()


def _multi_process_without_accelerator() -> bool:
    """Whether this process is one of several (torchrun / ``accelerate launch``) on a machine without an accelerator.

    transformers sets up gloo data parallelism on CPUs only when ``use_cpu`` is set; without it each
    process would silently train its own copy of the model, with its own data, and never sync.
    """
    import os

    import torch

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    accelerator = getattr(torch, "accelerator", None)
    return not (accelerator.is_available() if accelerator is not None else torch.cuda.is_available())


def preset_path(name: str) -> Path:
    """The YAML file of a named preset (``ValueError`` listing the known ones)."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(known)}")
    return path


def available_presets() -> list[str]:
    """Names of the shipped presets."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


__all__ = ["ENVIRONMENTS", "RESPONSE_STYLES", "PRESETS_DIR", "GSPOConfig", "preset_path", "available_presets"]
