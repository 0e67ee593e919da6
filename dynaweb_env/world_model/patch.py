"""Patch mode: the world model writes Δ as a few structured edits of the current tree, applied in code.

The paper's world model writes a description of the changes Δ and then the *whole* next tree. On
MiniWoB++-sized pages most of that tree is a copy of the current one: a click that focuses a button
changes one line out of ten. In patch mode Δ *is* the edits: the model writes only them,
:func:`apply_patch` produces the next tree from the current one, and the natural-language
description of Δ (``prediction.changes``, the dream's ``info["changes"]``) is computed from the two
trees by :func:`~dynaweb_env.axtree.structural_diff`. An output reads::

    [Next page edits]
    URL: file:///done.html
    CHANGE [13]: [13] button 'no', focused
    REMOVE [15]
    ADD after [17]: \t[23] StaticText 'Thanks!'
    [Episode ended]

A ``[Web state changes]`` section before the edits (a model's reasoning) is allowed and then kept
as ``changes``; the supervised targets leave it out, so a trained model writes edits only.

Edits (one per line, any order; every reference names a line of the *current* tree):

- ``CHANGE <ref>: <node line>``: replace the line. A line written without indentation keeps the
  indentation of the line it replaces, and one written without an id keeps the id of the line it
  replaces (``CHANGE [13]: button 'no', focused``).
- ``REMOVE <ref>``: delete the line.
- ``ADD after <ref>: <node line>``: insert a line (verbatim, indentation included) after ``<ref>``;
  ``#0`` inserts at the top. Several ``ADD``s after the same line keep their order.
- ``URL: <url>`` (optional, first): the next URL; ``[Episode ended]``: the action ended the episode.

A reference ``<ref>`` is ``[bid]`` (the line with that element id), ``"<text>"`` (for lines without
an id such as ``StaticText``: the line with that whitespace-normalised text, or else the one line
that starts with it, so ``"StaticText 'Sed. Mi"`` names a long paragraph), or ``#N`` (the N-th line,
1-based). No edit lines means the page did not change.

:func:`patch_from_trees` derives the edits of a real ``(before, after)`` pair such that applying them
to ``before`` gives exactly ``after`` (a property tested on every shipped transition), and
:func:`format_patch_target` writes the supervised target, so the world model can be trained on
patch targets (``dynaweb-train-wm --output_mode patch``). Parsing and applying never raise:
malformed edits and unknown references are reported in the prediction's ``error`` and skipped.
"""

from __future__ import annotations

import difflib
from collections import Counter

from ..axtree import line_bid, strip_bid, structural_diff
from .output_format import (
    CHANGES_RE,
    EDIT_LINE,
    EDIT_OPERATIONS,
    PATCH_HEADER,
    PATCH_RE,
    TERMINAL_MARKER,
    TERMINAL_RE,
    TREE_RE,
    URL_PREFIX,
    PatchEdit,
    split_url_line,
    strip_fences,
)
from .parsing import WorldModelPrediction, parse_world_model_output
from .prompts import COMPACT_WORLD_MODEL_INTRO, WORLD_MODEL_SYSTEM_PROMPT, is_compact_style


def _normalise(line: str) -> str:
    return " ".join(line.split())


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


#: Fewest words of a quoted reference (``"StaticText 'Sed."`` would say little to a reader).
_MIN_QUOTED_WORDS = 3


def _quoted_reference(text: str, texts: list[str]) -> str | None:
    """The shortest word prefix of ``text`` that names it alone among ``texts`` (by exact text or by prefix)."""
    if not text or '"' in text or texts.count(text) != 1:
        return None
    words = text.split(" ")
    for count in range(min(_MIN_QUOTED_WORDS, len(words)), len(words) + 1):
        prefix = " ".join(words[:count])
        if sum(other.startswith(prefix) for other in texts) == 1:
            return f'"{prefix}"'
    return f'"{text}"'  # other lines start with the whole text; an exact match still names this one


