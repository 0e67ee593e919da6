"""Planning with the world model at test time: the same policy with and without ``dynaweb eval --plan K``.

For each policy and each arm (``K:d``: ``0:0`` is no planning, ``2:1`` is two candidates a step dreamed one step
ahead, ...) and each run seed, every ``task x seed`` episode runs on real MiniWoB++ pages
(:func:`~dynaweb_trainer.evaluate.evaluate_policy`, the ``dynaweb eval`` loop, with
:class:`~dynaweb_trainer.planning.PlanningPolicy` around the policy when planning). Pages are held out: task seeds
of the test split (:func:`~dynaweb_env.data.shipped.split_of`), as ``paper_claims`` evaluates. The run seed seeds the
sampling of the extra candidates (the policy decodes greedily, so without planning every run seed gives the same
episodes, and they are run once).

Per policy and arm it reports the success rate of each run seed, their mean and spread (sample standard deviation),
the pages gained and lost against no planning, and the cost per real step (wall seconds, policy seconds, world-model
and judge calls, tokens and seconds). JSON and a PNG go to ``benchmarks/results/planning/``.

Resumable: each run writes its episodes to ``<work>/<policy>/<arm>-seed<s>.json.partial.jsonl`` as they end (the
``dynaweb eval`` resume rule), so rerunning the same command skips the episodes done, and a finished run's JSON is
read back instead of rerun.

Command::

    python -m benchmarks.planning --policies sft=runs/claims/shared/sft-seed0-4ced405c --arms 0:0 2:1 4:1 2:2 4:2 \\
        --run-seeds 0 1 2
    python -m benchmarks.planning --policies smollm2-135m --arms 0:0 2:1 --tasks miniwob.click-button --per-task 2
    python -m benchmarks.planning --suite long --policies sft-long=runs/claims/shared/sft-seed0-2adef35d --arms 0:0 2:1

A suite plays on the observation its ``paper_claims`` budget trains and evaluates on (``--suite long``: 10 steps or
the task's own limit, 3000-character trees, pages after the first as edits), so that the no-planning arm is the
policy's own evaluation; ``--max-steps``, ``--max-axtree-chars``, ``--page-history`` and ``--max-new-tokens``
override it. The JSON records it as ``observation``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.tasks import TASK_SUITES

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.claims.jobs import BUDGETS, SUITE_BUDGETS, held_out_seed_list  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "planning"
ARMS = ("0:0", "2:1", "4:1", "2:2", "4:2")


def parse_arm(text: str) -> tuple[int, int]:
    """``"K:d"`` as ``(K, d)``; ``"0:0"`` (or ``"0"``) is no planning."""
    try:
        parts = [int(part) for part in text.split(":")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"an arm is K:d, e.g. 2:1 (0:0 for no planning), got {text!r}") from None
    k, d = (parts + [1])[:2] if parts[0] else (0, 0)
    if len(parts) > 2 or k == 1 or k < 0 or (k and d < 1):
        raise argparse.ArgumentTypeError(f"an arm is K:d with K = 0 or K >= 2 and d >= 1, got {text!r}")
    return k, d


def parse_policy(text: str) -> tuple[str, str]:
    """``"label=spec"`` or ``"spec"`` (labelled by itself) as ``(label, spec)``."""
    label, _, spec = text.rpartition("=")
    return (label or spec.strip("/").replace("/", "_")), spec


class SampledExploration:
    """``explore-e<epsilon>``: the exploration policy of the recorded data (the scripted expert, a random action with
    probability ``epsilon`` a step) as a *sampling* policy, a stand-in with real mistakes where no trained policy is
    at hand. Its greedy answer is the recorded policy's draw; each sampled answer is drawn afresh (a generator stream
    of the call's seed and the answer's position), as an LLM's samples differ from its greedy answer."""

    def __init__(self, tokenizer: Any, epsilon: float):
        from dynaweb_trainer.exploration import ExplorationPolicy

        self.policy = ExplorationPolicy(tokenizer, epsilon)
        self.model_name = f"explore-e{epsilon}"
        self._draw = self.policy.rng
        self._stream = 0
        self.policy.rng = lambda turn, stream=0: self._draw(turn, stream or self._stream)  # type: ignore[method-assign]

    def act(self, turns: Sequence[Any], sampling: Any) -> list[Any]:
        if sampling.greedy:
            self._stream = 0
            return self.policy.act(turns, sampling)
        answers = []
        for row, turn in enumerate(turns):
            self._stream = 1 + 1000 * int(sampling.seed or 0) + row
            answers += self.policy.act([turn], sampling)
        self._stream = 0
        return answers


