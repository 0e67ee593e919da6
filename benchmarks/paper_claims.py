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
    the real transitions the world model learned from (as ``dynaweb-train-wm`` recorded them beside it:
    2,521 for ``smollm2-135m-wm-patch``, the presets' world model).
``dream_length``
    Figure 3a analog: DynaWeb with dream length 1, 3, 5, 8 (the agent's step limit in training is
    raised to the dream length where it is shorter, so only the dream length varies).
``expert_frac``
    Figure 3b analog: DynaWeb with expert fraction 0, 0.25, 0.5, 1.0.
``world_model``
    Figure 4 analog: DynaWeb with the shipped trained world model (``smollm2-135m-wm-patch``, the presets')
    vs. the untrained base ``smollm2-135m`` prompted as world model.
``dreams_only``
    The decisive comparison: DynaWeb on dreams only (``--expert-frac 0``) vs real-browser GSPO, same SFT
    start, same updates.
``learning_curve``
    Issue 19's curve: real-browser GSPO and DynaWeb on dreams only, each trained for ``train_steps``
    updates with every checkpoint kept; each checkpoint (every ``save_steps`` updates) is evaluated like a
    final policy, and plotted against the real-environment steps behind it (GSPO: its rollouts so far,
    from the checkpoint's saved step counter; DynaWeb: the world model's data). The JSON's ``criteria``
    give the real-step ratio at which DynaWeb first reaches GSPO's final success.

The judge of dreams is fixed (``--judge``, default the shipped trained judge of the tasks,
``smollm2-135m-judge-dagger``, or ``smollm2-135m-judge-all`` for ``--suite long``) in every DynaWeb run: otherwise the
``world_model`` experiment would swap the judge together with the world model. The trained judge because
the prompted 135M model never says SUCCESS (``benchmarks/results/judge/judge_accuracy.json``), which would give
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
    python benchmarks/paper_claims.py learning_curve --seeds 0 1 2 --sft-seed 0 --set train_steps=32 save_steps=8
    # DynaWeb with a world model and judge trained on the SFT start's demonstrations alone (the paper's accounting:
    # no real step beyond the data both methods start from); model_steps=350 took 80 min here at one thread
    python benchmarks/paper_claims.py learning_curve --seeds 0 1 2 --sft-seed 0 --set train_steps=32 save_steps=8 \
        --model-data demonstrations --reward-guards '{"gate_termination": true, "consistency": "cut"}' \
        --dream-starts first --dream-resamples 2 --results-dir benchmarks/results/learning_curve_demos
    # the multi-step suite (the 5 tasks with the longest expert episodes): results in
    # benchmarks/results/paper_claims/multistep/
    python benchmarks/paper_claims.py table1 dream_length --suite multistep --seeds 0 1 2 --sft-seed 0
    # the long suite (9 tasks of 3-16 expert steps) on its own budget (10 steps or the task's own limit,
    # 3000-character trees, pages after the first as edits): results in benchmarks/results/paper_claims/long/
    python benchmarks/paper_claims.py table1 --suite long --seeds 0 1 2 --sft-seed 0 \
        --world-model smollm2-135m-wm-patch-all     # the long tasks' default judge: smollm2-135m-judge-all
    nohup python benchmarks/paper_claims.py table1 dream_length expert_frac world_model > runs/claims.log 2>&1 &
    python benchmarks/paper_claims.py table1 --dry-run          # the exact commands, nothing run
    python benchmarks/paper_claims.py table1 --aggregate-only   # JSON + PNG from the runs finished so far
    # runs of identical commands recorded in a committed report stand in (marked) where outputs are gone
    python benchmarks/paper_claims.py dreams_only --aggregate-only \
        --reuse-recorded benchmarks/results/paper_claims/paper_claims_table1.json

Each experiment writes ``benchmarks/results/paper_claims/paper_claims_<experiment>.json`` (the driver command, the
exact tool commands, seeds, budget, per-run success and real-environment steps, each RL run paired
page by page with its SFT start (pages gained and lost, successes by task), mean / std / min / max
over seeds; for ``table1`` also the issue's two criteria, for the others the SFT start's success)
and a PNG beside it (bars with the seed spread for ``table1`` and ``world_model``, lines for the
sweeps; the SFT start dashed). An invocation of some seeds or arms (``--seeds 2``, ``--arms gspo-real``,
arms run side by side) adds its runs to a file of the same configuration, which keeps the others and
lists their commands in ``merged_with`` (in a fresh checkout too: the file's runs stand in for runs no longer
on disk); a file of another configuration is replaced, except by an invocation that evaluated nothing.

Time: every run's ``result.json`` and the experiment's JSON record the measured seconds of each stage
(``runs[*].seconds``: SFT start, training, evaluation), each arm's spread over seeds
(``summary[*].seconds``) and the demonstration collection's (``config.demonstrations_seconds``), so
the figures always belong to the runs they describe (``benchmarks/results/paper_claims/paper_claims_*.json`` hold
those of the runs reported in the README).

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
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dynaweb_env.models import ALL_TASKS_JUDGE, TRAINED_JUDGE, default_judge
from dynaweb_trainer.evaluate import TASK_SUITES

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.claims.catalogue import EXPERIMENTS, Run, experiment_arms, plan  # noqa: E402
from benchmarks.claims.jobs import (  # noqa: E402
    BUDGETS,
    DEMONSTRATIONS,
    ROOT,
    SUITE_BUDGETS,
    TRAINED_WORLD_MODEL,
    Context,
    apply_overrides,
    collect_job,
    held_out_seeds,
    rel,
    sft_job,
    train_seeds,
    write_json,
)
from benchmarks.claims.merge import with_reported_runs  # noqa: E402
from benchmarks.claims.plots import plot  # noqa: E402
from benchmarks.claims.runner import (  # noqa: E402
    JobFailed,
    preflight,
    prepare_demonstrations,
    run_all,
    write_train_split,
)
from benchmarks.claims.statistics import aggregate  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/paper_claims.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring for what each experiment measures; the results JSON records how long it took.",
    )
    parser.add_argument(
        "experiments",
        nargs="+",
        choices=EXPERIMENTS,
        metavar="experiment",
        help=f"one or more of: {', '.join(EXPERIMENTS)}",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (default 0 1 2)")
    parser.add_argument(
        "--budget",
        choices=sorted(BUDGETS),
        default=None,
        help="compute budget (default: long with --suite long, else small)",
    )
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
        "expert_frac: 0.0 0.25 0.5 1.0; world_model: trained untrained; dreams_only: sft gspo-real dynaweb-dreams)",
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
        "--judge",
        default=None,
        help=f"judge of every DynaWeb run (default: the shipped trained judge of the tasks, {TRAINED_JUDGE}, or "
        f"{ALL_TASKS_JUDGE} where a task is one it never trained on, e.g. --suite long)",
    )
    parser.add_argument(
        "--reward-guards",
        default=None,
        metavar="JSON",
        help="reward_guards of every DynaWeb run, a JSON object (dynaweb-train --reward-guards; default: none)",
    )
    parser.add_argument(
        "--dream-starts",
        choices=("all", "first"),
        default="all",
        help="where every DynaWeb run's dreams start: any recorded page (all, the paper) or each recording's first",
    )
    parser.add_argument(
        "--dream-resamples",
        type=int,
        default=0,
        help="dream a group whose dreams all earned the same reward again from a new start state, up to this many "
        "times (dynaweb-train --dream-resamples; 0: off, the paper)",
    )
    parser.add_argument(
        "--model-data",
        choices=("shipped", "demonstrations"),
        default="shipped",
        help="DynaWeb's world model and judge: the shipped trained ones, or one adapter trained as both on the SFT "
        "start's demonstrations alone (dynaweb-train-wm --examples both, model_steps steps; the paper's world model "
        "learns from its agents' SFT data), so DynaWeb adds no real step beyond them",
    )
    parser.add_argument(
        "--judge-near-misses",
        action="store_true",
        help="with --model-data demonstrations: the judge also learns each demonstration's final action taken too "
        "early (a Submit on a form left empty) as a failure (dynaweb-train-wm --judge_early_final)",
    )
    parser.add_argument(
        "--task-order",
        choices=("shuffled", "balanced"),
        default="shuffled",
        help="order of every RL run's task queries: shuffled (TRL) or balanced (every task once before any again)",
    )
    parser.add_argument(
        "--suite",
        choices=sorted(TASK_SUITES),
        default=None,
        help="a named task suite: small (the 9 shipped tasks, the default), multistep (the 5 tasks with the "
        "longest expert episodes, 3-4 actions) or long (9 tasks of 3-16 expert steps, on the long budget); its "
        "results go to <results-dir>/<suite>/ unless it is small",
    )
    parser.add_argument("--tasks", nargs="+", default=None, help="tasks (default: the suite's; not with --suite)")
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
        default=ROOT / "benchmarks" / "results" / "paper_claims",
        help="where the JSON and PNG go (default benchmarks/results/paper_claims)",
    )
    parser.add_argument(
        "--train-to-checkpoint",
        action="store_true",
        help="a learning-curve point (dynaweb-dreams@8) trains its run only up to its checkpoint and stops there; "
        "a later point resumes it (default: the first point trains the run to train_steps)",
    )
    parser.add_argument(
        "--skip-eval", action="store_true", help="train only, no browser (smoke runs); rerun without it to evaluate"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--aggregate-only", action="store_true", help="write JSON + PNG from finished runs only")
    parser.add_argument(
        "--reuse-recorded",
        nargs="+",
        type=Path,
        default=[],
        metavar="JSON",
        help="committed results files (e.g. benchmarks/results/paper_claims/paper_claims_table1.json) whose runs of "
        "identical commands stand in, marked recorded_in, for runs with no outputs on disk (aggregation only; nothing "
        "is rerun or skipped because of them)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo the tools' output (it is in their logs)")
    return parser.parse_args(argv)


def make_context(args: argparse.Namespace) -> Context:
    tasks = list(args.tasks or TASK_SUITES[args.suite or "small"])
    return Context(
        budget=apply_overrides(BUDGETS[args.budget or SUITE_BUDGETS.get(args.suite, "small")], args.set),
        seeds=list(dict.fromkeys(args.seeds)),
        policy=args.policy,
        world_model=args.world_model,
        untrained_world_model=args.untrained_world_model,
        judge=args.judge or default_judge(tasks),
        tasks=tasks,
        runs_dir=args.runs_dir.resolve(),
        skip_eval=args.skip_eval,
        demonstrations=parse_demonstrations(args.demonstrations),
        sft_seed=args.sft_seed,
        reward_guards=parse_reward_guards(args.reward_guards),
        dream_starts=args.dream_starts,
        dream_resamples=args.dream_resamples,
        task_order=args.task_order,
        train_to_checkpoint=args.train_to_checkpoint,
        model_data=args.model_data,
        judge_near_misses=args.judge_near_misses,
        recorded=tuple(path.resolve() for path in args.reuse_recorded),
    )


def parse_reward_guards(text: str | None) -> dict | None:
    """``--reward-guards``: ``None`` (none), else a checked dict of ``RewardGuards`` fields (``ValueError`` if bad)."""
    if text is None or text.strip() in ("", "none", "{}"):
        return None
    from dynaweb_env.envs.dream_guards import RewardGuards

    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--reward-guards {text!r}: not JSON: {error}") from None
    RewardGuards.parse(value)  # a clear error now, not in the first training run
    return value


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
        if args.suite and args.tasks:
            raise ValueError("give --suite or --tasks, not both")
        if args.model_data == "demonstrations" and (args.world_model or args.judge is not None):
            raise ValueError("--model-data demonstrations trains both models: no --world-model or --judge")
        if args.judge_near_misses and args.model_data != "demonstrations":
            raise ValueError("--judge-near-misses trains the judge of --model-data demonstrations: give both")
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
    # Another suite's results go beside the small suite's, which keep their names.
    results_dir = args.results_dir if args.suite in (None, "small") else args.results_dir / args.suite
    # The sweeps draw their SFT start's score as a reference line. In a fresh checkout its evaluation is
    # gone from disk, and the table1 report beside them records it: identical commands stand in.
    ctx = dataclasses.replace(ctx, recorded=(*ctx.recorded, (results_dir / "paper_claims_table1.json").resolve()))
    for experiment, experiment_runs in plans.items():
        output = results_dir / f"paper_claims_{experiment}.json"
        report = with_reported_runs(output, aggregate(experiment, experiment_runs, ctx, command), ctx)
        if report is None:
            continue
        if not report["runs"]:
            print(f"paper_claims: {experiment}: no finished runs yet, nothing written")
            continue
        write_json(output, report)
        plot(report, output.with_suffix(".png"))
        done = f"{len(report['runs'])}/{len(report['runs']) + len(report['missing'])} runs"
        print(f"paper_claims: {experiment}: {done} in {rel(output)} (+ .png)")
    if failures:
        print("paper_claims: failed runs (rerun the same command to retry):\n  " + "\n  ".join(failures))
    return 1 if failures else 0


#: What the driver's callers (and tests) use; the parts themselves are in benchmarks/claims/.
__all__ = [
    "BUDGETS",
    "DEMONSTRATIONS",
    "aggregate",
    "apply_overrides",
    "collect_job",
    "held_out_seeds",
    "main",
    "make_context",
    "parse_args",
    "plan",
    "plot",
    "rel",
    "sft_job",
    "train_seeds",
    "write_json",
]


if __name__ == "__main__":
    sys.exit(main())
