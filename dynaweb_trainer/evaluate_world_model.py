"""``dynaweb-eval-wm``: world-model fidelity on held-out real transitions, several world models side by side.

For every world model (and output mode) on the same held-out trajectories (default: the shipped data's
``test`` split) it measures:

- **one step**, on every real transition ``(o_t, a_t, o_{t+1})``: format validity (parsed with no error and
  no fallback), precision / recall / F1 of the predicted next tree's node lines against the real ones
  (multisets of :func:`~dynaweb_env.observation.axtree_nodes`: whitespace-normalised, bids kept), *strict* F1
  (the same F1 with every invalid output scored 0), exact match,
  URL accuracy, terminal accuracy (``[Episode ended]`` vs the real end of episode), tokens generated and
  latency per transition (one batched ``generate`` call per batch; latency = batch time / batch size);
- **multi-step drift**: from the first state of each trajectory the model is fed its *own* predictions with
  the real actions; the prediction at depth ``d`` is scored against the real page ``d`` steps ahead
  (``d = 1..max_depth``), one batched call per depth;
- **judge accuracy** against real task rewards: the model as :class:`~dynaweb_env.world_model.TrajectoryJudge`
  (as DreamWeb-v0 uses it by default) judges the real trajectories
  (:func:`~dynaweb_env.world_model.judge_cases.judge_cases`): each as recorded with its real reward, and each success
  *truncated* before its last action as a failure (its final page is the one before that action, reward 0).
  Besides accuracy, the share of real successes and of real failures judged right (``judge_success_recall``,
  ``judge_failure_recall``): a judge that always answers the same scores about 0.5 and gives GSPO no signal.

``copy`` is a reference world model that predicts "nothing changes" (the current page), without an LLM.

Why two F1s: ``f1`` scores the tree a dream would continue from. When an output is malformed the parser keeps the
current page (a dream must go on), so a model that never writes a valid output scores exactly what ``copy``
scores. ``strict_f1`` scores what the model itself predicted: an output that is malformed, or that the parser
only read by falling back to the current page, counts 0. Compare world models on ``strict_f1``, and against
``copy`` on either.

Each measure is also reported per task (``summary["per_task"]``): strict F1 at every depth, terminal accuracy and
the judge's recalls of one task, so that a long task is not hidden by the short ones' means.

Command line::

    dynaweb-eval-wm --world-models copy tiny-random --limit 2 --max-depth 2 --max-new-tokens 16
    dynaweb-eval-wm --world-models smollm2-135m-wm-patch --data dynaweb_env/data/miniwob-all/test --tasks long \
        --max-depth 5                                       # the long tasks, drift up to 5 steps
    dynaweb-eval-wm --world-models smollm2-135m runs/wm-smollm2 --output-modes tree patch --limit 4
    dynaweb-eval-wm --world-models smollm2-135m smollm2-135m-wm --judge-only

Writes ``--output`` (JSON with the exact command, the summary table and per-transition records) and a PNG
plot of strict F1 vs dream depth beside it.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.tasks import expand_tasks
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.models import world_model_output_mode
from dynaweb_env.world_model.consistency import write_typed_text_in
from dynaweb_env.world_model.judge import TrajectoryJudge
from dynaweb_env.world_model.judge_cases import judge_cases
from dynaweb_env.world_model.model import OUTPUT_MODES, WebWorldModel, WorldModelRequest, is_clean
from dynaweb_env.world_model.parsing import WorldModelPrediction

from .world_model_scores import format_table, plot_drift, summarise, tree_scores
from .world_model_sft import is_terminal_transition, load_trajectories

#: Settings recorded in the report (besides the seed).
_SETTINGS = (
    "max_depth", "max_new_tokens", "temperature", "batch_size", "max_axtree_chars", "limit", "max_per_task",
    "keep_typed_text", "invalid_retries", "shard", "judge_objective_check",
)  # fmt: skip
#: The reference world model that copies the current page.
COPY_MODEL = "copy"
DEFAULT_OUTPUT = "runs/eval-wm/wm_eval.json"


class _CopyWorldModel:
    """Predicts that the page does not change (a floor every learned world model should beat)."""

    output_mode = "tree"

    def predict(self, requests: Sequence[WorldModelRequest], seed: int | None = None) -> list[WorldModelPrediction]:
        return [WorldModelPrediction("no change", r.axtree, r.url) for r in requests]


def _request(trajectory: Trajectory, index: int, url: str, axtree: str) -> WorldModelRequest:
    previous = trajectory.steps[index - 1].action if index > 0 else ""
    return WorldModelRequest(trajectory.goal, url, axtree, trajectory.steps[index].action, previous)


def _timed_predict(world_model: Any, requests: list[WorldModelRequest], batch_size: int, seed: int, desc: str):
    """Predict in batches (one backend call each) with a progress bar; per-request seconds and tokens."""
    from tqdm.auto import tqdm

    predictions, seconds, tokens = [], [], []
    backend = getattr(world_model, "backend", None)
    bar = tqdm(total=len(requests), desc=desc, unit="tr", file=sys.stderr, leave=False)
    for start in range(0, len(requests), batch_size):
        batch = requests[start : start + batch_size]
        counted = _TokenCounter(backend) if backend is not None else None
        if counted is not None:
            world_model.backend = counted
        began = time.perf_counter()
        try:
            predictions.extend(world_model.predict(batch, seed=seed + start))
        finally:
            if counted is not None:
                world_model.backend = backend
        elapsed = time.perf_counter() - began
        seconds.extend([elapsed / len(batch)] * len(batch))
        tokens.extend(counted.tokens if counted is not None else [0] * len(batch))
        bar.update(len(batch))
    bar.close()
    return predictions, seconds, tokens


class _TokenCounter:
    """Wraps a backend to record the completion tokens of each generation of its first call.

    Later calls are redraws of malformed outputs (``invalid_retries``); their tokens are summed apart.
    """

    def __init__(self, backend: Any):
        self.backend, self.tokens, self.redraw_tokens = backend, None, 0
        self.model_name = getattr(backend, "model_name", type(backend).__name__)

    def generate(self, conversations, params):
        generations = self.backend.generate(conversations, params)
        counts = [len(g.completion_ids) for g in generations]
        if self.tokens is None:
            self.tokens = counts
        else:
            self.redraw_tokens += sum(counts)
        return generations


def evaluate_one_step(
    world_model: Any, trajectories: Sequence[Trajectory], batch_size: int, seed: int, label: str
) -> tuple[list[dict], list[dict]]:
    """Each real transition's scores, as predicted and as ``DreamWeb-v0`` with ``keep_typed_text`` shows the same
    prediction (the typed text the model left out written in; no other generation)."""
    transitions = [(t, i) for t in trajectories for i in range(len(t.steps) - 1) if t.steps[i].action.strip()]
    requests = [_request(t, i, t.steps[i].url, t.steps[i].axtree) for t, i in transitions]
    predictions, seconds, tokens = _timed_predict(world_model, requests, batch_size, seed, f"{label}: one step")
    records, kept = [], []
    for (trajectory, index), request, prediction, second, token in zip(
        transitions, requests, predictions, seconds, tokens, strict=True
    ):
        real = trajectory.steps[index + 1]
        record = {
            "trajectory": trajectory.id,
            "task": trajectory.task_id,
            "index": index,
            "valid": is_clean(prediction),
            **tree_scores(prediction.axtree, real.axtree),
            "url_correct": prediction.url.strip() == real.url.strip(),
            "terminal_correct": prediction.terminal == is_terminal_transition(trajectory, index),
            "tokens": token,
            "seconds": round(second, 3),
            "error": prediction.error,
        }
        records.append(record)
        page, left_out = write_typed_text_in(request.axtree, request.action, prediction.axtree)
        if left_out and prediction.url == request.url:
            written_in = [item.describe() for item in left_out]
            kept.append({**record, **tree_scores(page, real.axtree), "written_in": written_in})
        else:
            kept.append(record)
    return records, kept


def evaluate_drift(
    world_model: Any, trajectories: Sequence[Trajectory], max_depth: int, batch_size: int, seed: int, label: str
) -> dict[int, list[dict[str, float]]]:
    """F1 / exact match at each dream depth, the model fed its own predictions along the real actions."""
    states = {t.id: (t.steps[0].url, t.steps[0].axtree) for t in trajectories}
    by_depth: dict[int, list[dict[str, float]]] = {}
    for depth in range(1, max_depth + 1):
        index = depth - 1
        alive = [t for t in trajectories if index + 1 < len(t.steps) and t.steps[index].action.strip()]
        if not alive:
            break
        requests = [_request(t, index, *states[t.id]) for t in alive]
        predictions, _, _ = _timed_predict(world_model, requests, batch_size, seed, f"{label}: depth {depth}")
        by_depth[depth] = []
        for trajectory, prediction in zip(alive, predictions, strict=True):
            states[trajectory.id] = (prediction.url, prediction.axtree)
            scores = tree_scores(prediction.axtree, trajectory.steps[index + 1].axtree)
            by_depth[depth].append({"task": trajectory.task_id, "valid": is_clean(prediction), **scores})
    return by_depth


def evaluate_judge(
    backend: Any,
    trajectories: Sequence[Trajectory],
    max_new_tokens: int,
    seed: int,
    prompt_style: str = "paper",
    early_final: bool = False,
    objective_check: bool = False,
):
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    judge = TrajectoryJudge(backend, sampling, prompt_style=prompt_style, objective_check=objective_check)
    tasks, cases = [], []
    for trajectory in trajectories:
        own = judge_cases([trajectory], early_final=early_final)
        tasks += [trajectory.task_id] * len(own)
        cases += own
    verdicts = judge.judge([request for request, _, _ in cases], seed=seed)
    return [
        {
            "trajectory": name,
            "task": task,
            "reward": reward,
            "verdict": verdict.reward,
            "correct": verdict.reward == (reward >= 0.5),
            "error": verdict.error,
        }
        for (_, reward, name), task, verdict in zip(cases, tasks, verdicts, strict=True)
    ]


def build_world_model(
    spec: str,
    output_mode: str,
    max_new_tokens: int,
    temperature: float,
    max_axtree_chars: int,
    invalid_retries: int = 0,
):
    if spec == COPY_MODEL:
        return _CopyWorldModel()
    from dynaweb_env.llm import make_backend
    from dynaweb_env.models import model_prompt_style

    sampling = SamplingParams(temperature=temperature, top_p=0.9, max_new_tokens=max_new_tokens)
    return WebWorldModel(
        make_backend(spec), sampling, max_axtree_chars=max_axtree_chars, output_mode=output_mode,
        prompt_style=model_prompt_style(spec), invalid_retries=invalid_retries,
    )  # fmt: skip


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` (``--shard``) as ``(K, N)``.

    Raises:
        ValueError: Unless ``0 <= K < N``.
    """
    shard, _, shards = text.partition("/")
    if not (shard.isdigit() and shards.isdigit() and int(shard) < int(shards)):
        raise ValueError(f"--shard must be K/N with 0 <= K < N, got {text!r}")
    return int(shard), int(shards)