def _references(lines: list[str]) -> list[str]:
    """The shortest unambiguous reference of every line: ``[bid]``, then ``"text prefix"``, then ``#N``."""
    bids = [line_bid(line) for line in lines]
    bid_counts = Counter(bid for bid in bids if bid is not None)
    texts = [_normalise(line) for line in lines]
    refs = []
    for index, (text, bid) in enumerate(zip(texts, bids, strict=True)):
        if bid is not None and bid_counts[bid] == 1:
            refs.append(f"[{bid}]")
        else:
            refs.append(_quoted_reference(text, texts) or f"#{index + 1}")
    return refs


def _resolve(ref: str, lines: list[str]) -> int | None:
    """Index of the referenced line (``-1`` for ``#0``, the top), ``None`` if it names no single line."""
    if ref.startswith("#"):
        number = int(ref[1:])
        return number - 1 if number <= len(lines) else None
    if ref.startswith("["):
        bid = ref[1:-1]
        hits = [i for i, line in enumerate(lines) if line_bid(line) == bid]
    else:
        text = _normalise(ref[1:-1])
        hits = [i for i, line in enumerate(lines) if _normalise(line) == text]
        if not hits and text:
            hits = [i for i, line in enumerate(lines) if _normalise(line).startswith(text)]
    return hits[0] if len(hits) == 1 else None


def patch_from_trees(before: str, after: str) -> list[PatchEdit]:
    """The edits that turn tree ``before`` into tree ``after`` exactly (line diff, shortest references).

    ``apply_patch(before, patch_from_trees(before, after))`` returns ``after`` for any two trees
    (compared as lists of lines).
    """
    old, new = before.splitlines(), after.splitlines()
    refs = _references(old)
    edits: list[PatchEdit] = []

    def add_after(index: int, lines: list[str]) -> None:
        anchor = refs[index] if index >= 0 else "#0"
        edits.extend(PatchEdit("ADD", anchor, line) for line in lines)

    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for offset in range(paired):
            source, target, ref = old[i1 + offset], new[j1 + offset], refs[i1 + offset]
            kept_bid = ref.startswith("[") and line_bid(target) == ref[1:-1]
            if ref.startswith("[") and line_bid(target) is None:
                # A line without an id would inherit the old one: remove the line and add the new one.
                edits.append(PatchEdit("REMOVE", ref))
                edits.append(PatchEdit("ADD", ref, target))
            elif _indent(source) == _indent(target):
                line = target.lstrip()
                edits.append(PatchEdit("CHANGE", ref, strip_bid(line) if kept_bid else line))
            elif _indent(target):
                edits.append(PatchEdit("CHANGE", ref, target))
            else:  # an unindented line cannot be written as a CHANGE of an indented one: remove and add
                edits.append(PatchEdit("REMOVE", ref))
                edits.append(PatchEdit("ADD", ref, target))
        edits.extend(PatchEdit("REMOVE", refs[index]) for index in range(i1 + paired, i2))
        if j2 - j1 > paired:
            add_after(i1 + paired - 1, new[j1 + paired : j2])
    return edits


def format_patch(edits: list[PatchEdit]) -> str:
    """The edit lines of a patch, one per line."""
    return "\n".join(edit.render() for edit in edits)


def parse_patch(text: str) -> tuple[list[PatchEdit], list[str]]:
    """Read edit lines; blank lines are skipped, malformed ones reported (never raised).

    Returns:
        The edits in order and one problem message per malformed line.
    """
    edits: list[PatchEdit] = []
    problems: list[str] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        if not raw_line.strip():
            continue
        match = EDIT_LINE.match(raw_line)
        op = match.group("op").upper() if match else ""
        ref = match.group("ref") if match else None
        line = match.group("line") if match else None
        if match is None or ref is None:
            problems.append(f"edit line {number} is malformed: {raw_line.strip()[:80]!r}")
        elif op == "ADD" and not match.group("after"):
            problems.append(f"edit line {number}: ADD needs 'after <ref>': {raw_line.strip()[:80]!r}")
        elif op in ("ADD", "CHANGE") and not (line or "").strip():
            problems.append(f"edit line {number}: {op} without a node line: {raw_line.strip()[:80]!r}")
        elif op == "REMOVE" and (line or "").strip():
            problems.append(f"edit line {number}: REMOVE takes no node line: {raw_line.strip()[:80]!r}")
        else:
            edits.append(PatchEdit(op, ref, (line or "").rstrip() if op != "REMOVE" else ""))
    return edits, problems