def load_benchmark_policy(spec: str) -> Any:
    """``load_policy(spec)``, or for ``explore-e<epsilon>`` the :class:`SampledExploration` policy."""
    from dynaweb_trainer.policy import LoadedPolicy, load_policy

    if not spec.startswith("explore-e"):
        return load_policy(spec)
    expert = load_policy("expert")
    policy = SampledExploration(expert.tokenizer, float(spec.removeprefix("explore-e")))
    return LoadedPolicy(spec, "explore", expert.tokenizer, policy, {"epsilon": policy.policy.epsilon})


def run_arm(
    spec: str, load: Any, label: str, k: int, d: int, run_seed: int, args: argparse.Namespace, browsers: Any
) -> dict[str, Any] | None:
    """One ``dynaweb eval`` of a policy with one arm and run seed (resumed if its partial file exists). ``load()``
    and ``browsers()`` give the policy and the vector env, made on first use: a finished run needs neither. With
    ``args.aggregate_only``, a run not finished is ``None`` (nothing runs)."""
    from dynaweb_trainer.evaluate import EvalConfig, evaluate_policy, same_settings

    output = Path(args.work) / label / f"K{k}-d{d}-seed{run_seed}.json"
    config = EvalConfig(
        policy=spec.strip(), tasks=list(args.tasks), seeds=",".join(map(str, args.seed_list)), num_envs=args.num_envs,
        max_steps=args.max_steps, seed=run_seed, output=str(output), plan=k, plan_depth=max(d, 1),
        plan_world_model=args.world_model, plan_judge=args.judge, max_new_tokens=args.max_new_tokens,
        max_axtree_chars=args.max_axtree_chars, page_history=args.page_history,
    )  # fmt: skip
    if output.is_file():  # finished: read back when run with the same settings (wherever it was written)
        report = json.loads(output.read_text())
        if same_settings(report.get("config", {}), config, ignore=("output",)):
            return report
    if args.aggregate_only:
        return None
    command = f"{args.command}  # arm K{k}:d{d}, run seed {run_seed}"
    return evaluate_policy(config, policy=load(), vector_env=browsers(), command=command, show_progress=False)


