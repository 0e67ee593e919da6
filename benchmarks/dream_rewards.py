"""Are dream rewards real? Replay the policy's training dreams on the real pages and compare.

    python benchmarks/dream_rewards.py                                   # every runs/claims/shared/*/episodes.jsonl
    python benchmarks/dream_rewards.py --episodes outputs/dynaweb-gspo/episodes.jsonl
    python benchmarks/dream_rewards.py --episodes A/episodes.jsonl B/episodes.jsonl --resume   # A's replays kept
    python benchmarks/dream_rewards.py --guards none '{"judge_votes": 5}' '{"gate_termination": true}'
    python benchmarks/dream_rewards.py --demonstrations 6 --guards none '{"world_model_samples": 3}'
    python benchmarks/dream_rewards.py --demonstrations 10 --demonstrations-file heldout.jsonl \
        --output benchmarks/results/dream_rewards/guards.json --guards none '{"judge_votes": 5}' \
        '{"judge_votes": 5, "group_judging": "votes"}' '{"group_judging": "listwise"}' \
        '{"gate_termination": true}' '{"world_model_samples": 3, "uncertainty": "discount"}'

A DynaWeb dream starts from a page of a real trajectory (its ``start_state``: task, task seed, and
the actions that led there) and continues with the policy's actions, answered by the world model;
the judge then rewards it. Each dream of a training run's ``episodes.jsonl``
(:mod:`dynaweb_trainer.episode_log`) is replayed in Chromium: the same task and seed (the same
page), the start state's history, then the dream's actions, until the task ends. The real reward of
those actions is the reward the dream *should* have had, so the two side by side measure how much
of GSPO's signal in dreams is right:

- ``agreement``: the dream's reward equals the real reward of the same actions;
- ``judge_success_precision``: of the dreams judged SUCCESS, how many succeed for real;
- ``real_success_recall``: of the dreams whose actions succeed for real, how many the judge saw.

``start_reproduced`` says whether the replayed start page is the recorded one character for
character (MiniWoB++ pages are seeded, so it should be); a dream whose start could not be rebuilt
(no task seed recorded, or a history action failing) is counted apart, not compared. Results go to
``benchmarks/results/dream_rewards/dream_rewards.json`` with every compared dream (run, update, task, actions,
both rewards, the judge's reasoning).

**Reward guards** (``--guards``, :mod:`dynaweb_env.envs.dream_guards`): each dream is also *re-dreamed*
once per guard setting (a JSON object of ``reward_guards``; ``none`` is no guard, the baseline re-dreamed
in the same run): ``DreamWeb-v0``'s dynamics start from the dream's recorded start page and are given the
dream's recorded actions, with the world model and judge named by ``--world-model`` / ``--judge``; all
dreams of a setting are stepped together (one batched world-model call per step). The reward each gives
is compared with the same real reward, so each guard's agreement and precision sit side by side
(``guards`` in the JSON), with how often it abstained, cut or gated, and two figures for what GSPO
uses, advantages within a group: ``reward_gap`` (mean reward of real successes minus that of real
failures) and ``ordering_accuracy`` (of the pairs of one group whose real rewards differ, the share the
guarded reward orders the same way; ties give no signal and count apart). A graded reward (discounted,
group-relative) counts as judged SUCCESS from 0.5 on.

- Judge-only settings (``judge_votes``, ``group_judging``) re-judge the pages of the ``none`` re-dream
  instead of dreaming again: exact, since they act only once a dream has ended.
- ``{"world_model_samples": K, "uncertainty": "discount"}`` also reports ``uncertainty_modes``: ``cut``,
  ``no_reward`` and ``discount`` read exactly from that one re-dream (the three sample the same pages up to
  a dream's first disagreement; ``cut`` and ``no_reward`` both give 0 from there).
- Group-relative judging scores the dreams of one GSPO group together: the dreams of one update and call
  from one start page, or a demonstration's two dreams.

``--demonstrations N`` adds dreams without a training run: the first ``N`` held-out (``test`` split)
demonstrations of more than one action (shipped, or from ``--demonstrations-file``, e.g. collected with
``dynaweb-collect --policy expert --seeds 104,109,114,119``), round robin over tasks, each as two dreams
from its first page: all its actions (a real success) and all but the last (a real failure, the task left
unfinished: the pages a world model wrongly declares finished). ``--demonstration-prefixes P`` adds shorter
prefixes, real failures that got unequally far, and each guard setting then also reports
``progress_ordering_accuracy``: of the pairs of really failing dreams of one group whose real objective progress
(``real_progress``, on the replayed real pages) differs, the share its reward orders the same way. That is what
``{"progress_reward": w}`` is for (issue 52)::

    python benchmarks/dream_rewards.py --demonstrations 18 --demonstration-prefixes 3 --max-steps 20 \
        --demonstrations-file dynaweb_env/data/miniwob-all/test/expert.jsonl.xz --demonstration-tasks long \
        --world-model smollm2-135m-wm-patch-all --judge smollm2-135m-judge-all \
        --guards none '{"progress_reward": 0.4}' --output benchmarks/results/dream_rewards/long_progress.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES, split_of
from dynaweb_env.data.tasks import expand_tasks
from dynaweb_env.envs.dream_guards import RewardGuards
from dynaweb_env.models import TRAINED_JUDGE, TRAINING_WORLD_MODEL
from dynaweb_env.observation import action_target
from dynaweb_env.world_model.requirements import objective_progress

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.dream_rewards_guards import (  # noqa: E402
    JUDGE_ONLY_FIELDS,
    compare,
    group_key,
    guard_summary,
    redream_all,
    rejudge_all,
    uncertainty_modes,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "dream_rewards" / "dream_rewards.json"
#: Replays between two saves of the report (a replay takes ~4.5 s).
SAVE_EVERY = 8


def dreams_of(path: Path) -> list[Trajectory]:
    """The dream records of one ``episodes.jsonl``."""
    return [record for record in iter_trajectories(path) if record.source == "dream"]


def replay(env: gym.Env, dream: Trajectory) -> dict[str, Any]:
    """Replay a dream's start-state history and actions on the real page; what happened there.

    ``real_progress`` is the objective progress of the same actions on the real pages
    (:func:`~dynaweb_env.world_model.requirements.objective_progress`; ``None``: the objective makes nothing explicit),
    what ``reward_guards={"progress_reward": w}`` pays a dream for.
    """
    start = dream.metadata.get("options", {}).get("start_state", {})
    if start.get("task_seed") is None:
        return {"replayed": False, "why": "no task seed recorded for the start state"}
    observation, _ = env.reset(options={"task": dream.task_id, "task_seed": int(start["task_seed"])})
    actions, targets = [], []
    for action in start.get("history", []):
        actions.append(action)
        targets.append(action_target(action, observation["axtree"]))
        observation, _, terminated, truncated, _ = env.step(action)
        if observation["last_action_error"] or terminated or truncated:
            return {"replayed": False, "why": f"history action {action!r} did not replay"}
    start_reproduced = observation["axtree"] == dream.steps[0].axtree
    reward, executed, errors = 0.0, [], []
    for step in dream.steps:
        if not step.action:
            break
        actions.append(step.action)
        targets.append(action_target(step.action, observation["axtree"]))
        observation, reward, terminated, truncated, _ = env.step(step.action)
        executed.append(step.action)
        errors.append(observation["last_action_error"])
        if terminated or truncated:
            break
    return {
        "replayed": True,
        "start_reproduced": start_reproduced,
        "real_reward": float(reward),
        "real_progress": objective_progress(dream.goal, actions, targets, observation["axtree"]),
        "real_actions": executed,
        "real_action_errors": errors,
    }


def demonstration_dreams(
    count: int, path: Path | None = None, prefixes: int = 1, tasks: Sequence[str] = ()
) -> list[Trajectory]:
    """Dreams from the first ``count`` held-out multi-action demonstrations: all actions, and all but the last.

    ``path``: a trajectory JSONL (e.g. ``dynaweb-collect --policy expert`` on test-split seeds) instead of the
    shipped demonstrations; only its successful test-split (:func:`~dynaweb_env.data.shipped.split_of`) ones count.
    ``prefixes`` ``P > 1``: also the first ``ceil(i * n / P)`` of a demonstration's ``n`` actions for ``i < P``
    (distinct, shorter than all but the last): real failures that got unequally far, for
    :func:`~benchmarks.dream_rewards_guards.progress_ordering`. Each is named by how many actions it keeps.
    ``tasks``: only these tasks' demonstrations (``[]``: all).
    """
    dreams = []
    if path is None:
        held_out = [t for t in iter_trajectories(EXPERT_TRAJECTORIES) if t.metadata.get("split") == "test"]
    else:
        seeded = [t for t in iter_trajectories(path) if isinstance(t.metadata.get("seed"), int) and t.success]
        held_out = [t for t in seeded if split_of(t.metadata["seed"]) == "test"]
    multi = [t for t in held_out if sum(bool(s.action.strip()) for s in t.steps) > 1]
    multi = [t for t in multi if not tasks or t.task_id in tasks]
    rank = {t.id: sum(o.task_id == t.task_id for o in multi[:i]) for i, t in enumerate(multi)}
    # Round robin over tasks, so that the first N demonstrations cover every task rather than the first one.
    for demo in sorted(multi, key=lambda t: rank[t.id])[:count]:
        start = {"task_id": demo.task_id, "goal": demo.goal, "url": demo.steps[0].url, "trajectory_id": demo.id}
        start |= {"task_seed": demo.metadata.get("seed"), "step_index": 0}
        acted = [step for step in demo.steps if step.action.strip()]
        shorter = sorted({-(-i * len(acted) // prefixes) for i in range(1, prefixes)} - {0, len(acted) - 1})
        cuts = [("full", acted), ("cut", acted[:-1])] + [(f"cut{n}", acted[:n]) for n in shorter if n < len(acted)]
        for name, steps in cuts:
            metadata = {"options": {"start_state": start}, "demonstration": name}
            ended = dataclasses.replace(demo.steps[-1], action="")
            dreams.append(
                Trajectory(f"{demo.id}/{name}", demo.task_id, demo.goal, "dream", [*steps, ended], metadata=metadata)
            )
    return dreams


def run(
    dreams: Sequence[tuple[str, Trajectory]],
    max_steps: int,
    guards: dict[str, dict[str, Any]] | None = None,
    models: dict[str, Any] | None = None,
    seed: int = 0,
    save: Callable[[dict[str, Any]], None] | None = None,
    replayed_before: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Replay every ``(run, dream)``, then re-dream the replayed ones under each guard setting (all dreams of a
    setting stepped together); per-run and overall comparisons. ``save`` receives the report so far every
    :data:`SAVE_EVERY` replays, after the replays and after each setting (a long run that is stopped keeps what it
    measured). A dream with a row in ``replayed_before`` (a stopped run's report, ``--resume``) is not replayed
    again: its row is reused, guard outcomes left out (the settings are re-dreamed)."""
    previous = {_dream_key(row): row for row in replayed_before if row.get("replayed")}
    env = gym.make("RealWeb-v0", max_steps=max_steps)
    rows = []
    guards, done, failed = guards or {}, {}, {}
    save = save or (lambda report: None)
    try:
        for run_name, dream in tqdm(dreams, desc="replaying dreams", unit="dream"):
            key = (run_name, dream.id, dream.metadata.get("global_step"))
            if key in previous:
                rows.append({name: value for name, value in previous[key].items() if name != "guards"})
                continue
            row = {
                "run": run_name,
                "id": dream.id,
                "global_step": dream.metadata.get("global_step"),
                "task_id": dream.task_id,
                "dream_actions": [step.action for step in dream.steps if step.action],
                "dream_reward": None if dream.metadata.get("demonstration") else float(dream.reward),
                "judge_reasoning": dream.metadata.get("judge_reasoning", ""),
            }
            row["group"] = group_key(row, dream)
            row |= replay(env, dream)
            rows.append(row)
            if len(rows) % SAVE_EVERY == 0:
                save(make_report(rows, done, failed, guards, models))
    finally:
        env.close()
    save(make_report(rows, done, failed, guards, models))
    replayed = [(row, dream) for row, (_, dream) in zip(rows, dreams, strict=True) if row["replayed"]]
    marked = [dataclasses.replace(d, metadata={**d.metadata, "group": row["group"]}) for row, d in replayed]
    base: list = []
    # The unguarded re-dream first: every judge-only setting reuses its pages (rejudge_all).
    ordered = sorted(guards.items(), key=lambda item: bool(item[1]))
    for name, setting in tqdm(ordered, desc="re-dreaming under each guard setting", unit="setting"):
        try:
            if base and set(setting) <= JUDGE_ONLY_FIELDS:
                results = rejudge_all(marked, base, setting, models or {}, seed)
            else:
                results = redream_all(marked, setting, models or {}, seed, keep=None if setting else base)
        except Exception as error:  # one failing setting must not lose the hours the others took
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"dream_rewards: guards {name} failed: {failed[name]}", file=sys.stderr)
            continue
        for (row, _), outcome in zip(replayed, results, strict=True):
            row.setdefault("guards", {})[name] = outcome
        done[name] = setting
        save(make_report(rows, done, failed, guards, models))
    return make_report(rows, done, failed, guards, models)


