"""State-change labels Δ(o_t, o_{t+1}) for the real transitions of trajectories: world-model supervision.

:func:`label_trajectories` fills ``Step.changes`` (``steps[i].changes`` describes the transition from
``steps[i]`` to ``steps[i + 1]``) two ways:

- ``method="diff"``: :func:`~dynaweb_env.axtree.structural_diff`, deterministic and free, e.g.
  ``"The checkbox [15] 'foo' became checked. A new StaticText [22] 'Done' appeared. URL unchanged."``
- ``method="teacher"``: the paper's way, a teacher LLM
  (:class:`~dynaweb_env.world_model.teacher.TeacherLabeler`).

Per-transition provenance (method, teacher reasoning, errors) goes to
``trajectory.metadata["state_change_labels"]``.

Command line (resumable: trajectories already in ``--out`` are skipped)::

    python -m dynaweb_env.world_model.state_changes --in trajectories.jsonl --out labelled.jsonl --method diff
    python -m dynaweb_env.world_model.state_changes --in trajectories.jsonl --out labelled.jsonl \\
        --method teacher --teacher "openai:gpt-oss-120b@http://localhost:8000/v1"
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..axtree import DEFAULT_DIFF_MAX_CHARS
from ..data.io import iter_trajectories, write_trajectories
from ..data.jsonl import prepare_for_append
from ..data.schema import Trajectory
from ..llm.base import SamplingParams
from .teacher import TeacherLabeler, Transition, diff_label

#: Key of ``Trajectory.metadata`` holding per-transition label provenance.
LABELS_METADATA_KEY = "state_change_labels"

LabelMethod = Literal["diff", "teacher"]

# ---------------------------------------------------------------------------------------------------
# Labelling whole trajectories.
# ---------------------------------------------------------------------------------------------------


def trajectory_transitions(trajectory: Trajectory) -> list[Transition]:
    """The labeller inputs of a trajectory: one per consecutive step pair."""
    transitions = []
    for index, (before, after) in enumerate(trajectory.transitions()):
        previous = trajectory.steps[index - 1].action if index > 0 else ""
        transitions.append(
            Transition(trajectory.goal, before.url, before.axtree, before.action, after.url, after.axtree, previous)
        )
    return transitions


def label_trajectories(
    trajectories: Iterable[Trajectory],
    method: LabelMethod = "diff",
    labeler: TeacherLabeler | None = None,
    *,
    overwrite: bool = True,
    diff_max_chars: int = DEFAULT_DIFF_MAX_CHARS,
    progress: bool = False,
) -> list[Trajectory]:
    """Label every real transition of some trajectories; returns labelled copies.

    ``steps[i].changes`` receives Δ of the transition ``steps[i] -> steps[i + 1]``; the last step,
    which has no successor, is left as it is. Provenance goes to
    ``metadata["state_change_labels"]``: ``{"method", "model", "transitions": [{"step", "source",
    "reasoning", "error"}]}``. With ``method="teacher"`` all transitions of all trajectories are sent
    to the teacher in batches.

    Args:
        trajectories: The trajectories (not modified).
        method: ``"diff"`` (:func:`structural_diff`) or ``"teacher"`` (needs ``labeler``).
        labeler: The :class:`TeacherLabeler` for ``method="teacher"``.
        overwrite: Relabel steps that already have ``changes`` (``False`` keeps them).
        diff_max_chars: Length cap of structural-diff descriptions.
        progress: Show a progress bar.

    Raises:
        ValueError: For an unknown method, or ``method="teacher"`` without a labeler.
    """
    if method not in ("diff", "teacher"):
        raise ValueError(f"method must be 'diff' or 'teacher', got {method!r}")
    if method == "teacher" and labeler is None:
        raise ValueError("method='teacher' needs a TeacherLabeler (labeler=...)")
    copies = [copy.deepcopy(trajectory) for trajectory in trajectories]
    todo: list[tuple[int, int, Transition]] = []
    for t_index, trajectory in enumerate(copies):
        for s_index, transition in enumerate(trajectory_transitions(trajectory)):
            if overwrite or not trajectory.steps[s_index].changes:
                todo.append((t_index, s_index, transition))
    inputs = [transition for _, _, transition in todo]
    if method == "teacher":
        labels = labeler.label(inputs, progress=progress)  # type: ignore[union-attr]
    else:
        items: Iterable[Transition] = inputs
        if progress:
            from tqdm.auto import tqdm

            items = tqdm(inputs, desc="structural diff", unit="transition", file=sys.stderr)
        labels = [diff_label(item, diff_max_chars) for item in items]
    records: dict[int, list[dict[str, Any]]] = {}
    for (t_index, s_index, _), label in zip(todo, labels, strict=True):
        copies[t_index].steps[s_index].changes = label.changes
        records.setdefault(t_index, []).append(
            {"step": s_index, "source": label.source, "reasoning": label.reasoning, "error": label.error}
        )
    model = labeler.model_name if method == "teacher" and labeler is not None else "structural_diff"
    for t_index, entries in records.items():
        copies[t_index].metadata[LABELS_METADATA_KEY] = {"method": method, "model": model, "transitions": entries}
    return copies


def transition_reasoning(trajectory: Trajectory, step_index: int) -> str:
    """The teacher's reasoning recorded for transition ``step_index`` ("" if none)."""
    record = trajectory.metadata.get(LABELS_METADATA_KEY, {})
    for entry in record.get("transitions", []) if isinstance(record, dict) else []:
        if isinstance(entry, dict) and entry.get("step") == step_index:
            return str(entry.get("reasoning") or "")
    return ""


