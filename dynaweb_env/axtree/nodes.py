"""The grammar of BrowserGym's flattened accessibility tree, and the pure functions that read it.

One node per line, indented by depth with tabs; a node the agent can act on carries its element id
(``bid``) in brackets::

    RootWebArea 'Login User Task', focused
    \t[14] paragraph ''
    \t\tStaticText 'Username'
    \t\t[16] textbox '' value='it\\'s me', focused
    \t[18] checkbox 'Gh', checked='true'

A line reads ``[bid] role 'name' value='v', flag, key='x'``: an optional id, the role, an optional
quoted name (Python ``repr`` quoting, as BrowserGym writes it), an optional ``value=``, then
comma-separated properties. :data:`NODE_LINE` is the one definition of that grammar in the project;
everything that reads tree text (the envs, the world-model parsers, patch mode, the structural diff,
the scripted experts) goes through :func:`parse_axtree_line` or the helpers below.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

#: Roles BrowserGym emits that carry no information for an agent (DESIGN.md: drop them).
IGNORED_ROLES: tuple[str, ...] = ("InlineTextBox", "LineBreak")
#: Roles of the unnumbered root node of a page.
ROOT_ROLES: tuple[str, ...] = ("RootWebArea", "WebArea")
#: Start of the last line :func:`truncate_axtree` writes (``"... (12 more lines cut)"``); not a node.
CUT_MARKER = "... ("

#: A node line: indentation, an optional ``[bid]`` followed by whitespace, the role (which ends at a comma:
#: a nameless node's properties follow it directly, ``[13] generic, clickable=True``), the rest.
NODE_LINE = re.compile(r"^(?P<indent>\s*)(?:\[(?P<bid>[^\]\s]+)\]\s+)?(?P<role>[^\s,]+)(?P<rest>.*)$")
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_NAME = re.compile(rf"^\s*(?P<name>{_QUOTED})")
_VALUE = re.compile(rf"^\s*value=(?P<value>{_QUOTED})")


@dataclass(frozen=True)
class AxNode:
    """One node line of a flattened accessibility tree.

    Attributes:
        bid: The BrowserGym element id, ``None`` for lines printed without one (most ``StaticText``).
        role: The ARIA role (``button``, ``checkbox``, ``StaticText`` ...).
        name: The accessible name, unquoted (``""`` if none).
        value: The ``value=`` field, unquoted, or ``None`` when the line has none.
        attributes: The remaining properties, ``key -> value`` (bare flags such as ``focused`` map
            to ``"True"``).
        depth: Indentation depth (one per tab, or per two spaces).
        line: The line as written.
    """

    bid: str | None
    role: str
    name: str = ""
    value: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    depth: int = 0
    line: str = ""

    @property
    def checked(self) -> bool:
        return self.attributes.get("checked", "").lower() == "true"

    @property
    def expanded(self) -> bool:
        return self.attributes.get("expanded", "").lower() == "true"

    def describe(self) -> str:
        """Short reference used in sentences: ``"checkbox [15] 'foo'"``."""
        ref = f"{self.role} [{self.bid}]" if self.bid else self.role
        return f"{ref} {quote_text(self.name)}" if self.name else ref

    def content(self) -> tuple[Any, ...]:
        """Everything but the position (depth, line): two nodes with the same content are unchanged."""
        return (self.role, self.name, self.value, tuple(sorted(self.attributes.items())))


def _unquote(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
        return value if isinstance(value, str) else literal[1:-1]
    except (ValueError, SyntaxError):
        return literal[1:-1]


def quote_text(text: str, limit: int = 60) -> str:
    """``text`` whitespace-normalised, cut to ``limit`` characters and single-quoted, for sentences."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"'{text}'"


def _split_attributes(text: str) -> list[str]:
    # Split on commas that are outside quotes.
    parts, current, quote, escaped = [], [], "", False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
            continue
        if char == "\\" and quote:
            escaped = True
            current.append(char)
            continue
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == ",":
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _attributes(text: str) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for part in _split_attributes(text):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not key:
            continue
        raw = raw.strip()
        attributes[key] = (_unquote(raw) if raw[:1] in "'\"" else raw) if sep else "True"
    return attributes


