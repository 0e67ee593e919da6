"""Would another scoring rule have planned differently? Every recorded planning run re-scored, no new dreams.

Each planned step of a ``benchmarks.planning`` run records every candidate's judged dream (its probability of
SUCCESS, 0/1 verdict, ``ended``, objective ``progress``, ...; :class:`~dynaweb_env.envs.lookahead.ImaginedOutcome`).
So the planner's choice can be recomputed from the record under any rule of scoring, without dreaming again:

1. **Reproduce.** The shipped rule (:func:`dynaweb_trainer.planning.score` at
   :data:`~dynaweb_trainer.planning.DEFAULT_PROGRESS_WEIGHT`, :func:`~dynaweb_trainer.planning.pick` at the
   planner's tie margin) must give the recorded choice on every step; a mismatch means the record is not the rule's.
2. **Re-score.** Each rule in :data:`RULES` is applied to the same candidates: the steps where its choice differs
   are counted and listed with whether their episode succeeded.

A changed choice can only move its own episode, so per run the rule's effect is bounded: it can gain at most the
failed episodes with a changed step, and lose at most the successful ones. When both bounds stay below an arm's
spread over run seeds, no replay can show the rule better than the spread, and it is not worth the pages.

Command::

    python -m benchmarks.planning_rescore   # benchmarks/results/planning/planning_rescore.json
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dynaweb_env.envs.lookahead import ImaginedOutcome  # noqa: E402
from dynaweb_trainer.planning import DEFAULT_PROGRESS_WEIGHT, PlanningPolicy, pick, score  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "planning"
OUTCOME_FIELDS = [f.name for f in dataclasses.fields(ImaginedOutcome)]
#: The planner's default tie margin, as every recorded run used it.
TIE_MARGIN = float(inspect.signature(PlanningPolicy).parameters["tie_margin"].default)


def outcome_of(candidate: dict[str, Any]) -> ImaginedOutcome | None:
    """The recorded candidate's judged dream, ``None`` if it was not dreamed (a lone candidate)."""
    if "ended" not in candidate:
        return None
    return ImaginedOutcome(**{name: candidate.get(name) for name in OUTCOME_FIELDS})


def shipped(outcome: ImaginedOutcome | None) -> float:
    """The planner's rule as shipped."""
    return score(outcome, DEFAULT_PROGRESS_WEIGHT)


def ended_progress_cap(outcome: ImaginedOutcome | None) -> float:
    """The shipped rule, and an *ended* dream that met fewer than all of the objective's explicit requirements
    scores at most ``w`` times its progress (as an unfinished one scores at least that): the judge alone cannot then
    rank a dream that typed ``dapg`` for ``"DApg"`` above the right one."""
    value = shipped(outcome)
    if outcome is not None and value >= 0 and outcome.ended and outcome.progress is not None and outcome.progress < 1:
        value = min(value, DEFAULT_PROGRESS_WEIGHT * outcome.progress)
    return value


#: The rules compared with the shipped one.
RULES: dict[str, Callable[[ImaginedOutcome | None], float]] = {"ended_progress_cap": ended_progress_cap}


def choice(candidates: Sequence[dict[str, Any]], rule: Callable[[ImaginedOutcome | None], float]) -> int:
    """The index the planner picks under ``rule`` (candidate 0 is the policy's own answer)."""
    own = next((i for i, c in enumerate(candidates) if c.get("own")), 0)
    return pick([rule(outcome_of(c)) for c in candidates], own=own, tie_margin=TIE_MARGIN)


