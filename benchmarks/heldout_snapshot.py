"""Freeze a held-out evaluation set from a dataset that is still being collected, with its checksum.

Command (the one that produced ``benchmarks/results/heldout/heldout_set.json``; the JSONL stays outside the
repository)::

    python benchmarks/heldout_snapshot.py --sources data/miniwob-large/validation data/miniwob-large/test \\
        --exclude-seeds 3 --output runs/heldout/heldout.jsonl

Every record of the ``--sources`` (directories or JSONL files, read as ``dynaweb-collect`` wrote them so far) is
kept except those of the ``--exclude-seeds`` task seeds, written to ``--output``, and described (records,
seeds, records per task, transitions, sha256) in ``--summary``. Seed 3 is left out by default: the adapters
shipped before the large dataset were trained on seed 3 of their 9 tasks (the shipped data's train split), so it
is not held out for them. Evaluate on it with ``dynaweb-eval-wm --data <output> --split all``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from pathlib import Path

from dynaweb_env.data.io import read_trajectories, write_trajectories

SUMMARY = Path(__file__).parent / "results" / "heldout" / "heldout_set.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", nargs="+", required=True, help="Directories or JSONL files of held-out records.")
    parser.add_argument("--exclude-seeds", nargs="*", type=int, default=[3], help="Task seeds to leave out.")
    parser.add_argument("--output", required=True, help="The frozen JSONL.")
    parser.add_argument("--summary", default=str(SUMMARY), help="JSON description of the snapshot.")
    args = parser.parse_args(argv)
    sources = [Path(source) for source in args.sources if Path(source).exists()]
    if not sources:
        raise SystemExit(f"heldout_snapshot: none of {args.sources} exists")
    kept = [t for t in read_trajectories(sources) if t.metadata.get("seed") not in set(args.exclude_seeds)]
    output = Path(args.output)
    write_trajectories(output, kept)
    summary = {
        "sources": [str(source) for source in sources],
        "rule": f"every record of the sources at snapshot time, task seeds {args.exclude_seeds} left out",
        "records": len(kept),
        "seeds": sorted({t.metadata.get("seed") for t in kept}),
        "tasks": dict(Counter(t.task_id for t in kept)),
        "transitions": sum(sum(1 for step in t.steps[:-1] if step.action.strip()) for t in kept),
        "sha256": hashlib.sha256(output.read_bytes()).hexdigest(),
    }
    Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({key: value for key, value in summary.items() if key != "tasks"}))
    return summary


if __name__ == "__main__":
    main()
