"""Write ``benchmarks/results/INDEX.md``: every results file, by experiment, with its figure, command, date and commit.

Command (run from the repository root after adding or replacing a results file)::

    python -m benchmarks.results_index            # rewrites benchmarks/results/INDEX.md
    python -m benchmarks.results_index --check    # exit 1 if INDEX.md is out of date

The command of a JSON file is its ``command`` field (or the first of its ``commands``), exactly as the run recorded
it: paths in it are where that run wrote, before any later move. The date and commit are those of the last commit
that changed the file's content (a plain move does not count), read from ``git log``; a file with changes not yet
committed is marked ``uncommitted``. A PNG is the figure of the JSON of the same name beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "INDEX.md"

#: One line per experiment directory: what its files measure. A directory not listed here is still indexed.
EXPERIMENTS: dict[str, str] = {
    "paper_claims": "The paper's claims at small scale: Table 1, dream length (Figure 3a), expert fraction "
    "(Figure 3b), trained vs prompted world model (Figure 4); `multistep/`: the same on the 5 longest tasks.",
    "dreams_only_gate_termination": "Dreams only vs real-browser GSPO, first run: `gate_termination` guard.",
    "dreams_only_consistency_cut": "Dreams only vs real-browser GSPO with the page-consistency guard (`cut`).",
    "dreams_only_keep_typed_text": "Dreams only vs real-browser GSPO with typed text kept in dreamed pages.",
    "dreams_only_transformers_world_model": "Dreams only, the world model on `transformers` instead of the engine.",
    "dreams_only_judge_dagger2": "Dreams only with the DAgger judge in the loop (dreams from any page).",
    "dreams_only_first_pages": "Dreams only, dreams started on recordings' first pages.",
    "dreams_only_resamples": "Dreams only with first-page starts and 2 resamples of flat groups: the best "
    "dreams-only configuration, the default of `dynaweb-train --env dream`.",
    "dreams_only_probe_two_queries": "A probe: one dreams-only seed with two task queries per update.",
    "learning_curve": "Held-out success against real steps, 32 updates, shipped world model.",
    "observation": "The observation that keeps clickable generic elements: tokens per observation before and after "
    "(`observation_tokens.json`), the shipped world model and judge on held-out pages that changed.",
    "learning_curve_demos": "The learning curve with a world model and judge trained on the demonstrations alone.",
    "learning_curve_demos_near": "The same, the judge also trained on near misses (8 updates).",
    "dream_rewards": "Dream rewards replayed on real pages: the default replay, reward guards, demonstrations, "
    "and training dreams re-judged by the grounded and DAgger judges.",
    "dream_consistency": "How often dreamed pages break page consistency, against real transitions.",
    "judge": "Judge accuracy on held-out real cases, dreamed final pages and premature final actions.",
    "judge_dagger": "The judge retrained on dreamed pages (DAgger round 1).",
    "judge_dagger2": "DAgger round 2: the shipped judge `smollm2-135m-judge-dagger`.",
    "judge_grounded": "A judge told which names the objective holds (grounded prompts).",
    "judge_text": "A judge that reads unnamed elements by their text or row (`grounded-text` prompts), against the "
    "shipped DAgger judge: not shipped.",
    "judge_nearmiss": "A judge trained on near misses (the wrong checkbox, tab or field).",
    "heldout": "World-model fidelity on held-out seeds of the large dataset: the held-out sets, the shipped patch "
    "world model, continued training, redraws, a weighted fine-tune and an adapter average, fresh seeds.",
    "world_model_long": "World-model fidelity on the long tasks per task and dream depth (1-5), against copying the "
    "page; the shipped patch world model and two retrainings on the all-tasks data (cut long examples kept, dropped), "
    "also on the 24 tasks it learned.",
    "world_model_rank_cut": "The tree world model before and after its cut from LoRA rank 16 to 8.",
    "engine": "The CTranslate2 engine against `transformers`: throughput, fidelity, batching probes.",
    "throughput": "Environment and rollout throughput: real vs dream, batched vs one by one, thread batching.",
    "expert_success": "Success of every scripted expert on real pages.",
    "prompt_compaction": "Tokens per example and seconds per step: paper vs compact prompts, fp32 vs bf16.",
    "world_model_modes": "World-model output modes (tree vs patch) against copying the page and the untrained model.",
    "default_rewards": "Default `DreamWeb-v0` rewards against the real outcome of an expert and a wrong action.",
    "gpu": "Generation and training throughput on a GPU (and the CPU proxy).",
    ".": "Files at the top level.",
}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def last_content_commits() -> dict[str, str]:
    """Map each path under ``benchmarks/results/`` to ``"<hash>,<date>"`` of the last commit that changed it.

    One ``git log`` walks the history newest first; a rename without changes (``R100``) is followed to the old
    name, so a moved file keeps the commit of its measurement.

    Returns:
        Repository-relative paths to ``"hash,date"``; files never committed are absent.
    """
    found: dict[str, str] = {}
    following: dict[str, str] = {}  # name in an older commit -> current path
    current = "benchmarks/results/"
    log = _git("log", "-M", "--name-status", "--format=%x00%h,%cs", "--", current)
    commit = ""
    for line in log.splitlines():
        if line.startswith("\x00"):
            commit = line[1:]
            continue
        if not line.strip():
            continue
        status, *paths = line.split("\t")
        target = paths[-1]
        owner = following.get(target, target)
        if owner in found:
            continue
        if status == "R100":
            following[paths[0]] = owner
        elif status[0] in "AMR":
            found[owner] = commit
    return found


#: The commit column of a file with changes not yet committed (a clean clone shows its commit instead).
UNCOMMITTED = "uncommitted"


def _uncommitted() -> set[str]:
    out = _git("status", "--porcelain", "--no-renames", "--untracked-files=all", "--", "benchmarks/results/")
    return {line[3:] for line in out.splitlines()}


def recorded_command(path: Path) -> str:
    """The command recorded in a results JSON (``command``), or ``""``.

    A file merged from several runs records them as a list (``commands``): the first is shown, with how many more
    ran, so a table cell stays one command long; the JSON lists them all.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict):
        return ""
    command = data.get("command", data.get("commands", ""))
    if isinstance(command, list):
        more = f" (+ {len(command) - 1} more runs merged: the JSON's commands)" if len(command) > 1 else ""
        command = f"{' '.join(str(command[0]).split())}{more}" if command else ""
    return " ".join(str(command).split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


#: The suffix of a resumable run's work file (``benchmarks.planning``, ``dynaweb eval``), left out of the index.
PARTIAL = ".partial.jsonl"


def render() -> str:
    """The text of ``INDEX.md`` for the files now under ``benchmarks/results/``."""
    commits = last_content_commits()
    dirty = _uncommitted()
    # A resumable run's episodes so far (``*.partial.jsonl``) are work in progress, not a result: never committed.
    files = sorted(p for p in RESULTS.rglob("*") if p.is_file() and p != INDEX and not p.name.endswith(PARTIAL))
    groups: dict[str, list[Path]] = {}
    for path in files:
        parts = path.relative_to(RESULTS).parts
        groups.setdefault(parts[0] if len(parts) > 1 else ".", []).append(path)
    lines = [
        "# Results index",
        "",
        "Generated by `python -m benchmarks.results_index` (do not edit; `tests/test_docs.py` checks it is current).",
        "Every file under `benchmarks/results/`, by experiment. *Command* is the one the run recorded in its JSON,",
        "with the paths it wrote to then; *date* and *commit* are those of the last commit that changed the file.",
        "What each experiment shows, and the command that reproduces it today:",
        "[docs/results.md](../../docs/results.md).",
        "",
    ]
    for group in sorted(groups, key=lambda g: (g == ".", g)):
        lines += [f"## {group if group != '.' else 'top level'}", ""]
        if group in EXPERIMENTS:
            lines += [EXPERIMENTS[group], ""]
        lines += ["| file | figure | command | date | commit |", "| --- | --- | --- | --- | --- |"]
        paths = groups[group]
        names = {p.name for p in paths}
        for path in paths:
            rel = path.relative_to(RESULTS).as_posix()
            if path.suffix == ".png" and path.with_suffix(".json").name in names:
                continue  # shown as the figure of its JSON
            figure = ""
            png = path.with_suffix(".png")
            if path.suffix == ".json" and png.name in names:
                figure = f"[{png.name}]({png.relative_to(RESULTS).as_posix()})"
            elif path.suffix == ".png":
                figure = f"[{path.name}]({rel})"
            command = recorded_command(path) if path.suffix == ".json" else ""
            repo_rel = path.relative_to(ROOT).as_posix()
            if repo_rel in dirty or (figure and png.relative_to(ROOT).as_posix() in dirty):
                commit, date = UNCOMMITTED, ""
            else:
                commit, _, date = commits.get(repo_rel, f"{UNCOMMITTED},").partition(",")
            shown = f"`{_cell(command)}`" if command else "(not recorded)"
            lines.append(f"| [{rel}]({rel}) | {figure} | {shown} | {date} | {commit} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write INDEX.md, or with ``--check`` compare it with a fresh render.

    Returns:
        0, or 1 when ``--check`` finds INDEX.md out of date.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if INDEX.md is not what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not INDEX.exists() or INDEX.read_text() != text:
            print(f"{INDEX.relative_to(ROOT)} is out of date: run python -m benchmarks.results_index", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text)
    print(f"wrote {INDEX.relative_to(ROOT)}")
    if pending := text.count(f"| {UNCOMMITTED} |"):
        print(
            f"warning: {pending} file(s) are listed as uncommitted; a clean clone renders them with their commit, so"
            " commit them first and run this again, or the --check of tests/test_docs.py fails there",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