def rescore_run(path: Path) -> dict[str, Any]:
    """One recorded run: its planned steps, the shipped rule's mismatches, and each rule's changed choices."""
    report = json.loads(path.read_text())
    steps = mismatches = 0
    rules: dict[str, dict[str, Any]] = {name: {"changed_steps": [], "episodes": set()} for name in RULES}
    for episode in report["episodes"]:
        for plan in episode.get("plans") or []:
            candidates = plan["candidates"]
            steps += 1
            recorded = candidates[choice(candidates, shipped)]["action"]
            mismatches += recorded != plan["chosen"]
            for name, rule in RULES.items():
                new = candidates[choice(candidates, rule)]["action"]
                if new != recorded:
                    where = f"{episode['task_id']} {episode['task_seed']} turn {plan['turn']}"
                    rules[name]["changed_steps"].append(
                        {"page": where, "from": recorded, "to": new, "episode_success": bool(episode["success"])}
                    )
                    rules[name]["episodes"].add((episode["task_id"], episode["task_seed"], bool(episode["success"])))
    out: dict[str, Any] = {
        "planned_steps": steps,
        "shipped_rule_mismatches": mismatches,
        "success_rate": report["summary"]["success_rate"],
        "rules": {},
    }
    for name, found in rules.items():
        episodes = found.pop("episodes")
        found["may_gain_episodes"] = sum(not success for *_, success in episodes)
        found["may_lose_episodes"] = sum(success for *_, success in episodes)
        found["episodes"] = len(report["episodes"])
        out["rules"][name] = found
    return out


def arm_bounds(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An arm's mean success and spread over its run seeds, and how far each rule could move the mean at most."""
    rates = [run["success_rate"] for run in runs]
    row: dict[str, Any] = {
        "run_seeds": len(runs),
        "success_mean": round(statistics.mean(rates), 4),
        "spread": round(statistics.stdev(rates), 4) if len(rates) > 1 else None,
    }
    for name in RULES:
        rules = [run["rules"][name] for run in runs]
        row[name] = {
            "mean_gain_at_most": round(statistics.mean(r["may_gain_episodes"] / r["episodes"] for r in rules), 4),
            "mean_loss_at_most": round(statistics.mean(r["may_lose_episodes"] / r["episodes"] for r in rules), 4),
        }
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=str(RESULTS / "runs"), help="Folder of <policy>/K*-d*-seed*.json runs.")
    parser.add_argument("--output", default=str(RESULTS / "planning_rescore.json"))
    args = parser.parse_args(argv)
    runs = sorted(p for p in Path(args.runs).glob("*/K*-d*-seed*.json") if not p.name.startswith("K0-"))
    by_run = {str(p.relative_to(args.runs)): rescore_run(p) for p in runs}
    totals: dict[str, Any] = {
        "runs": len(by_run),
        "planned_steps": sum(r["planned_steps"] for r in by_run.values()),
        "shipped_rule_mismatches": sum(r["shipped_rule_mismatches"] for r in by_run.values()),
    }
    for name in RULES:
        rows = [r["rules"][name] for r in by_run.values()]
        totals[name] = {
            "changed_steps": sum(len(r["changed_steps"]) for r in rows),
            "may_gain_episodes": sum(r["may_gain_episodes"] for r in rows),
            "may_lose_episodes": sum(r["may_lose_episodes"] for r in rows),
            "most_episodes_one_run_may_gain": max((r["may_gain_episodes"] for r in rows), default=0),
        }
    arms: dict[str, list[dict[str, Any]]] = {}
    for name, run in by_run.items():  # "<policy>/K2-d1-seed0.json" -> "<policy>/K2-d1"
        arms.setdefault(name.rsplit("-seed", 1)[0], []).append(run)
    by_arm = {arm: arm_bounds(runs) for arm, runs in sorted(arms.items())}
    for name in RULES:
        totals[name]["arms_whose_bound_reaches_the_spread"] = [
            arm for arm, row in by_arm.items() if row[name]["mean_gain_at_most"] >= (row["spread"] or 0.0) > 0
        ]
    result = {
        "command": "python -m benchmarks.planning_rescore " + " ".join(argv if argv is not None else sys.argv[1:]),
        "progress_weight": DEFAULT_PROGRESS_WEIGHT,
        "tie_margin": TIE_MARGIN,
        "totals": totals,
        "by_arm": by_arm,
        "by_run": by_run,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(totals, indent=1))
    return result


if __name__ == "__main__":
    main()