def per_task_sample(trajectories: Sequence[Trajectory], max_per_task: int) -> list[Trajectory]:
    """The first ``max_per_task`` trajectories of each (task, collecting policy) pair, in file order (``0``: all).

    A sample that keeps every task and both the expert's and the exploration's trajectories, where ``--limit``
    keeps the first tasks of a file only.
    """
    if max_per_task <= 0:
        return list(trajectories)
    taken: Counter[tuple[str, str]] = Counter()
    sample = []
    for trajectory in trajectories:
        key = (trajectory.task_id, str(trajectory.metadata.get("policy", trajectory.source)))
        if taken[key] < max_per_task:
            taken[key] += 1
            sample.append(trajectory)
    return sample


def evaluate_world_models(args: WorldModelEvalConfig, command: str) -> dict[str, Any]:
    trajectories = load_trajectories(args.data, args.split)
    if args.tasks:
        trajectories = [t for t in trajectories if t.task_id in args.tasks]
    trajectories = per_task_sample(trajectories, args.max_per_task)[: args.limit or None]
    if not trajectories:
        raise ValueError(f"no trajectory of the tasks {args.tasks} in split {args.split!r} of {args.data}")
    shard, shards = parse_shard(args.shard)
    trajectories = trajectories[shard::shards]
    results: dict[str, dict[str, Any]] = {}
    for spec in args.world_models:
        # A trained world model is evaluated in the mode it was trained for; others in every requested mode.
        own_mode = world_model_output_mode(spec)
        modes = ["tree"] if spec == COPY_MODEL else [own_mode] if own_mode else args.output_modes
        for mode in modes:
            label = spec if len(modes) == 1 else f"{spec} [{mode}]"
            world_model = build_world_model(
                spec, mode, args.max_new_tokens, args.temperature, args.max_axtree_chars, args.invalid_retries
            )
            began = time.perf_counter()
            records, kept, drift, judged = [], [], {}, None
            if not args.judge_only:
                records, kept = evaluate_one_step(world_model, trajectories, args.batch_size, args.seed, label)
                drift = evaluate_drift(world_model, trajectories, args.max_depth, args.batch_size, args.seed, label)
            if args.judge and spec != COPY_MODEL and mode == modes[0]:
                judged = evaluate_judge(
                    world_model.backend,
                    trajectories,
                    args.judge_max_new_tokens,
                    args.seed,
                    world_model.prompt_style,
                    args.judge_early_final,
                    args.judge_objective_check,
                )
            results[label] = {
                "spec": spec,
                "output_mode": mode,
                "summary": summarise(records, drift, judged),
                "seconds": round(time.perf_counter() - began, 1),
                "transitions": records,
                "judge": judged,
            }
            if args.keep_typed_text and records:
                results[f"{label} + keep_typed_text"] = {
                    "spec": spec,
                    "output_mode": mode,
                    "summary": summarise(kept, {}, None),
                    "seconds": results[label]["seconds"],
                    "transitions": kept,
                    "judge": None,
                }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": command,
        "data": [str(p) for p in args.data] if args.data else "builtin miniwob_small.jsonl + miniwob_explore.jsonl",
        "split": args.split,
        "trajectories": len(trajectories),
        "tasks": len({t.task_id for t in trajectories}),
        "task_filter": args.tasks,
        "settings": {k: getattr(args, k) for k in (*_SETTINGS, "seed")},
        "table": format_table(results),
        "results": results,
    }
    output.write_text(json.dumps(report, indent=2) + "\n")
    if not args.judge_only and args.max_depth > 0:
        plot_drift(results, output.with_suffix(".png"))
    return report


