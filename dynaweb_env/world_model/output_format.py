"""The world model's output format: its section headers, markers and edit lines, defined once.

Tree mode (the paper's format, appendix A.2, plus two conventions of this project)::

    [Web state changes]
    The "Submit" button was clicked; a confirmation message is shown.
    [Next page accessibility tree]
    URL: http://example.com/done
    RootWebArea 'Done', focused
    \t[5] StaticText 'Thank you!'
    [Episode ended]

Patch mode writes :data:`PATCH_HEADER` and edit lines (:data:`EDIT_LINE`, :class:`PatchEdit`) in
place of the tree; :mod:`~dynaweb_env.world_model.patch` documents the edits with an example.

The prompts (:mod:`~dynaweb_env.world_model.prompts`), the readers
(:mod:`~dynaweb_env.world_model.parsing`, :mod:`~dynaweb_env.world_model.patch`) and the teacher
labeller (:mod:`~dynaweb_env.world_model.teacher`) all take the words and the patterns from here.
Readers are lenient about decoration a sampled model adds: markdown headings or bold around a
header, a missing bracket, a trailing colon, code fences around the whole answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Section headers of the world model's output (paper, appendix A.2).
CHANGES_HEADER = "[Web state changes]"
TREE_HEADER = "[Next page accessibility tree]"
#: Marker line after the tree (or the edits): the action ended the episode.
TERMINAL_MARKER = "[Episode ended]"
#: Optional first line of the tree (or edits) section naming the next page's URL.
URL_PREFIX = "URL:"
#: Section header of the edits in patch mode (in place of :data:`TREE_HEADER`).
PATCH_HEADER = "[Next page edits]"
#: The operations of a patch-mode edit line.
EDIT_OPERATIONS = ("ADD", "REMOVE", "CHANGE")


def header_regex(header: str, whole_line: bool = True) -> re.Pattern[str]:
    """A lenient, case-insensitive, multi-line pattern of one section header.

    Args:
        header: The header as written, e.g. :data:`CHANGES_HEADER`.
        whole_line: The header must be alone on its line; ``False`` lets text follow it on the same
            line (the match then ends where that text begins).
    """
    words = r"\s+".join(re.escape(word) for word in header.strip("[]").split())
    # Tolerated decorations: markdown headings / bold, a missing bracket, a trailing colon.
    pattern = rf"^[ \t]*(?:#+[ \t]*)?\**[ \t]*\[?[ \t]*{words}[ \t]*\]?[ \t]*\**[ \t]*:?[ \t]*\**[ \t]*"
    return re.compile(pattern + ("$" if whole_line else ""), re.IGNORECASE | re.MULTILINE)


CHANGES_RE = header_regex(CHANGES_HEADER)
TREE_RE = header_regex(TREE_HEADER)
TERMINAL_RE = header_regex(TERMINAL_MARKER)
PATCH_RE = header_regex(PATCH_HEADER)
_FENCE = re.compile(r"^[ \t]*```[^\n]*$\n?", re.MULTILINE)
_URL_LINE = re.compile(rf"^[ \t]*{re.escape(URL_PREFIX)}[ \t]*(\S+)[ \t]*$", re.IGNORECASE)
#: One patch-mode edit line (a list bullet or number in front is tolerated).
EDIT_LINE = re.compile(
    rf"^[ \t]*(?:[-*][ \t]+|\d+[.)][ \t]+)?(?P<op>{'|'.join(EDIT_OPERATIONS)})\b[ \t]*(?P<after>after\b[ \t]*)?"
    r"(?P<ref>\[[^\]\s]+\]|#\d+|\"[^\"]*\")?[ \t]*(?P<colon>:[ ]?(?P<line>.*))?$",
    re.IGNORECASE,
)


def strip_fences(text: str) -> tuple[str, bool]:
    """``text`` without markdown code-fence lines, and whether it had any."""
    return _FENCE.sub("", text), bool(_FENCE.search(text))


def split_url_line(lines: list[str]) -> tuple[str | None, list[str]]:
    """Read a ``URL: <url>`` line if it is the first non-blank line of a section.

    Returns:
        The URL (``None`` if the section names none) and the section's lines without that line.
    """
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        if match := _URL_LINE.match(line):
            return match.group(1), lines[:index] + lines[index + 1 :]
        break
    return None, lines


@dataclass(frozen=True)
class PatchEdit:
    """One patch-mode edit of the current tree.

    Attributes:
        op: ``"ADD"``, ``"REMOVE"`` or ``"CHANGE"``.
        ref: The referenced line of the current tree: ``[bid]``, ``"<node line>"`` or ``#N``.
        line: The new node line (``ADD``, ``CHANGE``); ``""`` for ``REMOVE``.
    """

    op: str
    ref: str
    line: str = ""

    def render(self) -> str:
        """The edit as one line of a patch-mode output (:data:`EDIT_LINE` reads it back)."""
        if self.op == "REMOVE":
            return f"REMOVE {self.ref}"
        if self.op == "ADD":
            return f"ADD after {self.ref}: {self.line}"
        return f"CHANGE {self.ref}: {self.line}"


__all__ = [
    "CHANGES_HEADER",
    "CHANGES_RE",
    "EDIT_LINE",
    "EDIT_OPERATIONS",
    "PATCH_HEADER",
    "PATCH_RE",
    "TERMINAL_MARKER",
    "TERMINAL_RE",
    "TREE_HEADER",
    "TREE_RE",
    "URL_PREFIX",
    "PatchEdit",
    "header_regex",
    "split_url_line",
    "strip_fences",
]
