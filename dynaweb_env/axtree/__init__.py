"""The accessibility tree, as text: its one grammar, its nodes, and the pure functions on it.

- :mod:`~dynaweb_env.axtree.nodes`: the line grammar (:data:`NODE_LINE`), :class:`AxNode`,
  parsing, lookup by element id, cleaning and truncation.
- :mod:`~dynaweb_env.axtree.diff`: :func:`structural_diff`, the deterministic description of how
  a page changed between two trees.

Nothing here touches a browser or a model: every function is tested on plain strings.
"""

from .diff import DEFAULT_DIFF_MAX_CHARS, REPLACED_FRACTION, structural_diff
from .nodes import (
    CUT_MARKER,
    IGNORED_ROLES,
    NODE_LINE,
    ROOT_ROLES,
    TEXT_FIELD_ROLES,
    AxNode,
    axtree_element_ids,
    axtree_element_line,
    axtree_element_text,
    axtree_nodes,
    axtree_row_text,
    axtree_title,
    clean_axtree,
    is_node_line,
    line_bid,
    nodes_by_bid,
    parse_axtree,
    parse_axtree_line,
    quote_text,
    replace_line_fields,
    strip_bid,
    truncate_axtree,
)

__all__ = [
    "CUT_MARKER",
    "DEFAULT_DIFF_MAX_CHARS",
    "IGNORED_ROLES",
    "NODE_LINE",
    "REPLACED_FRACTION",
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
    "replace_line_fields",
    "strip_bid",
    "structural_diff",
    "truncate_axtree",
]
