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

from ..axtree import clean_axtree, is_node_line
from .output_format import (
    CHANGES_HEADER,
    CHANGES_RE,
    TERMINAL_RE,
    TREE_HEADER,
    TREE_RE,
    split_url_line,
    strip_fences,
)


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
    body, fenced = strip_fences(raw)
    if fenced:
        problems.append("ignored markdown code fences")
    truncated = finish_reason == "length"
    if truncated:
        problems.append("generation hit the token limit (output truncated)")

    terminal = bool(TERMINAL_RE.search(body))
    body = TERMINAL_RE.sub("", body)

    changes_match = CHANGES_RE.search(body)
    tree_match = TREE_RE.search(body, changes_match.end() if changes_match else 0) or TREE_RE.search(body)
    if changes_match is None and tree_match is None:
        problems.append(f"missing sections {CHANGES_HEADER} and {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(body.strip(), current_axtree, current_url, terminal, "; ".join(problems), True, raw)

    first = min(match.start() for match in (changes_match, tree_match) if match is not None)
    if body[:first].strip():
        problems.append("ignored text before the first section header")
    changes = _changes_section(body, changes_match, tree_match, problems)
    if tree_match is None:
        problems.append(f"missing section {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(changes, current_axtree, current_url, terminal, "; ".join(problems), True, raw)

    tree_text = body[tree_match.end() :]
    repeated = CHANGES_RE.search(tree_text)
    if repeated:
        problems.append("ignored a repeated section after the tree")
        tree_text = tree_text[: repeated.start()]
    url, lines = split_url_line(tree_text.strip("\n").splitlines())
    url = current_url if url is None else url
    if truncated and lines:
        lines = lines[:-1]
    axtree = clean_axtree("\n".join(lines))
    if not axtree:
        problems.append(f"empty section {TREE_HEADER}; kept the current page")
        return WorldModelPrediction(changes, current_axtree, url, terminal, "; ".join(problems), True, raw)
    if not any(is_node_line(line) for line in axtree.splitlines()):
        problems.append("next tree has no accessibility-tree nodes ('[id] role ...'); kept the current page")
        return WorldModelPrediction(changes, current_axtree, url, terminal, "; ".join(problems), True, raw)
    return WorldModelPrediction(changes, axtree, url, terminal, "; ".join(problems) or None, False, raw)


def _changes_section(
    body: str, changes_match: re.Match[str] | None, tree_match: re.Match[str] | None, problems: list[str]
) -> str:
    """The text of the changes section (``""`` when missing or empty, with the problem noted)."""
    if changes_match is None:
        problems.append(f"missing section {CHANGES_HEADER}")
        return ""
    end = tree_match.start() if tree_match is not None and tree_match.start() > changes_match.end() else None
    changes = body[changes_match.end() : end].strip()
    if not changes:
        problems.append(f"empty section {CHANGES_HEADER}")
    return changes


__all__ = ["WorldModelPrediction", "parse_world_model_output"]
