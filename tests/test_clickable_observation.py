"""The observation keeps clickable generic elements (a ``<span>`` link, a ``<div>`` button) with their bids."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.axtree import parse_axtree_line
from dynaweb_env.envs.browsergym_adapter import flatten_axtree, mark_clickable_generics

pytest.importorskip("browsergym.utils.obs", reason="needs the browser extra: pip install 'dynaweb[browser]'")


def _node(node_id: str, role: str, children: list[str], bid: str | None = None, name: str = "") -> dict:
    node = {"nodeId": node_id, "role": {"value": role}, "name": {"value": name}, "childIds": children}
    if bid is not None:
        node["browsergym_id"] = bid
    return node


# A page in BrowserGym's axtree_object form: a clickable span, a plain span, a button.
TREE = {
    "nodes": [
        _node("1", "RootWebArea", ["2", "4", "6"], name="Page"),
        _node("2", "generic", ["3"], bid="12"),
        _node("3", "StaticText", [], name="Proin"),
        _node("4", "generic", ["5"], bid="13"),
        _node("5", "StaticText", [], name="plain"),
        _node("6", "button", [], bid="14", name="OK"),
    ]
}
EXTRA = {bid: {"clickable": bid in ("12", "14"), "visibility": 1.0, "bbox": None, "set_of_marks": 0}
         for bid in ("12", "13", "14")}  # fmt: skip


def test_clickable_generic_is_kept_with_its_bid_and_nothing_else_changes():
    text, cut = flatten_axtree(TREE, EXTRA)
    assert cut == 0
    assert text.splitlines() == [
        "RootWebArea 'Page'",
        "\t[12] generic, clickable=True",
        "\t\tStaticText 'Proin'",
        "\tStaticText 'plain'",
        "\t[14] button 'OK'",
    ]
    node = parse_axtree_line(text.splitlines()[1])
    assert (node.bid, node.role, node.name, node.attributes) == ("12", "generic", "", {"clickable": "True"})


def test_opt_out_gives_browsergyms_default_flattening():
    from browsergym.utils.obs import flatten_axtree_to_str

    text, _ = flatten_axtree(TREE, EXTRA, clickable=False)
    assert text == flatten_axtree_to_str(TREE)
    assert "[12]" not in text and "generic" not in text


def test_marking_leaves_the_input_tree_alone_and_needs_the_properties():
    before = repr(TREE)
    marked_tree, marked = mark_clickable_generics(TREE, EXTRA)
    assert marked == 1 and repr(TREE) == before
    assert mark_clickable_generics(TREE, None) == (TREE, 0)  # no properties: nothing is known to be clickable
    assert marked_tree["nodes"][1]["properties"][-1]["name"] == "clickable"


def test_bad_clickable_argument_is_refused():
    with pytest.raises(ValueError, match="clickable"):
        gym.make("RealWeb-v0", clickable="yes")


def test_navigate_tree_expert_reads_a_closed_folder_by_its_kept_toggle():
    """With the toggles kept, bids no longer leave a gap after a closed folder; its generic children mark it."""
    from dynaweb_env.experts import get_expert

    tree = "\n".join([
        "RootWebArea 'Navigate Tree Task'",
        "\t[16] list ''",
        "\t\t[17] listitem ''",
        "\t\t\t[18] generic, clickable=True",
        "\t\t\t[19] generic, clickable=True",
        "\t\t\t\tStaticText 'Michel'",
        "\t\t[41] listitem ''",
        "\t\t\tStaticText 'Lyda'",
    ])  # fmt: skip
    goal = 'Navigate through the file tree. Find and click on the folder or file named "Augus".'
    observation = {"goal": goal, "url": "file:///x.html", "axtree": tree, "last_action": "", "last_action_error": ""}
    assert get_expert("miniwob.navigate-tree").act(observation)[1] == "click [17]"  # the folder, not the file [41]


# ---------------------------------------------------------------------------- real browser


def _link_bid(axtree: str, text: str) -> str | None:
    """The bid of the clickable generic whose first child is the StaticText ``text``."""
    lines = axtree.splitlines()
    for line, child in zip(lines, lines[1:], strict=False):
        node, below = parse_axtree_line(line), parse_axtree_line(child)
        if node and below and node.role == "generic" and node.bid and below.name == text:
            return node.bid
    return None


def test_span_link_has_a_bid_and_clicking_it_solves_click_link(real_web_env):
    obs, _ = real_web_env.reset(options={"task": "miniwob.click-link", "task_seed": 3})
    target = re.search(r'"(.+)"', obs["goal"]).group(1)
    bid = _link_bid(obs["axtree"], target)
    assert bid is not None, obs["axtree"]
    assert f"[{bid}] generic, clickable=True" in obs["axtree"]
    _, reward, terminated, _, _ = real_web_env.step(f"click [{bid}]")
    assert (reward, terminated) == (1.0, True)


def test_div_submit_has_a_bid_on_multi_orderings(real_web_env):
    obs, _ = real_web_env.reset(options={"task": "miniwob.multi-orderings", "task_seed": 3})
    lines = obs["axtree"].splitlines()
    pairs = zip(lines, lines[1:], strict=False)
    submit = [parse_axtree_line(a) for a, b in pairs if parse_axtree_line(b).name == "Submit"]
    assert submit and submit[0].role == "generic" and submit[0].bid is not None


@pytest.mark.slow
def test_clickable_false_gives_the_old_observation(require_browser):
    env = gym.make("RealWeb-v0", task="miniwob.click-link", clickable=False)
    try:
        obs, _ = env.reset(options={"task_seed": 3})
    finally:
        env.close()
    target = re.search(r'"(.+)"', obs["goal"]).group(1)
    assert f"StaticText '{target}'" in obs["axtree"]
    assert "generic" not in obs["axtree"] and _link_bid(obs["axtree"], target) is None
