"""The README and ``docs/`` stay true: links resolve, commands parse, the results index is current.

* Every relative link in ``README.md`` and ``docs/*.md`` names a file or folder that exists, and a ``#anchor``
  into a Markdown file names one of its headings (GitHub's slugs).
* Every shell command in a fenced shell block or an inline code span that starts with ``dynaweb-``,
  ``dynaweb``, ``python -m benchmarks.``, ``python benchmarks/`` or ``make`` parses: it is run with its own
  arguments and ``--help`` appended (in this process, through the console script's entry point in
  ``pyproject.toml`` or as ``python -m`` would run it), and must exit 0; a ``make`` target runs as ``make -n``.
  Placeholders (``<policy>``, ``$VAR``, ``N``) become ``0``.
* ``benchmarks/results/INDEX.md`` is what ``python -m benchmarks.results_index`` writes now.
* The README is at most 200 lines, and (slow) ``docs/cli.md`` is what ``docs/gen_cli.py`` writes.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(dynaweb-[\w-]+|dynaweb|python -m benchmarks\.[\w.]+|python benchmarks/[\w/]+\.py|make)(\s|$)")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug, n = _slug(heading), 0
        while (slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for match in LINK.finditer(FENCE.sub("", doc.read_text())):
            target = match.group(1) or match.group(2)
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                found.append((doc.relative_to(ROOT).as_posix(), target))
    return found


@pytest.mark.parametrize(("doc", "target"), _links())
def test_relative_link_resolves(doc: str, target: str) -> None:
    path_part, _, anchor = target.partition("#")
    path = (ROOT / doc).parent / path_part if path_part else ROOT / doc
    assert path.exists(), f"{doc}: link to {target}: {path.relative_to(ROOT)} does not exist"
    if anchor and path.suffix == ".md":
        assert anchor in _anchors(path), f"{doc}: link to {target}: no heading with anchor #{anchor}"


def _join_lines(block: str) -> list[str]:
    lines, pending = [], ""
    for raw in block.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append((pending + line).strip())
        pending = ""
    return [line for line in lines if line]


def _strip_env(command: str) -> str:
    """Drop leading ``VAR=value`` assignments and a trailing ``&``; keep the first of ``a && b``."""
    command = re.split(r"\s(?:&&|\|\||;|\|)\s", command)[0].removesuffix("&").strip()
    while re.match(r"^[A-Z_][A-Z0-9_]*=\S*\s", command):
        command = command.split(None, 1)[1]
    return command


def _commands() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text()
        candidates = []
        for language, block in FENCE.findall(text):
            if language in ("bash", "sh", "shell", "console", ""):
                candidates += _join_lines(block)
        candidates += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", FENCE.sub("", text))
        for line in candidates:
            command = _strip_env(line)
            # a table's alternatives (a\\|b), optional parts ([--x]) and name placeholders are not commands
            if COMMAND.match(command) and not re.search(r"\.\.\.|\||\[--|^\S*<", command):
                found.setdefault(command, doc.relative_to(ROOT).as_posix())
    return sorted((doc, command) for command, doc in found.items())


def _scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def _argv(command: str) -> list[str]:
    command = re.sub(r"<[^<>]*>", "0", command)
    command = re.sub(r"\"?\$\{?\w+\}?\"?", "0", command)
    return [re.sub(r"^[A-Z][A-Z_]*$", "0", word) for word in shlex.split(command)]


def _run_help(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run a command line with ``--help`` appended, as its entry point would; its exit status."""
    program, *args = argv
    args = [*args, "--help"]
    out = io.StringIO()
    # a script run as __main__ sets sys.path[0] to the repository root, as under `python script.py`: give it a copy,
    # or this process loses tests/ from its path (and later tests their `benchmark_scripts` import)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            if program == "python" and args[0] == "-m":
                monkeypatch.setattr(sys, "argv", [args[1], *args[2:]])
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            elif program == "python":
                monkeypatch.setattr(sys, "argv", args)
                runpy.run_path(str(ROOT / args[0]), run_name="__main__")
            else:
                module, _, function = _scripts()[program].partition(":")
                monkeypatch.setattr(sys, "argv", [program, *args])
                getattr(import_module(module), function)()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        assert code == 0, f"{shlex.join(argv)} --help exited {stop.code}:\n{out.getvalue()[-2000:]}"
        return code
    return 0


@pytest.mark.parametrize(("doc", "command"), _commands())
def test_command_parses(doc: str, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _argv(command)
    monkeypatch.chdir(ROOT)
    if argv[0] == "make":
        assert shutil.which("make"), "make is not installed"
        result = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{doc}: make -n {' '.join(argv[1:])}: {result.stderr[-1000:]}"
        return
    assert argv[0] == "python" or argv[0] in _scripts(), f"{doc}: {argv[0]} is no console script of this package"
    assert _run_help(argv, monkeypatch) == 0, f"{doc}: {command}"


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; the details belong in docs/"


@pytest.mark.slow
def test_cli_reference_is_current() -> None:
    """``docs/cli.md`` is what ``python docs/gen_cli.py`` writes from the config dataclasses now."""
    result = subprocess.run(
        [sys.executable, "docs/gen_cli.py"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True
    )
    assert result.stdout == (ROOT / "docs" / "cli.md").read_text(), "run: python docs/gen_cli.py > docs/cli.md"


def test_task_table_is_current() -> None:
    """``docs/tasks.md`` is what ``python docs/gen_tasks.py`` writes from the experts, suites and expert results now."""
    result = subprocess.run(
        [sys.executable, "docs/gen_tasks.py"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    assert result.stdout == (ROOT / "docs" / "tasks.md").read_text(), "run: python docs/gen_tasks.py > docs/tasks.md"
    # every long-suite task is listed with a median of 5 actions or more and full success
    for line in result.stdout.splitlines():
        if "| long" in line:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            successes, episodes = map(int, cells[5].split("/"))
            assert float(cells[2]) >= 5 and successes == episodes, line
