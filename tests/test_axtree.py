"""The one accessibility-tree grammar: every reader of tree text sees the same nodes."""

from __future__ import annotations

import pytest

from dynaweb_env import experts, observation
from dynaweb_env.axtree import (
    AxNode,
    axtree_element_ids,
    axtree_title,
    clean_axtree,
    is_node_line,
    line_bid,
    nodes_by_bid,
    parse_axtree,
    parse_axtree_line,
    strip_bid,
    structural_diff,
    truncate_axtree,
)
from dynaweb_env.world_model.patch import apply_patch, patch_from_trees

TREE = """RootWebArea 'Form', focused
\t[5] StaticText 'Hello'
\tStaticText 'no id here'
\t\tInlineTextBox 'Hello'
\t[9] checkbox 'a, b', checked='false'
\t[12] textbox '' value='x', focused"""


def test_a_line_without_an_id_has_bid_none_everywhere():
    nodes = parse_axtree(TREE)
    assert [node.bid for node in nodes] == [None, "5", None, None, "9", "12"]
    assert experts.parse_axtree is parse_axtree and experts.AxNode is AxNode  # one parser, one node type
    keyed, unkeyed = nodes_by_bid(nodes)
    assert list(keyed) == ["5", "9", "12"] and [node.role for node in unkeyed][:2] == ["RootWebArea", "StaticText"]
    assert axtree_element_ids(TREE) == observation.axtree_element_ids(TREE) == ["5", "9", "12"]


def test_node_fields():
    box = parse_axtree_line("\t[9] checkbox 'a, b', checked='false'")
    assert (box.bid, box.role, box.name, box.value, box.depth, box.attributes) == (
        "9", "checkbox", "a, b", None, 1, {"checked": "false"}
    )  # fmt: skip
    assert not box.checked and box.line == "\t[9] checkbox 'a, b', checked='false'"
    field = parse_axtree_line("\t[12] textbox '' value='x', focused")
    assert field.value == "x" and field.attributes == {"focused": "True"}


@pytest.mark.parametrize(
    ("line", "bid", "stripped", "node"),
    [
        ("\t[13] button 'OK'", "13", "button 'OK'", True),
        ("RootWebArea 'Done'", None, "RootWebArea 'Done'", True),
        ("\tStaticText 'x'", None, "StaticText 'x'", False),
        ("... (3 more lines cut)", None, "... (3 more lines cut)", False),
        ("", None, "", False),
    ],
)
def test_line_helpers_agree_with_the_grammar(line, bid, stripped, node):
    assert line_bid(line) == bid and strip_bid(line) == stripped and is_node_line(line) is node


def test_clean_truncate_and_title():
    assert "InlineTextBox" not in clean_axtree(TREE) and clean_axtree(TREE).count("\n") == 4
    cut = truncate_axtree(TREE * 20, 200)
    assert len(cut) <= 200 and cut.splitlines()[-1].startswith("... (")
    assert parse_axtree(cut)[-1].role != "..."  # the cut marker is not a node
    assert axtree_title(TREE) == "Form" and axtree_title("\t[1] button 'x'") == ""


def test_patch_and_diff_read_ids_as_the_grammar_does():
    after = TREE.replace("checked='false'", "checked='true'").replace("\tStaticText 'no id here'\n", "")
    assert apply_patch(TREE, patch_from_trees(TREE, after))[0] == after
    assert structural_diff(TREE, after) == (
        "The checkbox [9] 'a, b' became checked. Text disappeared: 'no id here'. URL unchanged."
    )
