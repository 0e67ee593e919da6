"""Merge the per-section JSON files of ``benchmarks/gpu/measure.sh`` into one result of ``gpu_throughput.py``'s form.

Usage (from the project root)::

    python benchmarks/gpu/merge.py PARTS_DIR/*.json --commit SHA --note "what was cut short and why"

A part whose process was stopped by its time limit still holds the roles or runs it finished (``complete`` is
absent); the merged file lists, per part, its command and whether it completed, so a cut section is not mistaken
for a whole one. Training runs of several parts are joined by name, each named with the decoding variables it ran
under (:func:`run_name`). The output defaults to ``benchmarks/results/gpu/<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "gpu"
SECTIONS = ("generation", "dreams", "train")


def run_name(name: str, run: dict) -> str:
    """A training run's name in the merged file: its name, with the decoding variables it ran under, if any set
    (``default (DYNAWEB_COMPILE_SHAPES=dynamic)``), so that runs of one kind from several parts stay apart."""
    env = ", ".join(f"{key}={value}" for key, value in sorted((run.get("env") or {}).items()) if value is not None)
    return f"{name} ({env})" if env else name


def merge(parts: Sequence[dict], commit: str, note: str) -> dict:
    """One result from ``parts`` (each a ``gpu_throughput.py`` JSON of one machine)."""
    devices = {part["device"] for part in parts}
    if len(devices) != 1:
        raise ValueError(f"the parts come from different devices: {sorted(devices)}")
    merged: dict = {
        "device": devices.pop(),
        "device_type": parts[0]["device_type"],
        "versions": parts[0]["versions"],
        "commit": commit,
        "note": note,
        "parts": [{"command": p["command"], "complete": bool(p.get("complete"))} for p in parts],
    }
    for part in parts:
        for section in SECTIONS:
            if section == "train" and section in part:
                runs = merged.setdefault("train", {})
                for name, run in part["train"].items():
                    key = run_name(name, run)
                    if key in runs:
                        raise ValueError(f"two parts hold the training run {key!r}")
                    runs[key] = run
            elif section in part:
                if section in merged:
                    raise ValueError(f"two parts hold the section {section!r}")
                merged[section] = part[section]
    merged["missing_sections"] = [section for section in SECTIONS if section not in merged]
    return merged


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path)
    parser.add_argument("--commit", required=True, help="the commit the machine ran")
    parser.add_argument("--note", default="", help="what was cut short, and why")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = [json.loads(path.read_text()) for path in args.parts]
    merged = {"commands": [part["command"] for part in parts]} | merge(parts, args.commit, args.note)
    slug = re.sub(r"[^a-z0-9]+", "_", merged["device"].lower()).strip("_")
    output = args.output or RESULTS / f"{slug}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(merged, indent=2) + "\n")
    print(f"saved {output}")
    return output


if __name__ == "__main__":
    main()
