"""Does a policy pick the expert's next action on held-out expert episodes? (teacher-forced, per task and turn)

A policy that fails a task in closed loop either never learned its actions or drifts once its own actions take it
off the expert's path. This replays held-out expert episodes (the all-tasks dataset's validation split), encoded as
``dynaweb eval`` encodes a policy's episode (:class:`~dynaweb_trainer.encoding.EpisodeEncoder`, trees cut at
``--max-axtree-chars``, ``--page-history``, up to the task's step limit), and at every turn asks the policy for its
greedy answer to the expert's history so far. The conversation goes on with the expert's action whatever the policy
said, so every turn is scored on the expert's path.

Reported per task, and per turn index over all tasks:

- ``same_action``: the answer's action is the expert's (the same parsed name and arguments);
- ``same_verb_and_target``: same action name and element id (``type [21] [<other text>]`` counts);
- ``unparsable``: the answer holds no action in the grammar;
- ``repeats_previous``: not the expert's action but the one before it (the action the conversation just took): the
  policy copies the last turn instead of moving on.

Command (the one that produced ``benchmarks/results/paper_claims/expert_agreement_long.json``)::

    python -m benchmarks.expert_agreement --policy /work/runs/claims/shared/sft-seed0-2adef35d \\
        --tasks miniwob.book-flight miniwob.choose-date miniwob.daily-calendar miniwob.click-checkboxes-large
    # its saved answers scored again with today's rates (``repeats_previous`` came later; no model is loaded):
    python -m benchmarks.expert_agreement --rescore benchmarks/results/paper_claims/expert_agreement_long.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, not with -m: import `benchmarks` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.turn_prefill import add_replay_arguments, expert_episodes, replay_side_by_side  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "paper_claims"


def compare(answer: str, expert: str, previous: str | None = None) -> tuple[bool, bool, bool, bool]:
    """``(same action, same verb and target, unparsable, repeats previous)`` of a policy's answer against the
    expert's action (and the expert's ``previous`` one, the action the conversation took last; ``None`` at the first
    turn)."""
    from dynaweb_env.actions import extract_action, parse_action

    try:
        mine = parse_action(extract_action(answer))
    except ValueError:
        return False, False, True, False
    theirs = parse_action(expert)
    same = (mine.name, mine.args) == (theirs.name, theirs.args)
    same_target = mine.name == theirs.name and mine.args[:1] == theirs.args[:1]
    before = parse_action(previous) if previous else None
    repeats = not same and before is not None and (mine.name, mine.args) == (before.name, before.args)
    return same, same_target, False, repeats


def rates(rows: list[tuple[bool, bool, bool, bool]]) -> dict[str, Any]:
    """The four rates of a list of :func:`compare` results, with their count."""
    return {
        "turns": len(rows),
        **{
            key: round(statistics.fmean(row[index] for row in rows), 3)
            for index, key in enumerate(("same_action", "same_verb_and_target", "unparsable", "repeats_previous"))
        },
    }


def score(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The rates of a replay's answers, over all turns, per task and per turn index, and each turn scored.

    Args:
        episodes: ``{"task_id", "trajectory_id", "turns": [{"expert", "policy"}, ...]}`` per episode.
    """
    scored = [
        [
            compare(turn["policy"], turn["expert"], episode["turns"][index - 1]["expert"] if index else None)
            for index, turn in enumerate(episode["turns"])
        ]
        for episode in episodes
    ]
    by_task: dict[str, list[tuple[bool, bool, bool, bool]]] = {}
    for episode, rows in zip(episodes, scored, strict=True):
        by_task.setdefault(episode["task_id"], []).extend(rows)
    longest = max(len(rows) for rows in scored)
    return {
        "all": rates([row for rows in scored for row in rows]),
        "per_task": {task: rates(rows) for task, rows in by_task.items()},
        "per_turn": [rates([rows[turn] for rows in scored if turn < len(rows)]) for turn in range(longest)],
        "episodes": [
            {
                **{key: episode[key] for key in ("task_id", "trajectory_id")},
                "turns": [
                    {
                        "expert": turn["expert"],
                        "policy": turn["policy"],
                        "same_action": row[0],
                        "repeats_previous": row[3],
                    }
                    for turn, row in zip(episode["turns"], rows, strict=True)
                ],
            }
            for episode, rows in zip(episodes, scored, strict=True)
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="benchmarks/expert_agreement.py")
    add_replay_arguments(parser)
    parser.add_argument("--episodes-per-task", type=int, default=2, help="held-out expert episodes of each task")
    parser.add_argument("--output", type=Path, default=RESULTS / "expert_agreement_long.json")
    parser.add_argument(
        "--rescore",
        type=Path,
        metavar="JSON",
        help="score a saved report's answers again with today's rates (no model)",
    )
    args = parser.parse_args(argv)
    if args.rescore:
        report = json.loads(args.rescore.read_text())
        report.update(score(report["episodes"]))
        args.rescore.write_text(json.dumps(report, indent=1) + "\n")
    else:
        report = replay(args, argv)
    print(f"expert's next action on {report['all']['turns']} held-out turns: {report['all']}")
    for task, values in report["per_task"].items():
        print(f"  {task:34s} {values}")
    return report


def replay(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    """The policy's greedy answer at every turn of the held-out expert episodes, scored (``--output`` written)."""
    from dynaweb_env.llm.base import SamplingParams
    from dynaweb_trainer.encoding import EpisodeEncoder
    from dynaweb_trainer.policy import load_policy

    backend = load_policy(args.policy).policy.backend
    encoder = EpisodeEncoder(backend.tokenizer, max_axtree_chars=args.max_axtree_chars, page_history=args.page_history)
    episodes = expert_episodes(args.tasks, encoder, args.max_steps, args.episodes_per_task)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0)
    started = time.perf_counter()
    rows, _, generations = replay_side_by_side(episodes, {"policy": backend}, params, args.num_envs)
    answers: list[list[str]] = [[] for _ in episodes]
    for (i, _turn), generation in zip(rows, generations["policy"], strict=True):  # each episode's turns in order
        answers[i].append(generation.text)
    played = [
        {
            "task_id": episode.task_id,
            "trajectory_id": episode.trajectory_id,
            "turns": [
                {"expert": action, "policy": answer} for action, answer in zip(episode.actions, texts, strict=True)
            ],
        }
        for episode, texts in zip(episodes, answers, strict=True)
    ]
    report: dict[str, Any] = {
        "command": shlex.join(
            ["python", "-m", "benchmarks.expert_agreement", *(sys.argv[1:] if argv is None else argv)]
        ),
        "policy": args.policy,
        "observation": {"max_axtree_chars": args.max_axtree_chars, "page_history": args.page_history},
        **score(played),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
