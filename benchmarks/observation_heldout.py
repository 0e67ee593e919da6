"""The shipped world model and judge on held-out real trajectories, before and after the clickable observation.

Command (the one that produced ``benchmarks/results/observation/observation_heldout.json``)::

    python -m benchmarks.observation_heldout --seeds 8 13

The shipped world model (0.90 strict F1 on the held-out ``heldout.jsonl``, ``heldout/full_patch_retries2.json``)
and judge (0.95 on 186 cases of seeds 8 and 13, ``judge_dagger2/shipped_real_heldout.json``) were measured on
trajectories recorded before ``RealWeb-v0`` kept clickable ``generic`` elements. Here the same held-out trajectories
(the shipped large dataset's ``validation`` split, task seeds ``--seeds``: :func:`~dynaweb_env.data.shipped.split_of`
sets them apart, and neither model trained on them) are replayed action by action on their real pages, and each page
is flattened both ways from the same BrowserGym observation:

* the old flattening must give back the recorded tree (a page that does not is reported, and its trajectory is
  left out of the comparison: the replay did not reach the recorded page);
* the new one (RealWeb-v0's default) replaces it.

A trajectory none of whose pages change is the same input to both models, so its committed scores stand. The
trajectories that changed are evaluated with the commands that produced the committed numbers (``dynaweb-eval-wm
--no-judge --max-depth 0 --invalid-retries 2`` for the world model, ``--judge-only`` for the judge), and set beside
the committed per-transition and per-case results of the same trajectories on the old observation (``--rescore-old``
also re-measures those in this run, against drift of the engine since). One JSON holds both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import LARGE_DATA_DIR, split_of
from dynaweb_trainer.world_model_scores import summarise

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.observation_tokens import RecordingEnv, flattenings  # noqa: E402

RESULTS_DIR = Path(__file__).parent / "results"
RESULTS = RESULTS_DIR / "observation" / "observation_heldout.json"
OLD_WORLD_MODEL = RESULTS_DIR / "heldout" / "full_patch_retries2.json"
OLD_JUDGE = RESULTS_DIR / "judge_dagger2" / "shipped_real_heldout.json"
WORLD_MODEL_ARGS = ["--no-judge", "--max-depth", "0", "--invalid-retries", "2", "--split", "all"]
JUDGE_ARGS = ["--judge-only", "--split", "all"]


def held_out(data: Path, seeds: list[int], max_per_task: int) -> list[Trajectory]:
    """The first ``max_per_task`` trajectories of each (task, policy) of ``data`` on ``seeds``, in file order."""
    from dynaweb_trainer.evaluate_world_model import per_task_sample

    if any(split_of(seed) == "train" and split_of(seed, validation=True) == "train" for seed in seeds):
        raise SystemExit(f"observation_heldout: seeds {seeds} include training seeds (split_of)")
    chosen = [t for t in read_trajectories(data) if t.metadata.get("seed") in set(seeds)]
    return per_task_sample(chosen, max_per_task)


def replay(env: RecordingEnv, trajectory: Trajectory) -> dict[str, Any]:
    """Replay ``trajectory``'s actions on its real page: the new-observation copy and whether the replay was faithful.

    Returns:
        ``{"trajectory": the copy with every page flattened the new way, "faithful": every page's old flattening
        equals the recorded tree and the reward is the recorded one, "changed": some page differs, ...}``.
    """
    env.pages = []
    options = {"task": trajectory.task_id, "task_seed": trajectory.metadata["seed"]}
    env.reset(options=options)
    reward, ended = 0.0, False
    for step in trajectory.steps:
        if not step.action.strip() or ended:
            break
        _, reward, terminated, truncated, _ = env.step(step.action)
        ended = terminated or truncated
    pages = env.pages[: len(trajectory.steps)]
    steps, mismatched = [], 0
    for step, page in zip(trajectory.steps, pages, strict=False):
        texts = flattenings(page["browser_obs"])
        mismatched += texts["before"] != step.axtree
        steps.append(dataclasses.replace(step, axtree=page["observation"]["axtree"]))
    faithful = len(pages) == len(trajectory.steps) and not mismatched and float(reward) == float(trajectory.reward)
    changed = any(new.axtree != old.axtree for new, old in zip(steps, trajectory.steps, strict=False))
    copy = dataclasses.replace(trajectory, steps=steps) if len(steps) == len(trajectory.steps) else trajectory
    return {"trajectory": copy, "faithful": faithful, "changed": changed, "pages_mismatched": mismatched,
            "reward": float(reward)}  # fmt: skip


def evaluate(model: str, extra_args: list[str], trajectories: list[Trajectory], workdir: Path, name: str) -> dict:
    """``dynaweb-eval-wm`` of ``model`` on ``trajectories`` (written to ``workdir``); its report's result for it."""
    from dynaweb_trainer.evaluate_world_model import main as eval_wm

    data, output = workdir / f"{name}.jsonl", workdir / f"{name}_eval.json"
    write_trajectories(data, trajectories)
    report = eval_wm(["--world-models", model, *extra_args, "--data", str(data), "--output", str(output)])
    result = report["results"][model]
    return {"command": report["command"], "seconds": result["seconds"], "transitions": result["transitions"],
            "judge": result["judge"]}  # fmt: skip