def apply_patch(axtree: str, edits: list[PatchEdit]) -> tuple[str, list[str]]:
    """Apply edits to a tree; references are resolved against the tree *before* any edit.

    Unknown or ambiguous references are reported and the edit skipped; conflicting edits of one line
    are reported (a ``REMOVE`` beats a ``CHANGE``, the last ``CHANGE`` wins). Never raises.

    Returns:
        The edited tree and the problem messages (empty for a clean patch).
    """
    lines = axtree.splitlines()
    problems: list[str] = []
    changed: dict[int, str] = {}
    removed: set[int] = set()
    added: dict[int, list[str]] = {}
    for edit in edits:
        index = _resolve(edit.ref, lines)
        if index is None or (index < 0 and edit.op != "ADD"):
            problems.append(f"{edit.op} {edit.ref}: no such line in the current tree; skipped")
            continue
        if edit.op == "ADD":
            added.setdefault(index, []).append(edit.line)
        elif edit.op == "REMOVE":
            if index in removed or index in changed:
                problems.append(f"REMOVE {edit.ref}: line already edited")
            removed.add(index)
        else:
            if index in removed or index in changed:
                problems.append(f"CHANGE {edit.ref}: line already edited")
            new_line = edit.line
            bid = line_bid(lines[index])
            if edit.ref.startswith("[") and bid is not None and line_bid(new_line) is None:
                new_line = f"[{bid}] {new_line.lstrip()}"  # the line keeps its id
            changed[index] = new_line if _indent(new_line) else _indent(lines[index]) + new_line
    result = list(added.get(-1, []))
    for index, line in enumerate(lines):
        if index not in removed:
            result.append(changed.get(index, line))
        result.extend(added.get(index, []))
    return "\n".join(result), problems


def format_patch_target(next_url: str, before_axtree: str, after_axtree: str, terminal: bool = False) -> str:
    """The patch-mode world-model output for one real transition (the SFT target of patch mode).

    Args:
        next_url: The next URL; written as a ``URL:`` line unless empty.
        before_axtree: The current tree (the one the prompt shows).
        after_axtree: The next tree; the edits are :func:`patch_from_trees` of the two.
        terminal: Whether the transition ended the episode.
    """
    parts = [PATCH_HEADER]
    if next_url.strip():
        parts.append(f"{URL_PREFIX} {next_url.strip()}")
    edits = format_patch(patch_from_trees(before_axtree, after_axtree))
    if edits:
        parts.append(edits)
    if terminal:
        parts.append(TERMINAL_MARKER)
    return "\n".join(parts)


def parse_patch_output(
    text: str, current_url: str, current_axtree: str, finish_reason: str = "stop"
) -> WorldModelPrediction:
    """Parse a patch-mode output and apply its edits to ``current_axtree``. Never raises.

    An output that wrote a full ``[Next page accessibility tree]`` instead of edits is read as the
    paper's format (reported in ``error``); one with neither section keeps the current page.
    """
    raw = text if isinstance(text, str) else ""
    problems: list[str] = []
    body, fenced = strip_fences(raw)
    if fenced:
        problems.append("ignored markdown code fences")
    if finish_reason == "length":
        problems.append("generation hit the token limit (output truncated)")
    patch_match = PATCH_RE.search(body)
    if patch_match is None:
        if TREE_RE.search(body):
            tree = parse_world_model_output(raw, current_url, current_axtree, finish_reason)
            error = "; ".join(filter(None, [f"wrote a full tree instead of {PATCH_HEADER}", tree.error]))
            return WorldModelPrediction(tree.changes, tree.axtree, tree.url, tree.terminal, error, tree.fallback, raw)
        terminal = bool(TERMINAL_RE.search(body))
        problems.append(f"missing section {PATCH_HEADER}; kept the current page")
        changes = CHANGES_RE.sub("", TERMINAL_RE.sub("", body)).strip()
        return WorldModelPrediction(changes, current_axtree, current_url, terminal, "; ".join(problems), True, raw)

    changes_match = CHANGES_RE.search(body, 0, patch_match.start())
    # Optional in patch mode: described from the edited tree below when absent.
    changes = body[changes_match.end() : patch_match.start()].strip() if changes_match else ""
    if body[: (changes_match or patch_match).start()].strip():
        problems.append("ignored text before the first section header")

    section = body[patch_match.end() :]
    repeated = CHANGES_RE.search(section)
    if repeated:
        problems.append("ignored a repeated section after the edits")
        section = section[: repeated.start()]
    terminal = bool(TERMINAL_RE.search(section))
    lines = TERMINAL_RE.sub("", section).strip("\n").splitlines()
    if finish_reason == "length" and lines:
        lines = lines[:-1]  # the last line may be cut mid-edit
    url, lines = split_url_line(lines)
    url = current_url if url is None else url
    edits, malformed = parse_patch("\n".join(lines))
    axtree, unapplied = apply_patch(current_axtree, edits)
    problems.extend(malformed + unapplied)
    if not changes:
        changes = structural_diff(current_axtree, axtree, current_url, url)
    return WorldModelPrediction(changes, axtree, url, terminal, "; ".join(problems) or None, False, raw)