def parse_axtree_line(line: str) -> AxNode | None:
    """Parse one line of a flattened tree (``None`` for blank lines and the cut marker)."""
    if not line.strip() or line.lstrip().startswith(CUT_MARKER):
        return None
    match = NODE_LINE.match(line.rstrip())
    if match is None:
        return None
    indent = match.group("indent")
    depth = indent.count("\t") + (len(indent.replace("\t", "")) // 2)
    rest = match.group("rest")
    name = ""
    if name_match := _NAME.match(rest):
        name = _unquote(name_match.group("name"))
        rest = rest[name_match.end() :]
    value = None
    if value_match := _VALUE.match(rest):
        value = _unquote(value_match.group("value"))
        rest = rest[value_match.end() :]
    return AxNode(match.group("bid"), match.group("role"), name, value, _attributes(rest), depth, line)


def parse_axtree(axtree: str) -> list[AxNode]:
    """The nodes of a flattened tree, in page order (blank lines and the cut marker left out)."""
    return [node for line in axtree.splitlines() if (node := parse_axtree_line(line)) is not None]


def nodes_by_bid(nodes: list[AxNode]) -> tuple[dict[str, AxNode], list[AxNode]]:
    """Split nodes into those keyed by bid (the first of each id, in page order) and the rest."""
    keyed: dict[str, AxNode] = {}
    unkeyed: list[AxNode] = []
    for node in nodes:
        if node.bid and node.bid not in keyed:
            keyed[node.bid] = node
        else:
            unkeyed.append(node)
    return keyed, unkeyed


def line_bid(line: str) -> str | None:
    """The element id of one tree line (``None`` if it has none)."""
    match = NODE_LINE.match(line.rstrip())
    return match.group("bid") if match else None


def strip_bid(line: str) -> str:
    """A tree line without its ``[bid]`` prefix and indentation: ``"\\t[13] button 'OK'"`` -> ``"button 'OK'"``."""
    match = NODE_LINE.match(line.rstrip())
    if match is None:
        return line.lstrip()
    return line[match.start("role") :].lstrip()


def replace_line_fields(
    line: str, name: str | None = None, remove_value: bool = False, value: str | None = None
) -> str:
    """One tree line with its name replaced (``name``), its ``value=`` field removed (``remove_value``) or set
    (``value``, written right after the name), the rest as written.

    ``"\t[18] checkbox 'dhjq', checked='true'"`` with ``name="cp"`` -> ``"\t[18] checkbox 'cp', checked='true'"``.
    A line that is not a node comes back unchanged.
    """
    match = NODE_LINE.match(line.rstrip())
    if match is None:
        return line
    head, rest = line[: match.start("rest")], match.group("rest")
    name_match = _NAME.match(rest)
    written_name, rest = (name_match.group(0), rest[name_match.end() :]) if name_match else ("", rest)
    if name is not None:
        written_name = " " + repr(name)  # BrowserGym writes names with Python's repr quoting
    if (remove_value or value is not None) and (value_match := _VALUE.match(rest)):
        rest = rest[value_match.end() :]
    if value is not None:
        rest = f" value={value!r}" + rest
    return head + written_name + rest


def is_node_line(line: str) -> bool:
    """Whether a line is an accessibility-tree node an agent can recognise: one with an id, or the root."""
    node = parse_axtree_line(line)
    return node is not None and (node.bid is not None or node.role in ROOT_ROLES)


def axtree_element_ids(axtree: str) -> list[str]:
    """The bids (``[id]`` prefixes) of the nodes of a flattened tree, in order."""
    return [bid for line in axtree.splitlines() if (bid := line_bid(line)) is not None]


def axtree_element_line(axtree: str, bid: str, max_chars: int = 120) -> str:
    """The node line of element ``bid`` in a flattened tree, whitespace-normalised and cut to ``max_chars``
    (``""`` if the tree has no such element): what an action on ``[bid]`` acted on, in words."""
    for line in axtree.splitlines():
        if line_bid(line) == bid:
            return _cut(" ".join(line.split()), max_chars)
    return ""


def _cut(text: str, max_chars: int) -> str:
    """``text``, or its first ``max_chars - 3`` characters and ``...`` when it is longer than ``max_chars``."""
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


#: Roles of the fields that hold typed text (their text is their ``value``).
TEXT_FIELD_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
#: The most characters :func:`axtree_element_text` returns.
MAX_ELEMENT_TEXT_CHARS = 80


def axtree_element_text(axtree: str, bid: str, max_chars: int = MAX_ELEMENT_TEXT_CHARS) -> str:
    """The text element ``bid`` shows: its direct ``StaticText`` children, joined with spaces and cut to
    ``max_chars`` (``""`` for none, or no such element).

    A list item or a cell is often unnamed in the tree (``[17] listitem ''``) and shows its label as a child
    ``StaticText 'Marcella'``. Only direct children count: a folder's item holds its sub-items' labels deeper.
    """
    lines = axtree.splitlines()
    if (found := _element_at(lines, bid)) is None:
        return ""
    index, node = found
    texts = []
    for child_line in lines[index + 1 :]:
        child = parse_axtree_line(child_line)
        if child is None:
            continue
        if child.depth <= node.depth:
            break
        if child.depth == node.depth + 1 and child.role == "StaticText" and child.name.strip():
            texts.append(" ".join(child.name.split()))
    return _cut(" ".join(texts), max_chars)


def _element_at(lines: list[str], bid: str) -> tuple[int, AxNode] | None:
    """The index and node of element ``bid``'s line among ``lines`` (``None``: no such element)."""
    for index, line in enumerate(lines):
        if line_bid(line) == bid:
            node = parse_axtree_line(line)
            return None if node is None else (index, node)
    return None


def axtree_row_text(axtree: str, bid: str, max_chars: int = MAX_ELEMENT_TEXT_CHARS) -> str:
    """The text just before element ``bid`` in its row: the ``StaticText`` lines that precede it up to the
    element before them, in page order, joined with spaces and cut to ``max_chars`` (``""`` for none, or no such
    element).

    An icon is often unnamed and shows no text (``[27] image ''``, the star of an inbox row); what tells it from
    the same icon in the next row is the row's text before it (``'Zabrina' 'Mi.' 'Elementum condi..'``). Walking
    back from the element: unnamed elements before any text are passed over (the row's other icons), a named one
    ends the row, and so do the first element after some text and the element's parent.
    """
    lines = axtree.splitlines()
    if (found := _element_at(lines, bid)) is None:
        return ""
    index, node = found
    texts: list[str] = []
    for previous_line in reversed(lines[:index]):
        previous = parse_axtree_line(previous_line)
        if previous is None:
            continue
        if previous.depth < node.depth:
            break
        if previous.bid is not None:
            if texts or previous.name.strip():
                break
            continue
        if previous.role == "StaticText" and (name := " ".join(previous.name.split())):
            if sum(len(text) + 1 for text in texts) + len(name) > max_chars:
                break
            texts.append(name)
    return " ".join(reversed(texts))


def axtree_nodes(axtree: str) -> list[str]:
    """The node lines of a tree, whitespace-normalised: the unit of world-model fidelity metrics."""
    return [" ".join(line.split()) for line in axtree.splitlines() if line.strip()]


def axtree_title(axtree: str) -> str:
    """The name of the page's root node (``""`` if the first node is not a root)."""
    for line in axtree.splitlines():
        node = parse_axtree_line(line)
        if node is not None:
            return node.name if node.role in ROOT_ROLES else ""
    return ""


def clean_axtree(axtree: str) -> str:
    """Drop blank lines, lines of :data:`IGNORED_ROLES` and trailing whitespace from a flattened tree."""
    kept = []
    for line in axtree.splitlines():
        if not line.strip():
            continue
        match = NODE_LINE.match(line.rstrip())
        if match is not None and match.group("role") in IGNORED_ROLES:
            continue
        kept.append(line.rstrip())
    return "\n".join(kept)


def truncate_axtree(axtree: str, max_chars: int) -> str:
    """Cut a tree to at most ``max_chars`` characters at a line boundary.

    This is the one documented way long trees are shortened (for prompts): whole lines are kept
    from the top of the page, and a final line (starting with :data:`CUT_MARKER`) says how many
    were dropped, so neither the policy nor the world model mistakes a cut tree for a short page.
    """
    if max_chars <= 0 or len(axtree) <= max_chars:
        return axtree
    lines = axtree.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 1 > max_chars - 40:
            break
        kept.append(line)
        size += len(line) + 1
    kept.append(f"{CUT_MARKER}{len(lines) - len(kept)} more lines cut)")
    return "\n".join(kept)


__all__ = [
    "CUT_MARKER",
    "IGNORED_ROLES",
    "MAX_ELEMENT_TEXT_CHARS",
    "NODE_LINE",
    "ROOT_ROLES",
    "TEXT_FIELD_ROLES",
    "AxNode",
    "axtree_element_ids",
    "axtree_element_line",
    "axtree_element_text",
    "axtree_row_text",
    "axtree_nodes",
    "axtree_title",
    "clean_axtree",
    "is_node_line",
    "line_bid",
    "nodes_by_bid",
    "parse_axtree",
    "parse_axtree_line",
    "quote_text",
    "strip_bid",
    "truncate_axtree",
]
