"""The observation space and the pure observation helpers shared by both envs."""

import numpy as np

from dynaweb_env.observation import (
    action_target,
    axtree_element_ids,
    axtree_nodes,
    clean_axtree,
    make_observation,
    render_observation,
    truncate_axtree,
)
from dynaweb_env.spaces import OBSERVATION_KEYS, WebText, web_action_space, web_observation_space
from dynaweb_env.world_model.judge import judge_step

TREE = (
    "RootWebArea 'Click Test Task', focused\n\t[13] button 'ONE'\n\t\t[20] InlineTextBox 'ONE'\n\t[14] button 'TWO'\n"
)


def test_web_text_accepts_any_unicode_up_to_its_length():
    space = WebText(max_length=10)
    assert space.contains("café ☕ 中文")
    assert not space.contains("x" * 11)
    assert not space.contains(b"bytes")
    assert not space.contains(3)


def test_observation_space_samples_members_and_is_seedable():
    space = web_observation_space()
    assert set(space.spaces) == set(OBSERVATION_KEYS)
    space.seed(3)
    first = space.sample()
    space.seed(3)
    assert space.sample() == first
    assert space.contains(first)
    assert web_action_space().contains("click [1]")


def test_observation_spaces_compare_equal():
    assert web_observation_space() == web_observation_space()
    assert WebText(5) != WebText(6)


def test_make_observation_is_a_member():
    observation = make_observation("Click ONE", "file:///x.html", TREE)
    assert tuple(observation) == OBSERVATION_KEYS
    assert web_observation_space().contains(observation)


def test_clean_axtree_drops_text_boxes_and_keeps_bids():
    cleaned = clean_axtree(TREE)
    assert "InlineTextBox" not in cleaned
    assert axtree_element_ids(cleaned) == ["13", "14"]
    assert axtree_nodes(cleaned)[1] == "[13] button 'ONE'"


def test_action_target_is_the_acted_on_elements_line():
    tree = (
        "RootWebArea 'Form', focused\n\t[5] textbox 'name'\n\t\t[51] StaticText 'x'\n\t[7] button '" + "S" * 200 + "'"
    )
    assert action_target("type [5] [Kay] [0]", tree) == "[5] textbox 'name'"
    assert (
        action_target("click [7]", tree).startswith("[7] button 'SSS") and len(action_target("click [7]", tree)) == 120
    )
    # No element: an action without one, a malformed action, an id not in the tree.
    assert (
        action_target("scroll [down]", tree) == action_target("click [", tree) == action_target("click [9]", tree) == ""
    )


def action_target_text(action: str, tree: str) -> str:
    return judge_step(action, "", tree).text


def action_target_row(action: str, tree: str) -> str:
    return judge_step(action, "", tree).row


def test_an_unnamed_element_is_read_by_the_text_it_shows():
    # navigate-tree: a folder's item holds its own label, and its sub-items' labels deeper.
    tree = (
        "RootWebArea 'Tree'\n\t[16] list ''\n\t\t[17] listitem ''\n\t\t\tStaticText 'Tula'\n"
        "\t\t\t[19] list ''\n\t\t\t\t[20] listitem ''\n\t\t\t\t\tStaticText 'Rex'\n\t[30] button 'OK'\n"
        "\t[31] textbox '' value='Kay'\n\t\tStaticText 'Kay'\n\t[32] image ''"
    )
    assert action_target_text("click [17]", tree) == "Tula"  # not its sub-item's 'Rex'
    assert action_target_text("click [20]", tree) == "Rex"
    # A name or a value already says what an element is; no text, no element, no id: nothing.
    assert action_target_text("click [30]", tree) == action_target_text("click [31]", tree) == ""
    assert action_target_text("click [32]", tree) == action_target_text("click [99]", tree) == ""
    assert action_target_text("scroll [down]", tree) == action_target_text("click [", tree) == ""
    assert action_target("click [17]", tree) == "[17] listitem ''"  # the target line itself is unchanged


def test_an_unnamed_icon_is_read_by_its_rows_text():
    # email-inbox as the world model draws it (rows flattened) and as the browser does (a container per row).
    flat = (
        "RootWebArea 'Inbox'\n\t[16] heading 'Primary'\n\t[17] image ''\n\tStaticText 'Zabrina'\n"
        "\tStaticText 'Mi.'\n\t[26] image ''\n\t[27] image ''\n\tStaticText 'Simonette'\n\t[36] image ''\n"
        "\t[37] image ''\n\t[40] textbox ''\n"
    )
    nested = (
        "RootWebArea 'Inbox'\n\t[16] heading 'Primary'\n\t[17] image ''\n\t[18] generic, clickable=True\n"
        "\t\tStaticText 'Zabrina'\n\t\tStaticText 'Mi.'\n\t\t[26] image ''\n\t\t[27] image ''\n"
        "\t[28] generic, clickable=True\n\t\tStaticText 'Simonette'\n\t\t[37] image ''"
    )
    for tree in (flat, nested):
        # The row's other icons are passed over; the row ends at the element before its text, or at its parent.
        assert action_target_row("click [27]", tree) == action_target_row("click [26]", tree) == "Zabrina Mi."
        assert action_target_row("click [37]", tree) == "Simonette"
        assert action_target_row("click [17]", tree) == ""  # a named element before it: no row text
    assert action_target_row("click [16]", flat) == ""  # named
    assert action_target_row("type [40] [x] [0]", flat) == ""  # a text field's row is its label
    tree = "RootWebArea 'Tree'\n\t[17] listitem ''\n\t\tStaticText 'Tula'\n\t[19] listitem ''\n\t\tStaticText 'Rex'"
    assert action_target_row("click [19]", tree) == ""  # it shows a text of its own: that is read instead


def test_truncate_axtree_cuts_at_lines_and_says_so():
    tree = "\n".join(f"[{i}] link 'item {i}'" for i in range(200))
    cut = truncate_axtree(tree, 500)
    assert len(cut) <= 500
    assert cut.splitlines()[-1].startswith("... (") and "more lines cut" in cut
    assert truncate_axtree(tree, 0) == tree
    assert truncate_axtree("short", 100) == "short"


def test_render_observation_mentions_errors():
    observation = make_observation("g", "u", TREE, "click [99]", "no element with bid 99")
    text = render_observation(observation)
    assert "OBJECTIVE: g" in text and "PREVIOUS ACTION ERROR: no element with bid 99" in text
    assert np.char.count(text, "[13]") == 1
