"""Importer for the NNetNav web trajectories the DynaWeb paper trains on (NNetNav-WA, NNetNav-Live).

DynaWeb trains its world model on real transitions from the StanfordNLP NNetNav data (paper,
section 3.2) and interleaves them as expert trajectories. No dataset hub is reachable here, so a
user who has the data on disk points this importer at it; it maps every trajectory onto
:class:`~dynaweb_env.data.schema.Trajectory` (source ``"expert"``) and cleans them as the paper
does, reporting what was dropped and why.

Layouts read (auto-detected per record)
---------------------------------------

**Step rows** — the published Hugging Face datasets ``stanfordnlp/nnetnav-wa`` and
``stanfordnlp/nnetnav-live`` (``train.jsonl`` / ``test.jsonl``). One row per *step*, written by
NNetNav's ``scripts/convert_to_sft_agentlab.py`` (github.com/MurtyShikhar/NNetnav)::

    {"dataset": "webarena_llm", "id": "<trajectory id>", "task_name": "<trajectory id>",
     "prompt": "<Llama-3 formatted prompt>", "output": "<Llama-3 formatted answer>", "n_tokens": 1328,
     "messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "OBSERVATION:\\n<tree>\\nURL: <url>\\nOBJECTIVE: <intent>\\n"
                                              "PREVIOUS ACTIONS:\\n1: None\\n2: click [632] where [632] is ..."},
                  {"role": "assistant", "content": "Let's think step-by-step. ... In summary, the next "
                                                   "action I will perform is ```click [1475]```"}]}

Rows of one trajectory share ``task_name`` (or ``id``); the step index is the number of entries under
``PREVIOUS ACTIONS`` (the first step lists ``1: None``); the last step's action is ``stop [...]``.

**Demonstrations** — NNetNav's own per-trajectory post-processing output
(``filtered_parsed_with_retroactive_stop_action.json``, the input of that script)::

    {"task_id": ..., "intent": ..., "obs": [<tree>, ...], "parsed_actions": ["click [12]", ...],
     "retroactive_reasoning": ["Let's think step-by-step. ...", ...], "stop_action": "stop [...]",
     "action_descriptions": [...], "sites": ["shopping"]}

``obs[i]`` is the page where ``parsed_actions[i]`` was taken; the last action is replaced by
``stop_action``, as NNetNav does. URLs come from the ``url='...'`` of each tree's root line.

Files read: ``.jsonl`` (a corrupt line is reported and skipped), ``.json`` (a list of records or
``{"data": [...]}``), ``.parquet``, a ``datasets.save_to_disk`` directory, or a directory of such files.

Cleaning (the paper: "missing observations, invalid actions, or inconsistent state transitions")
-----------------------------------------------------------------------------------------------

A trajectory is dropped, with the first reason found counted in :class:`NNetNavImportReport`, if:

- ``missing_observation``: a step has no accessibility tree, or a step index is missing;
- ``invalid_action``: an action is outside the grammar of :mod:`dynaweb_env.actions`;
- ``inconsistent_transition``: a repeated step index, a change of objective within the trajectory,
  ``stop`` before the last step, a previous-action history that contradicts the recorded actions,
  or an element action whose target id is not in the page it was taken on;
- ``too_short``: fewer than ``min_steps`` steps (no transition to learn from).

Reward labels: NNetNav keeps only trajectories its reward model accepts and relabels each with the
instruction it fulfils, so trajectories without a ``reward``/``success`` field are imported as
successful (``reward 1.0``), marked ``metadata["reward_source"] = "nnetnav-relabelled"``.

Command line::

    python -m dynaweb_env.data.nnetnav --in nnetnav-wa/train.jsonl --out data/nnetnav_wa.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..actions import parse_action
from ..axtree import axtree_element_ids
from .io import PathLike, write_trajectories
from .nnetnav_records import (
    InvalidRecord,
    RawStep,
    clean_tree,
    history_contradicts,
    iter_nnetnav_records,
    normalize_action,
    parse_step_row,
    root_url,
    split_response,
)
from .schema import Step, Trajectory

#: Drop reasons, in the order they are checked.
DROP_REASONS: tuple[str, ...] = (
    "corrupt_record",
    "unknown_layout",
    "missing_observation",
    "invalid_action",
    "inconsistent_transition",
    "too_short",
)


@dataclass
class NNetNavImportReport:
    """What an import read, kept and dropped.

    Attributes:
        records: Records (rows) read, corrupt ones included.
        trajectories: Trajectories assembled from the records.
        kept: Trajectories that passed cleaning.
        dropped: Drop reason -> count (trajectories; ``corrupt_record`` counts records).
        examples: Drop reason -> up to 5 ``"<trajectory or location>: <detail>"`` strings.
    """

    records: int = 0
    trajectories: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, where: str, detail: str) -> None:
        self.dropped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < 5:
            examples.append(f"{where}: {detail}"[:300])

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        lines = [
            f"read {self.records} records -> {self.trajectories} trajectories; kept {self.kept}, "
            f"dropped {sum(v for k, v in self.dropped.items() if k != 'corrupt_record')}"
            + (f" (+{self.dropped['corrupt_record']} corrupt records)" if self.dropped["corrupt_record"] else "")
        ]
        for reason in DROP_REASONS:
            if self.dropped[reason]:
                lines.append(f"  {reason}: {self.dropped[reason]}")
                lines.extend(f"    e.g. {example}" for example in self.examples.get(reason, [])[:3])
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "trajectories": self.trajectories,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "examples": self.examples,
        }


# ---------------------------------------------------------------------------------------------------
# Assembling and cleaning trajectories.
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Group:
    key: str
    dataset: str
    first_location: str
    rows: list[RawStep] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=dict)
    invalid: InvalidRecord | None = None
    goal: str = ""
    sites: list[str] = field(default_factory=list)


def _build_from_rows(group: _Group, check_targets: bool) -> list[Step]:
    if group.invalid is not None:
        raise group.invalid
    rows = group.rows
    indices = [row.index for row in rows]
    if len(set(indices)) != len(indices):
        repeated = sorted(index for index, count in Counter(indices).items() if count > 1)
        raise InvalidRecord("inconsistent_transition", f"step index repeated: {repeated}")
    rows = sorted(rows, key=lambda row: row.index)
    expected = list(range(1, len(rows) + 1))
    if [row.index for row in rows] != expected:
        missing = sorted(set(range(1, max(indices) + 1)) - set(indices))
        raise InvalidRecord("missing_observation", f"steps missing: {missing[:10]}")
    goals = {row.goal for row in rows}
    if len(goals) > 1:
        raise InvalidRecord("inconsistent_transition", f"objective changes within the trajectory: {sorted(goals)[:2]}")
    steps = []
    for row in rows:
        reasoning, action = split_response(row.response)
        steps.append(Step(url=row.url, axtree=row.axtree, action=action, reasoning=reasoning))
    _check_steps(steps, check_targets)
    # The history shown at step k+1 must agree with the action recorded at step k.
    for position in range(len(rows) - 1):
        entry = rows[position + 1].history[position + 1] if len(rows[position + 1].history) > position + 1 else ""
        if history_contradicts(entry, steps[position].action):
            raise InvalidRecord(
                "inconsistent_transition",
                f"step {position + 1} action {steps[position].action!r} but next step's history says {entry[:80]!r}",
            )
    return steps


def _build_from_demonstration(record: dict[str, Any], check_targets: bool) -> list[Step]:
    observations, actions = record.get("obs"), record.get("parsed_actions")
    if not isinstance(observations, list) or not observations:
        raise InvalidRecord("missing_observation", "field 'obs' is missing or empty")
    if not isinstance(actions, list):
        raise InvalidRecord("invalid_action", "field 'parsed_actions' is missing")
    if len(actions) != len(observations):
        raise InvalidRecord("inconsistent_transition", f"{len(observations)} observations but {len(actions)} actions")
    reasonings = record.get("retroactive_reasoning") or []
    stop_text = record.get("stop_action")
    steps = []
    for index, observation in enumerate(observations):
        if not isinstance(observation, str):
            raise InvalidRecord("missing_observation", f"obs[{index}] is not text")
        axtree = clean_tree(observation)
        reasoning = ""
        if index < len(reasonings) and isinstance(reasonings[index], str) and reasonings[index]:
            reasoning, _ = split_response(reasonings[index])
        if index == len(observations) - 1 and isinstance(stop_text, str) and stop_text.strip():
            reasoning, action = split_response(stop_text)
        else:
            action = actions[index] if isinstance(actions[index], str) else ""
        urls = record.get("urls")
        url = urls[index] if isinstance(urls, list) and index < len(urls) and isinstance(urls[index], str) else ""
        steps.append(Step(url=url or root_url(axtree), axtree=axtree, action=action, reasoning=reasoning))
    _check_steps(steps, check_targets)
    return steps


def _check_steps(steps: list[Step], check_targets: bool) -> None:
    for number, step in enumerate(steps, start=1):
        if not step.axtree.strip():
            raise InvalidRecord("missing_observation", f"step {number} has an empty accessibility tree")
    for step in steps:
        step.action = normalize_action(step.action)
    for number, step in enumerate(steps[:-1], start=1):
        if step.action.startswith("stop"):
            raise InvalidRecord("inconsistent_transition", f"stop at step {number} of {len(steps)}")
    if check_targets:
        for number, step in enumerate(steps, start=1):
            target = parse_action(step.action).element_id
            if target is not None and target not in set(axtree_element_ids(step.axtree)):
                raise InvalidRecord("inconsistent_transition", f"step {number}: target [{target}] not in its page")


def _labels(record: dict[str, Any]) -> dict[str, Any]:
    labels: dict[str, Any] = {}
    reward = record.get("reward", record.get("score"))
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        labels["reward"] = float(reward)
    if isinstance(record.get("success"), bool):
        labels["success"] = record["success"]
    return labels


def _short_key(key: str) -> str:
    short = key.rstrip("/").rsplit("/", 1)[-1] or key
    return re.sub(r"[^A-Za-z0-9._:-]+", "_", short)[:120]


def _make_trajectory(group: _Group, steps: list[Step], layout: str, used_ids: set[str]) -> Trajectory:
    task_id = f"nnetnav.{_short_key(group.dataset)}.{_short_key(group.key)}"
    base, suffix = task_id, 2
    while task_id in used_ids:  # two trajectories whose keys differ only in their directories
        task_id, suffix = f"{base}-{suffix}", suffix + 1
    used_ids.add(task_id)
    labels = group.labels
    if "reward" in labels or "success" in labels:
        reward = labels.get("reward", 1.0 if labels.get("success") else 0.0)
        success = labels.get("success", reward >= 1.0)
        reward_source = "label"
    else:
        reward, success, reward_source = 1.0, True, "nnetnav-relabelled"
    goal = group.rows[0].goal if group.rows else group.goal
    return Trajectory(
        id=f"{task_id}/expert",
        task_id=task_id,
        goal=goal,
        source="expert",
        steps=steps,
        success=bool(success),
        reward=float(reward),
        metadata={
            "origin": "nnetnav",
            "nnetnav_dataset": group.dataset,
            "nnetnav_id": group.key,
            "layout": layout,
            "reward_source": reward_source,
            "first_record": group.first_location,
            **({"sites": group.sites} if group.sites else {}),
        },
    )


def load_nnetnav(
    path: PathLike,
    *,
    split: str | None = None,
    min_steps: int = 2,
    check_targets: bool = True,
    progress: bool = False,
) -> tuple[list[Trajectory], NNetNavImportReport]:
    """Import NNetNav trajectories from disk, cleaned as in the paper.

    Args:
        path: A file or directory in one of the layouts of the module docstring.
        split: For a saved ``DatasetDict``, the split to read (default: all).
        min_steps: Trajectories with fewer steps are dropped (``too_short``); 2 keeps every
            trajectory that has at least one transition.
        check_targets: Drop trajectories in which an element action targets an id absent from the
            page it was taken on (``inconsistent_transition``).
        progress: Show a progress bar over records.

    Returns:
        The kept trajectories, in the order they first appear, and the :class:`NNetNavImportReport`.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
    """
    if min_steps < 1:
        raise ValueError(f"min_steps must be >= 1, got {min_steps}")
    report = NNetNavImportReport()
    records: Iterable[tuple[str, dict[str, Any] | str]] = iter_nnetnav_records(path, split)
    if progress:
        from tqdm.auto import tqdm

        records = tqdm(records, desc="reading NNetNav", unit="rec", file=sys.stderr)
    default_dataset = Path(path).stem
    groups, demonstrations = _sort_records(records, report, default_dataset)

    # (group, how to build its steps, layout): step-row trajectories first, then demonstrations.
    candidates: list[tuple[_Group, Callable[[], list[Step]], str]] = [
        (group, partial(_build_from_rows, group, check_targets), "step_rows") for group in groups
    ]
    for location, record in demonstrations:
        sites = record.get("sites")
        group = _Group(
            str(record.get("task_id", location)),
            str(record.get("dataset") or default_dataset),
            location,
            labels=_labels(record),
            goal=str(record.get("intent", "")),
            sites=[str(site) for site in sites] if isinstance(sites, list) else [],
        )
        candidates.append((group, partial(_build_from_demonstration, record, check_targets), "demonstration"))
    trajectories: list[Trajectory] = []
    used_ids: set[str] = set()
    for group, build, layout in candidates:
        report.trajectories += 1
        try:
            steps = build()
            if len(steps) < min_steps:
                raise InvalidRecord("too_short", f"{len(steps)} step(s) < min_steps={min_steps}")
        except InvalidRecord as error:
            report.drop(error.reason, group.key, str(error))
            continue
        trajectories.append(_make_trajectory(group, steps, layout, used_ids))
    report.kept = len(trajectories)
    return trajectories, report


def _sort_records(
    records: Iterable[tuple[str, dict[str, Any] | str]], report: NNetNavImportReport, default_dataset: str
) -> tuple[list[_Group], list[tuple[str, dict[str, Any]]]]:
    """Group step rows by trajectory and set demonstrations apart; count corrupt and unknown records."""
    groups: dict[str, _Group] = {}
    demonstrations: list[tuple[str, dict[str, Any]]] = []
    for location, record in records:
        report.records += 1
        if isinstance(record, str):
            report.drop("corrupt_record", location, record)
            continue
        if isinstance(record.get("obs"), list) and "parsed_actions" in record:
            demonstrations.append((location, record))
            continue
        if "messages" not in record:
            report.drop("unknown_layout", location, f"keys {sorted(record)[:8]}")
            continue
        key = str(record.get("task_name") or record.get("id") or "")
        if not key:
            report.drop("unknown_layout", location, "step row without 'task_name' or 'id'")
            continue
        dataset = str(record.get("dataset") or default_dataset)
        group = groups.setdefault(f"{dataset}\x00{key}", _Group(key, dataset, location))
        group.labels.update(_labels(record))
        if group.invalid is not None:
            continue
        try:
            group.rows.append(parse_step_row(record))
        except InvalidRecord as error:
            group.invalid = InvalidRecord(error.reason, f"{location}: {error}")
    return list(groups.values()), demonstrations


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m dynaweb_env.data.nnetnav", description="Import and clean NNetNav trajectories."
    )
    parser.add_argument("--in", dest="input", required=True, help="NNetNav file or directory")
    parser.add_argument("--out", required=True, help="output trajectories (JSONL, overwritten)")
    parser.add_argument("--split", default=None, help="split of a saved DatasetDict (default: all)")
    parser.add_argument("--min-steps", type=int, default=2, help="drop trajectories with fewer steps")
    parser.add_argument("--no-target-check", action="store_true", help="keep actions whose target id is absent")
    parser.add_argument("--report", default=None, help="also write the import report as JSON here")
    args = parser.parse_args(argv)
    try:
        trajectories, report = load_nnetnav(
            args.input,
            split=args.split,
            min_steps=args.min_steps,
            check_targets=not args.no_target_check,
            progress=True,
        )
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    write_trajectories(args.out, trajectories)
    print(report.summary())
    print(f"wrote {len(trajectories)} trajectories -> {args.out}")
    if args.report:
        Path(args.report).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0


__all__ = [
    "DROP_REASONS",
    "NNetNavImportReport",
    "iter_nnetnav_records",
    "parse_step_row",
    "split_response",
    "normalize_action",
    "load_nnetnav",
    "main",
]


if __name__ == "__main__":
    raise SystemExit(main())