def committed(path: Path, model: str) -> dict:
    """The committed per-transition and per-case results of ``model`` in the eval report ``path``."""
    report = json.loads(path.read_text())
    if model not in report["results"]:  # another model than the shipped one: nothing committed to compare with
        return {"command": f"{model} is not in {path.name}", "transitions": [], "judge": []}
    result = report["results"][model]
    judged = result.get("judge")
    judged = json.loads(judged) if isinstance(judged, str) else judged
    return {"command": report["command"], "transitions": result.get("transitions") or [], "judge": judged or []}


def compare(old: dict, new: dict, ids: set[str], kind: str) -> dict[str, Any]:
    """The summaries of ``old`` and ``new`` on the same trajectories ``ids`` (their transitions, or judge cases)."""

    def of(result: dict) -> list[dict]:
        rows = result["transitions"] if kind == "world_model" else result["judge"]
        return [row for row in rows if row["trajectory"].split("/cut")[0] in ids]

    if kind == "world_model":
        keys = ("transitions", "valid", "f1", "strict_f1", "exact", "terminal_correct")
        summaries = [summarise(of(result), {}, None) for result in (old, new)]
    else:
        keys = ("judge_cases", "judge_accuracy", "judge_success_recall", "judge_failure_recall")
        summaries = [summarise([], {}, of(result)) for result in (old, new)]
    return {name: {key: summary[key] for key in keys} for name, summary in zip(("old", "new"), summaries, strict=True)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Replay, evaluate the changed trajectories, compare with the committed results; save and return the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=LARGE_DATA_DIR / "validation", help="held-out trajectories")
    parser.add_argument("--seeds", type=int, nargs="+", default=[8, 13], help="held-out task seeds (default 8 13)")
    parser.add_argument("--max-per-task", type=int, default=2, help="trajectories per task and policy (default 2)")
    parser.add_argument("--tasks", nargs="*", default=None, help="only these tasks (default: all in --data)")
    parser.add_argument("--world-model", default="smollm2-135m-wm-patch")
    parser.add_argument("--judge", default="smollm2-135m-judge-dagger")
    parser.add_argument("--old-world-model-results", type=Path, default=OLD_WORLD_MODEL)
    parser.add_argument("--old-judge-results", type=Path, default=OLD_JUDGE)
    parser.add_argument("--rescore-old", action="store_true", help="also re-measure the old trajectories that changed")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.time()
    trajectories = held_out(args.data, args.seeds, args.max_per_task)
    if args.tasks:
        trajectories = [t for t in trajectories if t.task_id in set(args.tasks)]
    env = RecordingEnv(task=trajectories[0].task_id, clickable=True, max_steps=50)
    try:
        replays = {t.id: replay(env, t) for t in trajectories}
    finally:
        env.close()
    changed = [r["trajectory"] for r in replays.values() if r["faithful"] and r["changed"]]
    ids = {t.id for t in changed}
    old_by_id = {t.id: t for t in trajectories}
    report: dict[str, Any] = {
        "benchmark": "observation_heldout",
        "command": shlex.join(["python", "-m", "benchmarks.observation_heldout",
                               *(argv if argv is not None else sys.argv[1:])]),  # fmt: skip
        "data": str(args.data), "seeds": args.seeds, "max_per_task": args.max_per_task,
        "trajectories": len(trajectories),
        "faithful_replays": sum(r["faithful"] for r in replays.values()),
        "changed": sorted(ids),
        "unfaithful": {i: {k: r[k] for k in ("pages_mismatched", "reward")} for i, r in replays.items()
                       if not r["faithful"]},
        "changed_transitions": sum(sum(1 for s in t.steps[:-1] if s.action.strip()) for t in changed),
    }  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage, so a run stopped part-way keeps what it measured
        report["wall_seconds"] = round(time.time() - started, 1)
        args.output.write_text(json.dumps(report, indent=1) + "\n")

    save()
    workdir = Path(tempfile.mkdtemp(prefix="observation_heldout_"))
    for kind, model, extra, old_path in (
        ("world_model", args.world_model, WORLD_MODEL_ARGS, args.old_world_model_results),
        ("judge", args.judge, JUDGE_ARGS, args.old_judge_results),
    ):
        if not changed:
            break
        new = evaluate(model, extra, changed, workdir, f"{kind}_new")
        old = committed(old_path, model) if old_path.exists() else {"transitions": [], "judge": [], "command": ""}
        entry = {"model": model, "new_command": new["command"], "committed_command": old["command"],
                 "seconds": new["seconds"], "committed_vs_new": compare(old, new, ids, kind)}  # fmt: skip
        if args.rescore_old:
            rescored = evaluate(model, extra, [old_by_id[i] for i in sorted(ids)], workdir, f"{kind}_old")
            entry["rescored_old_vs_new"] = compare(rescored, new, ids, kind)
            entry["rescored_old"] = {"transitions": rescored["transitions"], "judge": rescored["judge"]}
        entry["new"] = {"transitions": new["transitions"], "judge": new["judge"]}
        report[kind] = entry
        save()
        print(f"{kind}: {json.dumps(entry['committed_vs_new'])}", file=sys.stderr, flush=True)
    save()
    print(json.dumps({k: v for k, v in report.items() if k not in ("world_model", "judge", "changed")}, indent=1))
    for kind in ("world_model", "judge"):
        if kind in report:
            print(kind, json.dumps({k: v for k, v in report[kind].items() if k.endswith("_vs_new")}, indent=1))
    return report


if __name__ == "__main__":
    main()