@dataclass
class WorldModelEvalConfig:
    """Configuration of ``dynaweb-eval-wm`` (every field is a flag; ``--config x.yaml`` gives defaults).

    Parameters:
        world_models (`list[str]`, *optional*, defaults to `["smollm2-135m"]`):
            Backend specs (embedded name, model or LoRA-adapter directory) or ``copy`` (the page unchanged).
        output_modes (`list[str]`, *optional*, defaults to `["tree"]`):
            Output modes of untrained world models (a trained one is evaluated in its own mode).
        data (`list[str]` or `None`, *optional*):
            Trajectory JSONL files (default: the shipped expert and exploration data).
        split (`str` or `None`, *optional*, defaults to `"test"`):
            ``metadata["split"]`` to keep (``all``: every trajectory).
        tasks (`list[str]` or `None`, *optional*):
            Keep only these tasks: ids, or suite names that stand for their tasks (``long``;
            :func:`~dynaweb_env.data.tasks.expand_tasks`). ``None``: every task of the data.
        limit, max_per_task, max_depth, max_new_tokens, temperature, batch_size, max_axtree_chars, judge,
        judge_max_new_tokens, judge_only, judge_early_final, judge_objective_check, keep_typed_text,
        invalid_retries, shard, seed, output: see each flag's help.
    """

    world_models: list[str] = field(
        default_factory=lambda: ["smollm2-135m"],
        metadata={"help": "Backend specs (smollm2-135m, tiny-random, a model or LoRA-adapter dir) or 'copy'."},
    )
    output_modes: list[str] = field(
        default_factory=lambda: ["tree"],
        metadata={"help": "Output modes of untrained world models.", "choices": sorted(OUTPUT_MODES)},
    )
    data: list[str] | None = field(default=None, metadata={"help": "Trajectory JSONL files (default: shipped)."})
    split: str | None = field(default="test", metadata={"help": "metadata['split'] to keep ('all': every one)."})
    tasks: list[str] | None = field(
        default=None, metadata={"help": "Keep only these tasks: task ids or suites (small, multistep, long)."}
    )
    limit: int = field(default=0, metadata={"help": "Use the first N trajectories (0: all)."})
    max_per_task: int = field(
        default=0, metadata={"help": "Use the first N trajectories of each task and collecting policy (0: all)."}
    )
    max_depth: int = field(default=3, metadata={"help": "Deepest dream depth of the drift measure (0: none)."})
    max_new_tokens: int = field(default=512, metadata={"help": "Token budget of one prediction."})
    temperature: float = field(default=0.0, metadata={"help": "World-model sampling temperature."})
    batch_size: int = field(default=8, metadata={"help": "Transitions per generate call."})
    max_axtree_chars: int = field(default=6000, metadata={"help": "Current-tree budget in the prompt."})
    judge: bool = field(default=True, metadata={"help": "Measure the judge (--no-judge: do not)."})
    judge_max_new_tokens: int = field(default=128, metadata={"help": "Token budget of one verdict."})
    judge_only: bool = field(default=False, metadata={"help": "Measure only the judge (no fidelity)."})
    judge_early_final: bool = field(
        default=False,
        metadata={
            "help": "Also judge each success's final action taken too early, a failure (judge_cases early_final); "
            "the summary's judge_early_final_recall is the share judged FAILURE."
        },
    )
    judge_objective_check: bool = field(
        default=False,
        metadata={
            "help": "Judge as DreamWeb-v0 does by default (reward_guards objective_check): a SUCCESS that leaves an "
            "explicit requirement of the objective unmet counts as FAILURE. Default: the judge model alone."
        },
    )
    keep_typed_text: bool = field(
        default=False,
        metadata={
            "help": "Also score each prediction as DreamWeb-v0 with reward_guards keep_typed_text shows it (a row "
            "'<model> + keep_typed_text', from the same predictions)."
        },
    )
    invalid_retries: int = field(
        default=0,
        metadata={"help": "Draw a malformed prediction again up to N times, sampled (WebWorldModel invalid_retries)."},
    )
    shard: str = field(
        default="0/1",
        metadata={
            "help": "K/N: evaluate every N-th trajectory from the K-th (0-based), so that N processes share the work; "
            "benchmarks/merge_wm_evals.py joins their reports."
        },
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    output: str = field(default=DEFAULT_OUTPUT, metadata={"help": "JSON report (the PNG goes beside it)."})

    def __post_init__(self) -> None:
        if self.judge_only and not self.judge:
            raise ValueError("--judge-only with --no-judge measures nothing")
        parse_shard(self.shard)
        if self.tasks is not None:
            self.tasks = expand_tasks(self.tasks)
        if self.split is not None and self.split.lower() in ("all", "none", ""):
            self.split = None
        counts = ("limit", "max_per_task", "max_depth", "max_new_tokens", "batch_size", "max_axtree_chars")
        may_be_zero = ("limit", "max_per_task", "max_depth", "max_axtree_chars", "invalid_retries")
        for name in (*counts, "judge_max_new_tokens", "invalid_retries"):
            if getattr(self, name) < (0 if name in may_be_zero else 1):
                raise ValueError(f"--{name.replace('_', '-')} is out of range: {getattr(self, name)}")


def parse_args(argv: Sequence[str] | None = None) -> WorldModelEvalConfig:
    """Parse ``dynaweb-eval-wm`` arguments; exits with a usage error for bad ones."""
    from trl import TrlParser

    from dynaweb_env.compat.transformers import word_negated_flags

    parser = word_negated_flags(
        TrlParser(WorldModelEvalConfig, prog="dynaweb-eval-wm", description=__doc__.split("\n\n")[0])
    )
    try:
        (config,) = parser.parse_args_and_config(args=argv)
    except ValueError as error:
        parser.error(str(error))
    return config


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Entry point of ``dynaweb-eval-wm``: evaluate, print the table, write JSON and PNG."""
    argv = list(sys.argv[1:] if argv is None else argv)
    report = evaluate_world_models(parse_args(argv), shlex.join(["dynaweb-eval-wm", *argv]))
    print(report["table"])
    return report


def cli() -> None:
    main()


__all__ = [
    "COPY_MODEL",
    "WorldModelEvalConfig",
    "parse_args",
    "parse_shard",
    "per_task_sample",
    "summarise",
    "tree_scores",
    "evaluate_world_models",
    "format_table",
    "main",
    "cli",
]


if __name__ == "__main__":
    cli()
