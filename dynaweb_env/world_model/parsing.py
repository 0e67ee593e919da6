"""Reading the world model's generated text into a next state, without ever raising.

A world model is a sampled LLM: its output may miss a section, wrap itself in markdown fences,
chat before the first header, describe the tree instead of writing it, or stop mid-tree at the
token limit. :func:`parse_world_model_output` recovers what it can and says what went wrong in
:attr:`WorldModelPrediction.error`; where no usable tree remains, the prediction keeps the current
tree and URL, so a dream goes on from an unchanged page (a no-op transition) instead of crashing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..observation import clean_axtree
from .prompts import CHANGES_HEADER, TERMINAL_MARKER, TREE_HEADER, URL_PREFIX


@dataclass(frozen=True)
class WorldModelPrediction:
    """The world model's prediction for one transition.

    Attributes:
        changes: The predicted state changes Δ (free text; ``""`` if the section was missing).
        axtree: The next accessibility tree; the current tree when none could be read.
        url: The next URL; the current URL unless the output named another.
        terminal: Whether the output marked the episode as ended (:data:`TERMINAL_MARKER`).
        error: What was wrong with the output, ``None`` if it was well-formed. Set also when the
            output was recovered (e.g. fences or a preamble were ignored).
        fallback: Whether the current tree was kept because no usable tree was found.
        raw: The generated text as received.
    """

    changes: str
    axtree: str
    url: str
    terminal: bool = False
    error: str | None = None
    fallback: bool = False
    raw: str = ""


def _header_pattern(header: str) -> str:
    words = r"\s+".join(re.escape(word) for word in header.strip("[]").split())
    # Tolerated decorations: markdown headings / bold, a missing bracket, a trailing colon.
    return rf"^[ \t]*(?:#+[ \t]*)?\**[ \t]*\[?[ \t]*{words}[ \t]*\]?[ \t]*\**[ \t]*:?[ \t]*\**[ \t]*$"


_CHANGES = re.compile(_header_pattern(CHANGES_HEADER), re.IGNORECASE | re.MULTILINE)
_TREE = re.compile(_header_pattern(TREE_HEADER), re.IGNORECASE | re.MULTILINE)
_TERMINAL = re.compile(_header_pattern(TERMINAL_MARKER), re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*```[^\n]*$\n?", re.MULTILINE)
_URL_LINE = re.compile(rf"^[ \t]*{re.escape(URL_PREFIX)}[ \t]*(\S+)[ \t]*$", re.IGNORECASE)
# A node line of BrowserGym's flattened tree: "[bid] role ..." or the unnumbered root.
_NODE = re.compile(r"^\s*(?:\[[^\]\s]+\]\s+\S|(?:Root)?WebArea\b)")


def parse_world_model_output(
    text: str,
    current_url: str,
    current_axtree: str,
    finish_reason: str = "stop",
) -> WorldModelPrediction:
    """Parse one generated world-model output.

    Args:
        text: The generated text (see :mod:`~dynaweb_env.world_model.prompts` for the format).
        current_url: The URL before the action; kept when the output names none.
        current_axtree: The tree before the action; kept when no usable tree is found.
        finish_reason: The backend's finish reason; ``"length"`` means the text was cut by the
            token limit, so its last (possibly partial) tree line is dropped.

    Returns:
        A :class:`WorldModelPrediction`. Never raises for any ``text``.
    """
    raw = text if isinstance(text, str) else ""
    problems: list[str] = []
    if not isinstance(text, str):
        problems.append(f"output is not text ({type(text).__name__})")
    if _FENCE.search(raw):
        problems.append("ignored markdown code fences")
    body = _FENCE.sub("", raw)
    truncated = finish_reason == "length"
    if truncated:
        problems.append("generation hit the token limit (output truncated)")

    terminal = bool(_TERMINAL.search(body))
    body = _TERMINAL.sub("", body)

    changes_match = _CHANGES.search(body)
    tree_match = _TREE.search(body, changes_match.end() if changes_match else 0) or _TREE.search(body)
    if changes_match is None and tree_match is None:
        problems.append(f"missing sections {CHANGES_HEADER} and {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(
            changes=body.strip(),
            axtree=current_axtree,
            url=current_url,
            terminal=terminal,
            error="; ".join(problems),
            fallback=True,
            raw=raw,
        )

    first = min(match.start() for match in (changes_match, tree_match) if match is not None)
    if body[:first].strip():
        problems.append("ignored text before the first section header")

    if changes_match is None:
        problems.append(f"missing section {CHANGES_HEADER}")
        changes = ""
    else:
        end = tree_match.start() if tree_match is not None and tree_match.start() > changes_match.end() else None
        changes = body[changes_match.end() : end].strip()
        if not changes:
            problems.append(f"empty section {CHANGES_HEADER}")

    if tree_match is None:
        problems.append(f"missing section {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(changes, current_axtree, current_url, terminal, "; ".join(problems), True, raw)

    tree_text = body[tree_match.end() :]
    repeated = _CHANGES.search(tree_text)
    if repeated:
        problems.append("ignored a repeated section after the tree")
        tree_text = tree_text[: repeated.start()]
    url, tree_text = _split_url(tree_text, current_url)
    lines = tree_text.strip("\n").splitlines()
    if truncated and lines:
        lines = lines[:-1]
    axtree = clean_axtree("\n".join(lines))
    if not axtree:
        problems.append(f"empty section {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(changes, current_axtree, url, terminal, "; ".join(problems), True, raw)
    if not any(_NODE.match(line) for line in axtree.splitlines()):
        problems.append("next tree has no accessibility-tree nodes ('[id] role ...'); kept the current page")
        return WorldModelPrediction(changes, current_axtree, url, terminal, "; ".join(problems), True, raw)
    return WorldModelPrediction(changes, axtree, url, terminal, "; ".join(problems) or None, False, raw)


def _split_url(tree_text: str, current_url: str) -> tuple[str, str]:
    lines = tree_text.splitlines()
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        match = _URL_LINE.match(line)
        if match:
            return match.group(1), "\n".join(lines[index + 1 :])
        break
    return current_url, tree_text


__all__ = ["WorldModelPrediction", "parse_world_model_output"]