def summarize_arm(reports: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    """Success per run seed, mean ± spread, pages gained/lost against no planning, and cost per real step (the mean
    over seeds of each run's rate, timed on the episodes it ran: a resumed run's earlier episodes are not timed)."""
    rates = [report["summary"]["success_rate"] for report in reports]
    costs = [report["cost_per_real_step"] for report in reports]
    keys = [key for key, value in costs[0].items() if isinstance(value, (int, float)) and key != "real_steps"]
    row: dict[str, Any] = {
        "episodes_per_seed": reports[0]["summary"]["episodes"],
        "run_seeds": [report["config"]["seed"] for report in reports],
        "success_by_seed": rates,
        "success_mean": round(statistics.fmean(rates), 4),
        "success_spread": round(statistics.stdev(rates), 4) if len(rates) > 1 else 0.0,
        "mean_steps": round(statistics.fmean(r["summary"]["mean_steps"] for r in reports), 3),
        "cost_per_real_step": {key: round(statistics.fmean(c[key] for c in costs), 3) for key in keys},
        "timed_real_steps": sum(c["real_steps"] for c in costs),
        "resumed_episodes_by_seed": [report.get("resumed_episodes", 0) for report in reports],
    }
    if baseline:
        base = {(e["task_id"], e["task_seed"]): e["success"] for e in baseline[0]["episodes"]}
        pairs = [[(base[(e["task_id"], e["task_seed"])], e["success"]) for e in r["episodes"]] for r in reports]
        row["pages_gained_by_seed"] = [sum(now and not was for was, now in p) for p in pairs]
        row["pages_lost_by_seed"] = [sum(was and not now for was, now in p) for p in pairs]
        chosen = [c.get("planning", {}).get("chose_other", 0) for c in costs]
        row["steps_where_planning_overrode_the_policy"] = sum(chosen)
    return row


def plot(report: dict[str, Any], path: Path) -> None:
    """Success (mean ± spread) per arm, one group of bars per policy; cost per real step in the labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(report["policies"])
    arms = list(report["arms"])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 + 1.4 * len(arms) * len(policies)), 4.2))
    width = 0.8 / max(len(policies), 1)
    for p_index, policy in enumerate(policies):
        rows = [report["policies"][policy].get(arm) for arm in arms]
        xs = [a_index + p_index * width for a_index in range(len(arms))]
        means = [100 * row["success_mean"] if row else 0 for row in rows]
        spreads = [100 * row["success_spread"] if row else 0 for row in rows]
        ax.bar(xs, means, width, yerr=spreads, capsize=3, label=policy)
        for x, arm, row, mean in zip(xs, arms, rows, means, strict=True):
            if row:
                seconds = row["cost_per_real_step"]["seconds"]
                one_seed = len(row["success_by_seed"]) == 1 and arm != "K0:d0"  # greedy needs one run
                label = f"{mean:.0f}%\n{seconds:.0f} s/step" + ("\n1 seed" if one_seed else "")
                ax.text(x, mean + 1, label, ha="center", va="bottom", fontsize=7)
            else:
                ax.text(x, 1, "not run", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks([a + width * (len(policies) - 1) / 2 for a in range(len(arms))])
    ax.set_xticklabels(["no planning" if arm == "K0:d0" else arm for arm in arms])
    ax.set_ylabel("held-out success (%)")
    ax.set_ylim(0, 110)
    pages = report["episodes_per_run"]
    title = f"Planning with the world model\n{pages} held-out pages a run, run seeds {report['run_seeds']}"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/planning.py")
    parser.add_argument(
        "--policies", nargs="+", default=["smollm2-135m"], help="label=spec or spec (or explore-e<epsilon>) each."
    )
    parser.add_argument("--arms", nargs="+", type=parse_arm, default=[parse_arm(a) for a in ARMS], help="K:d each.")
    parser.add_argument("--suite", choices=sorted(TASK_SUITES), default="small", help="Task suite (or --tasks).")
    parser.add_argument("--tasks", nargs="+", default=None, help="Task ids (default: the suite's).")
    parser.add_argument("--first-seed", type=int, default=100, help="Held-out task seeds from this one on.")
    parser.add_argument("--per-task", type=int, default=10, help="Held-out pages per task (10 x 9 tasks = 90).")
    parser.add_argument("--run-seeds", nargs="+", type=int, default=[0, 1, 2], help="Sampling seeds of planning.")
    parser.add_argument("--world-model", default=None, help="World model of planning (default: the shipped one).")
    parser.add_argument(
        "--judge", default=None, help="Judge of planning (default: the tasks' judge, dynaweb_env.models.default_judge)."
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="Step limit (default: the suite's paper_claims budget; 5, long 10)."
    )
    parser.add_argument("--max-new-tokens", type=int, default=None, help="Policy tokens a turn (default: budget).")
    parser.add_argument("--max-axtree-chars", type=int, default=None, help="Tree cut (default: the budget's).")
    parser.add_argument("--page-history", default=None, help="Earlier pages in the prompt (default: the budget's).")
    parser.add_argument("--num-envs", type=int, default=2, help="Browsers in parallel.")
    parser.add_argument("--work", default="runs/planning", help="Per-run eval JSON and partial episode files.")
    parser.add_argument("--output", default=str(RESULTS / "planning.json"))
    parser.add_argument(
        "--aggregate-only",
        action="store_true",
        help="Read back finished runs only, run nothing; the others are listed in missing_runs.",
    )
    args = parser.parse_args(argv)
    if args.per_task < 1 or args.num_envs < 1:
        parser.error("--per-task and --num-envs must be >= 1")
    args.tasks = list(args.tasks or TASK_SUITES[args.suite])
    budget = BUDGETS[SUITE_BUDGETS.get(args.suite, "small")]  # the observation paper_claims trains and evaluates on
    for name, default in [
        ("max_steps", budget.agent_max_steps), ("max_new_tokens", budget.max_turn_tokens),
        ("max_axtree_chars", budget.max_axtree_chars), ("page_history", budget.page_history),
    ]:  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.seed_list = held_out_seed_list(args.first_seed, args.per_task)
    args.command = shlex.join(["python", "-m", "benchmarks.planning", *(sys.argv[1:] if argv is None else argv)])

    from dynaweb_trainer.evaluate import EvalConfig, make_real_vector_env

    started = time.perf_counter()
    made: list[Any] = []  # the vector env, once a run needs one

    def browsers() -> Any:
        if not made:
            made.append(make_real_vector_env(EvalConfig(tasks=args.tasks, max_steps=args.max_steps), args.num_envs))
        return made[0]

    results: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    try:
        for label, spec in map(parse_policy, args.policies):
            load = functools.cache(functools.partial(load_benchmark_policy, spec))
            runs: dict[str, list[dict[str, Any]]] = {}
            for k, d in args.arms:
                seeds = args.run_seeds if k else args.run_seeds[:1]  # greedy without planning: one run is all
                reports = {s: run_arm(spec, load, label, k, d, s, args, browsers) for s in seeds}
                missing += [f"{label} K{k}:d{d} run seed {s}" for s, report in reports.items() if report is None]
                if done := [report for report in reports.values() if report is not None]:
                    runs[f"K{k}:d{d}"] = done
            baseline = runs.get("K0:d0")
            results[label] = {
                "spec": spec,
                **{arm: summarize_arm(reports, None if arm == "K0:d0" else baseline) for arm, reports in runs.items()},
            }
    finally:
        for vector_env in made:
            vector_env.close()
    report = {
        "command": args.command,
        "tasks": args.tasks,
        "task_seeds": args.seed_list,
        "episodes_per_run": len(args.tasks) * len(args.seed_list),
        "arms": [f"K{k}:d{d}" for k, d in args.arms],
        "run_seeds": args.run_seeds,
        "observation": {
            name: getattr(args, name) for name in ("max_steps", "max_new_tokens", "max_axtree_chars", "page_history")
        },
        "world_model": args.world_model or "shipped default",
        "judge": args.judge or "shipped default",
        "wall_seconds_this_invocation": round(time.perf_counter() - started, 1),
        "missing_runs": missing,
        "policies": results,
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1) + "\n")
    plot(report, output.with_suffix(".png"))
    for label, arms in results.items():
        for arm, row in arms.items():
            if arm != "spec":
                cost = row["cost_per_real_step"]
                print(
                    f"{label} {arm}: success {row['success_mean']:.3f} ± {row['success_spread']:.3f} "
                    f"({row['episodes_per_seed']} pages x {len(row['success_by_seed'])} seeds); per real step "
                    f"{cost['seconds']:.1f} s, world model {cost['world_model_tokens']:.0f} tokens, "
                    f"judge {cost['judge_tokens']:.0f} tokens"
                )
    return report


if __name__ == "__main__":
    main()