def _dream_key(row: dict[str, Any]) -> tuple[str, str, Any]:
    return row["run"], row["id"], row.get("global_step")


def make_report(
    rows: list[dict[str, Any]],
    done: dict[str, dict[str, Any]],
    failed: dict[str, str],
    guards: dict[str, dict[str, Any]],
    models: dict[str, Any] | None,
) -> dict[str, Any]:
    """The comparisons of the replayed dreams and of every guard setting measured so far (``done``)."""
    runs = sorted({row["run"] for row in rows})
    tasks = sorted({row["task_id"] for row in rows})
    report = {
        "overall": compare(rows),
        "per_run": {name: compare([row for row in rows if row["run"] == name]) for name in runs},
        "per_task": {task: compare([row for row in rows if row["task_id"] == task]) for task in tasks},
    }
    if guards:
        redreamed = [row for row in rows if "guards" in row]
        report["guards"] = {
            name: {"reward_guards": setting, **guard_summary(redreamed, name)} for name, setting in done.items()
        }
        for name, setting in done.items():
            parsed = RewardGuards.parse(setting)
            if parsed.world_model_samples > 1 and parsed.uncertainty == "discount":
                modes = uncertainty_modes(redreamed, name, parsed.uncertainty_discount)
                report["guards"][name]["uncertainty_modes"] = modes
        report["guards_failed"] = failed
        report["guards_pending"] = [name for name in guards if name not in done and name not in failed]
        report["guard_models"] = models
    return report | {"dreams": rows}