#: The patch-mode output format, in place of the paper's "Generate your answer ..." section.
PATCH_FORMAT_INSTRUCTIONS = f"""\
Given the information above, you should predict the changes the action causes on the current web page, written \
as the edits that turn the current accessibility tree into the next one.

Generate your answer in the following format:

{PATCH_HEADER}

edits

where `edits` are edit lines, one per line, each of them one of:

`CHANGE [id]: new_line`: replace the line of element id with new_line (a full accessibility tree line).
`REMOVE [id]`: delete the line of element id.
`ADD after [id]: new_line`: insert new_line after the line of element id (`ADD after #0: new_line` inserts it \
at the top).

In `CHANGE [id]: new_line` you may leave the `[id]` out of new_line: the line keeps its id.
For a line without an id, write its text (or the start of it) in double quotes instead of `[id]`, e.g. \
`REMOVE "StaticText 'Hi'"`.

Do NOT repeat unchanged lines: every line you do not edit stays as it is. If the page does not change, write no \
edit lines.

If the action leads to a different URL, write `{URL_PREFIX} <new url>` as the first line of `edits`; otherwise the \
URL stays the same.

If the action ends the episode (for example, the task's answer was submitted), write `{TERMINAL_MARKER}` on its \
own line after `edits`."""

_FORMAT_START = "Given the information above,"


#: The compact style's patch-mode system prompt: the output format and nothing else.
COMPACT_PATCH_SYSTEM_PROMPT = f"""\
{COMPACT_WORLD_MODEL_INTRO} Answer with the edits that turn the current tree into the next one:
{PATCH_HEADER}
{URL_PREFIX} <new url, only if it changed>
CHANGE [id]: <new line> | REMOVE [id] | ADD after [id]: <new line>   (one per line; "text" instead of [id] for a \
line without id; ADD after #0 inserts at the top)
{TERMINAL_MARKER} <only if the action ended the episode>"""


def patch_system_prompt(prompt_style: str = "paper") -> str:
    """Patch mode's system message.

    ``"paper"``: the paper's system prompt with its output-format section replaced by
    :data:`PATCH_FORMAT_INSTRUCTIONS`; ``"compact"``: :data:`COMPACT_PATCH_SYSTEM_PROMPT`.
    """
    if is_compact_style(prompt_style):
        return COMPACT_PATCH_SYSTEM_PROMPT
    start = WORLD_MODEL_SYSTEM_PROMPT.index(_FORMAT_START)
    return WORLD_MODEL_SYSTEM_PROMPT[:start] + PATCH_FORMAT_INSTRUCTIONS


__all__ = [
    "PATCH_HEADER",
    "EDIT_OPERATIONS",
    "PATCH_FORMAT_INSTRUCTIONS",
    "COMPACT_PATCH_SYSTEM_PROMPT",
    "PatchEdit",
    "patch_from_trees",
    "format_patch",
    "parse_patch",
    "apply_patch",
    "format_patch_target",
    "parse_patch_output",
    "patch_system_prompt",
]
