"""Success rate of a web policy on real-browser tasks: ``dynaweb-eval``.

Any policy :func:`~dynaweb_trainer.policy.load_policy` understands (an embedded model, an SFT or RL
output directory, a LoRA adapter, an OpenAI-compatible server, or the scripted experts) runs every
``task x seed`` episode on ``RealWeb-v0`` with ``num_envs`` browsers in parallel (an async vector
env, one browser process each). Episodes go through :func:`~dynaweb_trainer.rollout.run_episodes`,
the same loop RL training uses, so the policy answers all live episodes in one batched call per step.
Decoding is greedy by default.

Command line::

    dynaweb-eval --policy expert --tasks miniwob.click-button miniwob.enter-text --seeds 100-101
    dynaweb-eval --policy runs/sft --seeds 100-149 --num-envs 4 --output results/sft_eval.json
    dynaweb-eval --policy smollm2-135m --temperature 0.7 --config eval.yaml

It prints a per-task table and writes JSON: the summary (success rate, mean reward, mean steps), the
per-task table, every episode (task, seed, success, steps, actions, responses, errors), throughput
counters, and the exact command and configuration.

An interrupted evaluation resumes: each finished episode is appended to ``<output>.partial.jsonl`` as it
ends, and running the same command again evaluates only the ``task x seed`` episodes not in it (the file is
removed once the JSON is written). A partial file of a different configuration is refused, not mixed in.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dynaweb_env.agent import PAGE_HISTORIES, PAGE_HISTORY_HELP, check_page_history
from dynaweb_env.data.jsonl import CorruptRecordWarning, append_jsonl, iter_jsonl_lines
from dynaweb_env.data.tasks import (  # noqa: F401 - MULTISTEP_TASKS, TASK_SUITES: their old import path
    DEFAULT_TASKS,
    MULTISTEP_TASKS,
    TASK_SUITES,
    expand_tasks,
    parse_seeds,
)
from dynaweb_env.llm.base import SamplingParams

from .policy import EXPERT_POLICY, LoadedPolicy, PolicyLoadError, load_policy


@dataclass
class EvalConfig:
    r"""Configuration of :func:`evaluate_policy` (and the ``dynaweb-eval`` command).

    Parameters:
        policy (`str`, *optional*, defaults to `"smollm2-135m"`):
            What to evaluate: `"expert"`, an embedded model name, an SFT/RL output or checkpoint directory, a LoRA
            adapter directory, or a backend spec such as `"openai:<model>@http://host:8000/v1"`.
        tasks (`list[str]`, *optional*):
            BrowserGym task ids, or suite names that stand for their tasks (`"long"`; [`expand_tasks`]). Defaults
            to the MiniWoB++ tasks with scripted experts ([`DEFAULT_TASKS`]).
        seeds (`str`, *optional*, defaults to `"100-109"`):
            Task seeds, e.g. `"100-149"` or `"1,5,9"`; every task runs with every seed. The shipped expert
            demonstrations use low seeds, so the default range is held out from SFT data.
        num_envs (`int`, *optional*, defaults to `4`):
            Browsers run in parallel (each ~640 MB); the policy answers all of them in one batched call.
        max_steps (`int`, *optional*, defaults to `5`):
            Most policy turns per episode: `dynaweb-train`'s default (`agent_max_steps` of the `cpu-small` preset),
            so a policy is evaluated with the budgets it trained with (the paper's agent step limit is 10).
        temperature (`float`, *optional*, defaults to `0.0`):
            Sampling temperature; `0` decodes greedily.
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus mass when sampling.
        max_new_tokens (`int`, *optional*, defaults to `64`):
            Token budget of one policy turn (`dynaweb-train`'s `max_turn_tokens`).
        max_axtree_chars (`int`, *optional*, defaults to `1500`):
            Cut accessibility trees in prompts to this many characters (`0`: never); `dynaweb-train`'s default, as
            the policy must see what it trained on.
        page_history (`str`, *optional*, defaults to `"full"`):
            Pages after the first whole, as edits of the page before (`"edits"`), or a prompt of its own each turn
            (`"actions"`): the policy's training value.
        response_style (`str`, *optional*, defaults to `"compact"`):
            System prompt / response format the policy was trained with (`"compact"` or `"paper"`).
        seed (`int`, *optional*, defaults to `0`):
            Seeds the sampling of every turn (irrelevant when greedy).
        output (`str`, *optional*, defaults to `"eval_results.json"`):
            Where the JSON results go.
        tokenizer (`str`, *optional*):
            Tokenizer for policies without a local one (servers, experts); defaults to the embedded model's.
        device (`str`, *optional*):
            Device of a local model (default: CUDA if available, else CPU).
        max_batch_size (`int`, *optional*, defaults to `16`):
            Most sequences a local model decodes together.
        headless (`bool`, *optional*, defaults to `True`):
            Run the browsers without windows.
        plan (`int`, *optional*, defaults to `0`):
            Plan each real step with the world model ([`~dynaweb_trainer.planning.PlanningPolicy`]): `K` candidate
            actions (the policy's own answer and `K - 1` samples), each dreamed and judged, the best one run. `0`: no
            planning.
        plan_depth (`int`, *optional*, defaults to `1`):
            Dream steps per candidate (`d`): the policy goes on in each dream for `d - 1` more steps.
        plan_temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature of the `K - 1` extra candidates.
        plan_world_model (`str`, *optional*):
            World model that dreams the candidates (default: DreamWeb-v0's, the shipped one).
        plan_judge (`str`, *optional*):
            Judge that scores the dreams (default: DreamWeb-v0's, the shipped trained judge of `tasks`).
        plan_progress_weight (`float`, *optional*, defaults to `0.5`):
            A dream that has not ended scores at least this times its objective progress
            ([`~dynaweb_trainer.planning.score`]); `0`: the judge's probability alone. The default is the measured
            best ([`~dynaweb_trainer.planning.DEFAULT_PROGRESS_WEIGHT`]).
    """

    policy: str = field(default="smollm2-135m", metadata={"help": "expert, model name, checkpoint/adapter dir, spec."})
    tasks: list[str] = field(
        default_factory=lambda: list(DEFAULT_TASKS),
        metadata={"help": "BrowserGym task ids or suites (small, multistep, long)."},
    )
    seeds: str = field(default="100-109", metadata={"help": "Task seeds, e.g. 100-149 or 1,5,9."})
    num_envs: int = field(default=4, metadata={"help": "Browsers in parallel."})
    max_steps: int = field(default=5, metadata={"help": "Most policy turns per episode (training's default)."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature (0: greedy)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus mass when sampling."})
    max_new_tokens: int = field(default=64, metadata={"help": "Token budget of one policy turn (training's default)."})
    max_axtree_chars: int = field(
        default=1500, metadata={"help": "Cut prompt trees to this many characters (training's default)."}
    )
    page_history: str = field(
        default="full",
        metadata={"help": PAGE_HISTORY_HELP, "choices": list(PAGE_HISTORIES)},
    )
    response_style: str = field(
        default="compact",
        metadata={"help": "Policy prompt style.", "choices": ["compact", "paper"]},
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    output: str = field(default="eval_results.json", metadata={"help": "Where the JSON results go."})
    tokenizer: str | None = field(default=None, metadata={"help": "Tokenizer for server and expert policies."})
    device: str | None = field(default=None, metadata={"help": "Device of a local model."})
    max_batch_size: int = field(default=16, metadata={"help": "Most sequences decoded together."})
    headless: bool = field(
        default=True,
        metadata={"help": "Browsers without windows (the default); --no-headless opens a window per browser to watch."},
    )
    plan: int = field(default=0, metadata={"help": "Plan with the world model: K candidates a step (0: off)."})
    plan_depth: int = field(default=1, metadata={"help": "Dream steps per candidate when planning."})
    plan_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of extra candidates."})
    plan_world_model: str | None = field(default=None, metadata={"help": "World model of planning (default: shipped)."})
    plan_judge: str | None = field(
        default=None, metadata={"help": "Judge of planning (default: the trained judge of the tasks)."}
    )
    plan_progress_weight: float = field(
        default=0.5, metadata={"help": "Score floor of an unfinished dream per unit of objective progress (0: off)."}
    )

    def __post_init__(self) -> None:
        self.tasks = expand_tasks(self.tasks)
        parse_seeds(self.seeds)  # fail early on a bad specification
        for name in ("num_envs", "max_steps", "max_new_tokens", "max_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {self.max_axtree_chars}")
        check_page_history(self.page_history)
        if self.response_style not in ("compact", "paper"):
            raise ValueError(f"response_style must be 'compact' or 'paper', got {self.response_style!r}")
        SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p)
        if self.plan < 0 or self.plan == 1:
            raise ValueError(f"plan must be 0 (no planning) or a number of candidates >= 2, got {self.plan}")
        if self.plan_depth < 1:
            raise ValueError(f"plan_depth must be >= 1, got {self.plan_depth}")
        if not 0 <= self.plan_progress_weight < 1:
            raise ValueError(f"plan_progress_weight must be in [0, 1), got {self.plan_progress_weight}")
        if self.plan and not self.plan_temperature > 0:
            raise ValueError(f"plan_temperature must be > 0 (greedy samples repeat), got {self.plan_temperature}")

    @property
    def seed_list(self) -> list[int]:
        return parse_seeds(self.seeds)

    def start_options(self) -> list[dict[str, Any]]:
        """Reset options of every episode: each task with each seed, task-major."""
        return [{"task": task, "task_seed": seed} for task in self.tasks for seed in self.seed_list]


def make_real_vector_env(config: EvalConfig, num_envs: int) -> Any:
    """``RealWeb-v0`` with ``num_envs`` browsers on the configuration's tasks (:mod:`~dynaweb_trainer.env_factory`)."""
    from .env_factory import make_real_vector_env as make_env

    return make_env(config.tasks, num_envs, max_steps=config.max_steps, headless=config.headless)


def episode_record(result: Any) -> dict[str, Any]:
    """The JSON record of one :class:`~dynaweb_trainer.rollout.EpisodeResult`."""
    observations = result.observations[1:]
    return {
        "task_id": result.task_id,
        "task_seed": result.options.get("task_seed"),
        "success": bool(result.success),
        "reward": float(result.reward),
        "steps": int(result.num_steps),
        "end_reason": result.end_reason,
        "actions": list(result.actions),
        "responses": list(result.responses),
        "action_errors": [observation.get("last_action_error", "") for observation in observations],
        "final_url": result.observations[-1].get("url", "") if result.observations else "",
        "env_error": str(result.final_info.get("error", "")),
    }


def summarize_records(records: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Overall and per-task success rate, mean reward and mean steps of episode records."""

    def stats(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        count = len(group)
        return {
            "episodes": count,
            "successes": sum(record["success"] for record in group),
            "success_rate": sum(record["success"] for record in group) / count if count else 0.0,
            "mean_reward": sum(record["reward"] for record in group) / count if count else 0.0,
            "mean_steps": sum(record["steps"] for record in group) / count if count else 0.0,
            "invalid_action_rate": _invalid_rate(group),
        }

    tasks: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        tasks.setdefault(record["task_id"], []).append(record)
    return stats(records), {task: stats(group) for task, group in tasks.items()}


def _invalid_rate(records: Sequence[dict[str, Any]]) -> float:
    errors = [error for record in records for error in record["action_errors"]]
    return sum(error.startswith("invalid action") for error in errors) / len(errors) if errors else 0.0


def format_table(summary: dict[str, Any], per_task: dict[str, dict[str, Any]]) -> str:
    """The per-task results as a fixed-width text table, with an overall row."""
    width = max([len("task"), len("all"), *map(len, per_task)])
    lines = [f"{'task':<{width}}  episodes  success  mean steps  invalid actions"]
    rows = [*per_task.items(), ("all", summary)]
    for index, (task, row) in enumerate(rows):
        if index == len(rows) - 1:
            lines.append("-" * len(lines[0]))
        lines.append(
            f"{task:<{width}}  {row['episodes']:>8}  {row['success_rate']:>7.2f}  {row['mean_steps']:>10.1f}  "
            f"{row['invalid_action_rate']:>15.2f}"
        )
    return "\n".join(lines)


#: Configuration fields that do not change an episode's result: a partial file of other values still resumes.
_RESUME_IGNORES = ("tasks", "seeds", "output", "num_envs", "max_batch_size", "headless", "device")


def partial_results_path(output: str | os.PathLike[str]) -> Path:
    """Where :func:`evaluate_policy` saves finished episodes while it runs (``<output>.partial.jsonl``)."""
    output = Path(output)
    return output.with_name(output.name + ".partial.jsonl")


def _resume_header(config: EvalConfig) -> dict[str, Any]:
    return {"resume_config": {k: v for k, v in asdict(config).items() if k not in _RESUME_IGNORES}}


def same_settings(recorded: dict[str, Any], config: EvalConfig, ignore: Sequence[str] = _RESUME_IGNORES) -> bool:
    """Whether a recorded configuration (a report's ``config``, a partial file's header) is ``config``'s, fields in
    ``ignore`` aside. A field the record lacks counts as its default: a setting added to :class:`EvalConfig` after
    the record was written did not exist then, so the record ran with its default."""
    defaults, wanted = (json.loads(json.dumps(asdict(c))) for c in (EvalConfig(), config))
    return {**defaults, **recorded, **dict.fromkeys(ignore)} == {**wanted, **dict.fromkeys(ignore)}


def load_partial_results(config: EvalConfig) -> dict[tuple[str, int], dict[str, Any]]:
    """Episode records an interrupted run of the same configuration saved, keyed by ``(task, seed)``.

    Corrupt lines (a run killed mid-write) are skipped with a warning; their episodes run again.

    Raises:
        ValueError: If the partial file belongs to a different configuration.
    """
    path = partial_results_path(config.output)
    if not path.is_file():
        return {}
    lines = iter_jsonl_lines(path, on_error="skip")
    first = next(lines, None)
    header = first.record.get("resume_config") if first is not None and first.number == 1 else None
    if not isinstance(header, dict) or not same_settings(header, config):
        raise ValueError(
            f"{path} holds episodes of another evaluation configuration than this one; delete it to start over "
            "or choose another --output"
        )
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for line in lines:
        try:
            records[(str(line.record["task_id"]), int(line.record["task_seed"]))] = line.record
        except (KeyError, TypeError, ValueError):
            warnings.warn(
                f"skipping corrupt record: {path}:{line.number}: no task_id and task_seed; that episode runs again",
                CorruptRecordWarning,
                stacklevel=2,
            )
    return records


def evaluate_policy(
    config: EvalConfig,
    policy: LoadedPolicy | None = None,
    vector_env: Any = None,
    command: str | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Run every ``task x seed`` episode with the policy and write the results JSON.

    Args:
        config: What to evaluate and how.
        policy: An already-loaded policy (default: ``load_policy(config.policy, ...)``).
        vector_env: A vector env to use instead of building ``RealWeb-v0`` (it is not closed here).
        command: The command line to record (default: this process's ``sys.argv``).
        show_progress: Show a tqdm bar over episodes.

    Returns:
        The results (what the JSON file holds).
    """
    from tqdm.auto import tqdm

    from dynaweb_env.agent import policy_system_prompt

    from .encoding import EpisodeEncoder
    from .rollout import RolloutStats, run_episodes

    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    start = time.perf_counter()
    output = Path(config.output)
    output.parent.mkdir(parents=True, exist_ok=True)  # fail before the browsers start, not after
    if policy is None:
        policy = load_policy(config.policy, config.tokenizer, config.device, config.max_batch_size)
    encoder = EpisodeEncoder(
        policy.tokenizer,
        policy_system_prompt(config.response_style),
        config.max_axtree_chars,  # type: ignore[arg-type]
        config.page_history,
    )
    planner = make_planner(config, policy.policy, encoder) if config.plan else None
    options = config.start_options()
    done = load_partial_results(config)
    todo = [o for o in options if (o["task"], o["task_seed"]) not in done]
    partial = partial_results_path(output)
    if not partial.is_file():
        append_jsonl(partial, [_resume_header(config)])
    owns_env = vector_env is None and bool(todo)
    if owns_env:
        vector_env = make_real_vector_env(config, min(config.num_envs, len(todo)))
    stats = RolloutStats()
    fresh: dict[tuple[str, int], dict[str, Any]] = {}

    def save(_: int, result: Any) -> None:
        record = fresh[(result.options["task"], result.options["task_seed"])] = episode_record(result)
        if planner is not None:
            record["plans"] = planner.pop_plans(result.options["task"], result.options["task_seed"])
        append_jsonl(partial, [record])  # an interrupted run may have cut the last record short: repaired first

    try:
        sampling = SamplingParams(
            max_new_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p
        )
        progress = {"desc": f"eval {policy.spec}", "unit": "episode", "disable": not show_progress}
        with tqdm(total=len(options), initial=len(options) - len(todo), **progress) as bar:
            if todo:
                run_episodes(
                    vector_env,
                    policy.policy if planner is None else planner,
                    encoder,
                    todo,
                    sampling,
                    max_steps=config.max_steps,
                    seed=config.seed,
                    stats=stats,
                    progress=bar,
                    on_episode=save,
                )
    finally:
        if owns_env:
            vector_env.close()

    done.update(fresh)
    records = [done[(o["task"], o["task_seed"])] for o in options]
    summary, per_task = summarize_records(records)
    report = {
        "summary": summary,
        "per_task": per_task,
        "policy": {"spec": policy.spec, "kind": policy.kind, "name": policy.name, **policy.details},
        "command": command or shlex.join(sys.argv),
        "config": asdict(config),
        "started_at": started_at,
        "wall_seconds": round(time.perf_counter() - start, 2),
        "num_envs": int(vector_env.num_envs) if vector_env is not None else 0,
        "resumed_episodes": len(options) - len(todo),
        "rollout_stats": stats.to_dict(),
        "cost_per_real_step": step_cost(stats, planner),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "episodes": records,
    }
    temporary = output.with_name(output.name + ".tmp")
    temporary.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, output)
    partial.unlink(missing_ok=True)
    return report


def make_planner(config: EvalConfig, policy: Any, encoder: Any) -> Any:
    """The configuration's :class:`~dynaweb_trainer.planning.PlanningPolicy` around ``policy``."""
    from dynaweb_env.envs.lookahead import Lookahead

    from .planning import PlanningPolicy

    # Loaded before any page opens: MiniWoB++'s episode clock would run while the models load.
    lookahead = Lookahead(config.plan_world_model, config.plan_judge, depth=config.plan_depth, tasks=config.tasks)
    lookahead.load()
    return PlanningPolicy(
        policy, encoder, lookahead, config.plan, proposal_temperature=config.plan_temperature,
        progress_weight=config.plan_progress_weight,
    )  # fmt: skip


def step_cost(stats: Any, planner: Any = None) -> dict[str, Any]:
    """Cost per real step of this run (the episodes run now, not resumed ones): wall seconds, policy calls, and with
    planning the world-model and judge calls, tokens and seconds (``planning``: the totals)."""
    steps = max(stats.env_steps, 1)
    cost: dict[str, Any] = {
        "real_steps": stats.env_steps,
        "seconds": round(stats.wall_seconds / steps, 3),
        "policy_seconds": round(stats.generate_seconds / steps, 3),
        "browser_seconds": round(stats.step_seconds / steps, 3),
        "world_model_calls": 0.0, "world_model_tokens": 0.0, "world_model_seconds": 0.0,
        "judge_calls": 0.0, "judge_tokens": 0.0, "judge_seconds": 0.0,
    }  # fmt: skip
    if planner is not None:
        planning = planner.stats.to_dict(planner.lookahead)
        cost.update({key: planning["per_real_step"][key] for key in cost if key in planning["per_real_step"]})
        cost["candidates"] = planning["per_real_step"]["candidates"]
        cost["planning"] = planning
    return cost


def parse_config(argv: Sequence[str] | None = None) -> EvalConfig:
    """Parse command-line arguments (``--config x.yaml`` gives defaults that flags override)."""
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags

    parser = word_negated_flags(TrlParser(EvalConfig, prog="dynaweb-eval"))
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-eval``: evaluate, print the per-task table, write the JSON.

    Returns:
        ``0`` on success; ``2`` (with the reason on stderr) when the policy or configuration is unusable.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(argv)
        report = evaluate_policy(config, command=shlex.join(["dynaweb-eval", *argv]))
    except (PolicyLoadError, ValueError) as error:
        print(f"dynaweb-eval: error: {error}", file=sys.stderr)
        return 2
    print(format_table(report["summary"], report["per_task"]))
    kind = "scripted experts" if report["policy"]["spec"] == EXPERT_POLICY else report["policy"]["kind"]
    print(
        f"policy {report['policy']['spec']} ({kind}): success rate {report['summary']['success_rate']:.3f} over "
        f"{report['summary']['episodes']} episodes in {report['wall_seconds']:.0f} s; results in {config.output}"
    )
    return 0


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()