def parse_guards(values: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--guards`` values (``none`` or JSON objects of reward_guards) by name; ``ValueError`` for a bad one."""
    parsed = {}
    for value in values:
        setting = {} if value == "none" else json.loads(value)
        RewardGuards.parse(setting)  # a clear error now, not after an hour of replays
        parsed["none" if not setting else json.dumps(setting, sort_keys=True, separators=(",", ":"))] = setting
    return parsed


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/dream_rewards.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--episodes",
        nargs="+",
        type=Path,
        default=None,
        help="training episode logs (default: every runs/claims/shared/*/episodes.jsonl)",
    )
    parser.add_argument("--max-steps", type=int, default=10, help="real steps before truncation (default 10)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"default {rel(RESULTS)}")
    parser.add_argument(
        "--guards", nargs="+", default=[], help="re-dream each dream with these reward_guards (JSON, or 'none')"
    )
    parser.add_argument("--demonstrations", type=int, default=0, help="add dreams from N held-out demonstrations")
    parser.add_argument(
        "--demonstrations-file",
        type=Path,
        default=None,
        help="take --demonstrations from this trajectory JSONL (its successful test-split seeds), not the shipped ones",
    )
    parser.add_argument(
        "--demonstration-prefixes",
        type=int,
        default=1,
        help="P > 1: also dream each demonstration's first ceil(i*n/P) of n actions, i < P (default 1: full and cut)",
    )
    parser.add_argument(
        "--demonstration-tasks",
        nargs="+",
        default=[],
        help="only these tasks' demonstrations; suite names stand for their tasks (e.g. long)",
    )
    parser.add_argument(
        "--world-model-max-new-tokens",
        type=int,
        default=384,
        help="token budget of a re-dreamed page (default 384, as dynaweb-train's cpu-small preset)",
    )
    parser.add_argument(
        "--world-model", default=TRAINING_WORLD_MODEL, help="world model of re-dreams (dynaweb-train's own)"
    )
    parser.add_argument("--judge", default=TRAINED_JUDGE, help="judge of re-dreams")
    parser.add_argument(
        "--judge-max-new-tokens",
        type=int,
        default=None,
        help="token budget of a re-dream's verdict (default: the env's)",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of re-dreams")
    parser.add_argument(
        "--resume", action="store_true", help="reuse the replays already in --output (a stopped or earlier run)"
    )
    args = parser.parse_args(argv)
    try:
        guards = parse_guards(args.guards)
    except ValueError as error:
        print(f"dream_rewards: error: --guards: {error}", file=sys.stderr)
        return 2
    default = sorted((ROOT / "runs" / "claims" / "shared").glob("*/episodes.jsonl"))
    paths = args.episodes or ([] if args.demonstrations else default)
    missing = [path for path in paths if not path.is_file()]
    if (not paths and not args.demonstrations) or missing:
        print(
            f"dream_rewards: error: no episode log at {missing or 'runs/claims/shared/*/episodes.jsonl'}",
            file=sys.stderr,
        )
        return 2
    dreams = [(rel(path.parent), dream) for path in paths for dream in dreams_of(path)]
    tasks = expand_tasks(args.demonstration_tasks) if args.demonstration_tasks else []
    demos = demonstration_dreams(args.demonstrations, args.demonstrations_file, args.demonstration_prefixes, tasks)
    dreams += [("demonstrations", dream) for dream in demos]
    models = {"world_model": args.world_model, "judge": args.judge, "max_new_tokens": args.world_model_max_new_tokens}
    if args.judge_max_new_tokens is not None:
        models["judge_max_new_tokens"] = args.judge_max_new_tokens
    command = shlex.join(["python", "benchmarks/dream_rewards.py", *(argv if argv is not None else sys.argv[1:])])

    def save(report: dict[str, Any]) -> dict[str, Any]:
        report = {
            "command": command,
            "episodes": [rel(path) for path in paths],
            "demonstrations_file": None if args.demonstrations_file is None else str(args.demonstrations_file),
            "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **report,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        temporary = args.output.with_name(args.output.name + ".tmp")
        temporary.write_text(json.dumps(report, indent=2) + "\n")
        temporary.replace(args.output)  # atomic: a run stopped while writing keeps the last whole report
        return report

    before = json.loads(args.output.read_text()).get("dreams", []) if args.resume and args.output.is_file() else []
    report = save(run(dreams, args.max_steps, guards, models, args.seed, save=save, replayed_before=before))
    print(f"{'':44} {'dreams':>6} {'agree':>6} {'judged S->real S':>17} {'real S seen':>11}")
    for name, summary in [("all", report["overall"]), *report["per_run"].items(), *report["per_task"].items()]:
        print(
            f"{name[-44:]:44} {summary['compared']:>6} {fmt(summary['agreement']):>6} "
            f"{fmt(summary['judge_success_precision']):>17} {fmt(summary['real_success_recall']):>11}"
        )
    print(f"{'re-dreamed under reward guards':44} {'dreams':>6} {'agree':>6} {'judged S->real S':>17} "
          f"{'real S seen':>11} {'gap':>5} {'order':>5}")  # fmt: skip
    rows = [(name, summary) for name, summary in report.get("guards", {}).items()]
    for name, summary in list(rows):
        rows += [(f"{name} as {mode}", modes) for mode, modes in summary.get("uncertainty_modes", {}).items()]
    for name, summary in rows:
        print(
            f"{name[-44:]:44} {summary['compared']:>6} {fmt(summary['agreement']):>6} "
            f"{fmt(summary['judge_success_precision']):>17} {fmt(summary['real_success_recall']):>11} "
            f"{fmt(summary['reward_gap']):>5} {fmt(summary['ordering_accuracy']):>5}"
        )
    print(f"dream_rewards: {report['overall']['compared']} dreams compared; {rel(args.output)}")
    return 0


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