# ---------------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------------


@dataclass
class LabelRunSummary:
    """What one labelling run did (printed as a line by the CLI)."""

    read: int = 0
    skipped_existing: int = 0
    labelled: int = 0
    transitions: int = 0
    teacher_labels: int = 0
    fallbacks: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def count(self, trajectory: Trajectory, method: LabelMethod) -> None:
        """Add one labelled trajectory (its provenance record) to the counts."""
        self.labelled += 1
        for entry in trajectory.metadata.get(LABELS_METADATA_KEY, {}).get("transitions", []):
            self.transitions += 1
            if entry["source"] == "teacher":
                self.teacher_labels += 1
            elif method == "teacher":
                self.fallbacks += 1
                self.errors[entry["error"].split(":")[0][:80]] += 1


def _existing_ids(path: Path) -> set[str]:
    """Ids already labelled in ``path``, after repairing a last line an interrupted run cut short."""
    if not path.is_file():
        return set()
    prepare_for_append(path)  # a whole last record lacking its newline is kept; a cut-short one goes (relabelled)
    return {trajectory.id for trajectory in iter_trajectories(path, on_error="skip")}


def run_labelling(
    input_path: str | Path,
    output_path: str | Path,
    method: LabelMethod = "diff",
    labeler: TeacherLabeler | None = None,
    *,
    chunk_size: int = 16,
    progress: bool = True,
) -> LabelRunSummary:
    """Label a JSONL file into another, resumably: trajectories already in the output are skipped.

    Trajectories are labelled ``chunk_size`` at a time and appended after each chunk, so an
    interruption loses at most one chunk of work and nothing already written.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if input_path.resolve() == output_path.resolve():
        raise ValueError("--in and --out must be different files")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    done = _existing_ids(output_path)
    summary = LabelRunSummary()
    pending = []
    for trajectory in iter_trajectories(input_path, on_error="skip"):
        summary.read += 1
        if trajectory.id in done:
            summary.skipped_existing += 1
        else:
            pending.append(trajectory)
            done.add(trajectory.id)  # duplicates inside the input are labelled once
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc=f"labelling ({method})", unit="traj", file=sys.stderr)
    for start in range(0, len(pending), chunk_size):
        chunk = label_trajectories(pending[start : start + chunk_size], method, labeler)
        write_trajectories(output_path, chunk, append=True)
        for trajectory in chunk:
            summary.count(trajectory, method)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m dynaweb_env.world_model.state_changes",
        description="Write state-change labels for real transitions.",
    )
    parser.add_argument("--in", dest="input", required=True, help="input trajectories (JSONL)")
    parser.add_argument("--out", required=True, help="output trajectories (JSONL; appended to, resumable)")
    parser.add_argument("--method", choices=("diff", "teacher"), default="diff", help="labelling method")
    parser.add_argument("--teacher", default="", help="teacher backend spec for make_backend (method=teacher)")
    parser.add_argument("--batch-size", type=int, default=8, help="transitions per teacher call")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="teacher token budget per transition")
    parser.add_argument("--max-axtree-chars", type=int, default=6000, help="tree budget in the teacher prompt")
    parser.add_argument("--chunk-size", type=int, default=16, help="trajectories labelled per append")
    parser.add_argument("--no-diff-hint", action="store_true", help="do not show the teacher the structural diff")
    args = parser.parse_args(argv)
    if not Path(args.input).is_file():
        parser.error(f"input file not found: {args.input}")
    labeler = None
    if args.method == "teacher":
        if not args.teacher:
            parser.error("--method teacher needs --teacher SPEC (e.g. smollm2-135m or openai:MODEL@URL)")
        from ..llm import make_backend

        labeler = TeacherLabeler(
            make_backend(args.teacher),
            SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0),
            batch_size=args.batch_size,
            max_axtree_chars=args.max_axtree_chars,
            include_diff_hint=not args.no_diff_hint,
        )
    summary = run_labelling(args.input, args.out, args.method, labeler, chunk_size=args.chunk_size)
    print(
        f"read {summary.read} trajectories, skipped {summary.skipped_existing} already labelled, "
        f"labelled {summary.labelled} ({summary.transitions} transitions"
        + (
            f"; teacher {summary.teacher_labels}, fallback to diff {summary.fallbacks}"
            if args.method == "teacher"
            else ""
        )
        + f") -> {args.out}"
    )
    for reason, count in summary.errors.most_common():
        print(f"  fallback x{count}: {reason}")
    return 0


__all__ = [
    "LABELS_METADATA_KEY",
    "LabelMethod",
    "LabelRunSummary",
    "label_trajectories",
    "main",
    "run_labelling",
    "trajectory_transitions",
    "transition_reasoning",
]


if __name__ == "__main__":
    raise SystemExit(main())
