"""Patch mode of the world model: edits derived from real trees, parsed and applied without raising."""

from __future__ import annotations

import pytest

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES as BUILTIN_TRAJECTORIES
from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_env.world_model import WebWorldModel, WorldModelRequest
from dynaweb_env.world_model.model import OUTPUT_MODES, RETRY_MIN_TEMPERATURE
from dynaweb_env.world_model.patch import (
    PATCH_HEADER,
    PatchEdit,
    apply_patch,
    format_patch,
    format_patch_target,
    parse_patch,
    parse_patch_output,
    patch_from_trees,
    patch_system_prompt,
)
from dynaweb_env.world_model.prompts import TREE_HEADER, WORLD_MODEL_SYSTEM_PROMPT, world_model_system_prompt
from dynaweb_trainer.world_model_sft import is_terminal_transition, world_model_example

TREE = "RootWebArea 'Form', focused\n\tStaticText 'Enter a name'\n\t[13] textbox ''\n\t[15] button 'Submit'"


def real_transitions():
    return [(t, i) for t in read_trajectories(BUILTIN_TRAJECTORIES) for i in range(len(t.steps) - 1)]


def test_patch_roundtrip_on_every_real_transition():
    transitions = real_transitions()
    assert len(transitions) > 50
    sizes = []
    for trajectory, index in transitions:
        before, after = trajectory.steps[index], trajectory.steps[index + 1]
        target = format_patch_target(after.url, before.axtree, after.axtree, False)
        prediction = parse_patch_output(target, before.url, before.axtree)
        assert prediction.error is None, (trajectory.id, index, prediction.error)
        assert prediction.axtree.splitlines() == after.axtree.splitlines(), (trajectory.id, index)
        assert prediction.url == after.url
        sizes.append(len(patch_from_trees(before.axtree, after.axtree)))
    # A patch is far shorter than the tree: that is the point of the mode.
    assert sum(sizes) / len(sizes) < 5


@pytest.mark.parametrize(
    "after",
    [
        TREE,  # unchanged: no edits
        TREE.replace("[13] textbox ''", "[13] textbox 'Ann', focused"),
        "New root\n" + TREE,  # insertion at the top
        TREE + "\n\tStaticText 'Thanks'\n\tStaticText 'Thanks'",  # duplicate lines
        TREE.replace("\tStaticText 'Enter a name'\n", ""),  # removal of a line without a bid
        "[15] button 'Submit'\n\t[13] textbox ''",  # reordered, and an indented line un-indented
        "",
    ],
)
def test_patch_from_trees_gives_after_exactly(after):
    edits = patch_from_trees(TREE, after)
    parsed, problems = parse_patch(format_patch(edits))
    assert not problems and parsed == edits
    tree, problems = apply_patch(TREE, parsed)
    assert not problems
    assert tree.splitlines() == after.splitlines()
    assert (edits == []) == (after == TREE)


def test_references_prefer_bids_then_text_then_line_numbers():
    before = "RootWebArea 'x'\n\tStaticText 'a'\n\tStaticText 'a'\n\t[7] link 'go'"
    after = "RootWebArea 'y'\n\tStaticText 'a'\n\tStaticText 'b'\n\t[7] link 'go', focused"
    rendered = format_patch(patch_from_trees(before, after))
    assert "CHANGE \"RootWebArea 'x'\": RootWebArea 'y'" in rendered
    assert "CHANGE #3: StaticText 'b'" in rendered  # duplicated text: only a line number is unambiguous
    assert "CHANGE [7]: link 'go', focused" in rendered  # the line keeps its id


def test_long_text_lines_are_named_by_a_unique_prefix():
    before = "RootWebArea 'x'\n\tStaticText 'Sed mi libero sagittis eros'\n\tStaticText 'Sed mi other words'"
    after = "RootWebArea 'x'\n\tStaticText 'Sed mi libero sagittis eros'\n\tStaticText 'Vitae'"
    rendered = format_patch(patch_from_trees(before, after))
    assert rendered == "CHANGE \"StaticText 'Sed mi other\": StaticText 'Vitae'"
    assert apply_patch(before, parse_patch(rendered)[0])[0] == after
    # A prefix shared by two lines names neither.
    tree, problems = apply_patch(before, parse_patch('REMOVE "StaticText \'Sed mi"')[0])
    assert tree == before and problems


def test_a_changed_line_keeps_its_id_unless_the_new_line_has_its_own():
    tree, problems = apply_patch(TREE, parse_patch("CHANGE [15]: button 'Send'\nCHANGE [13]: [14] textbox 'A'")[0])
    assert not problems and tree.splitlines()[-2:] == ["\t[14] textbox 'A'", "\t[15] button 'Send'"]
    # A line with an id turning into one without: written as remove + add, still exact.
    after = TREE.replace("[15] button 'Submit'", "StaticText 'Sent'")
    edits = patch_from_trees(TREE, after)
    assert [edit.op for edit in edits] == ["REMOVE", "ADD"]
    assert apply_patch(TREE, edits)[0] == after


def test_malformed_and_unknown_edits_are_reported_and_skipped():
    text = "\n".join(
        [
            "CHANGE [13]: [13] textbox 'Ann'",  # indentation kept from the replaced line
            "REMOVE [99]",  # unknown bid
            "ADD [15]: [20] StaticText 'x'",  # ADD without 'after'
            "CHANGE [15]:",  # no node line
            "REMOVE [15]: extra",
            "the page shows a dialog",  # prose
            "- ADD after [15]: \t[21] StaticText 'Done'",  # a bullet is tolerated
            "REMOVE \"StaticText 'Enter a name'\"",
        ]
    )
    edits, problems = parse_patch(text)
    assert len(problems) == 4
    tree, unapplied = apply_patch(TREE, edits)
    assert unapplied == ["REMOVE [99]: no such line in the current tree; skipped"]
    assert tree.splitlines() == [
        "RootWebArea 'Form', focused",
        "\t[13] textbox 'Ann'",
        "\t[15] button 'Submit'",
        "\t[21] StaticText 'Done'",
    ]


def test_conflicting_edits_are_reported():
    tree, problems = apply_patch(TREE, [PatchEdit("REMOVE", "[13]"), PatchEdit("CHANGE", "[13]", "x")])
    assert problems and "[13]" not in tree


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "```\n[Next page edits]\nREMOVE [13]\n```", f"{PATCH_HEADER}\nCHANGE [13]: [13] textbox 'A"],
)
def test_parse_patch_output_never_raises(text):
    prediction = parse_patch_output(text, "u", TREE, finish_reason="length")
    assert prediction.error
    assert prediction.url == "u"


def test_parse_patch_output_reads_url_terminal_and_falls_back_to_a_full_tree():
    text = f"[Web state changes]\nsubmitted\n{PATCH_HEADER}\nURL: file:///done.html\nREMOVE [15]\n[Episode ended]"
    prediction = parse_patch_output(text, "u", TREE)
    assert prediction.error is None and prediction.terminal and prediction.url == "file:///done.html"
    assert prediction.changes == "submitted" and "[15]" not in prediction.axtree
    full = f"[Web state changes]\nnothing\n{TREE_HEADER}\nRootWebArea 'Other'\n\t[3] button 'A'"
    prediction = parse_patch_output(full, "u", TREE)
    assert "instead of" in prediction.error and prediction.axtree.startswith("RootWebArea 'Other'")
    missing = parse_patch_output("[Web state changes]\nno edits section", "u", TREE)
    assert missing.fallback and missing.axtree == TREE


def test_edits_alone_are_the_changes_described_in_code():
    # Δ is the edits: without a [Web state changes] section, changes describe the edited tree.
    prediction = parse_patch_output(f"{PATCH_HEADER}\nREMOVE [15]", "u", TREE)
    assert prediction.error is None and not prediction.fallback
    assert "[15]" not in prediction.axtree and "[15]" in prediction.changes and "disappeared" in prediction.changes
    unchanged = parse_patch_output(PATCH_HEADER, "u", TREE)
    assert unchanged.error is None and unchanged.axtree == TREE and unchanged.changes


def test_patch_prompt_replaces_only_the_format_section():
    prompt = patch_system_prompt()
    head = WORLD_MODEL_SYSTEM_PROMPT.split("Given the information above")[0]
    assert prompt.startswith(head) and PATCH_HEADER in prompt and TREE_HEADER not in prompt
    assert prompt != world_model_system_prompt()


class EchoPatchBackend:
    """A backend that answers every prompt with one fixed patch and records the prompts."""

    def __init__(self, text):
        self.text, self.calls, self.params = text, [], []

    def generate(self, conversations, params):
        self.calls.append(conversations)
        self.params.append(params)
        return [Generation(text=self.text, completion_ids=[1, 2, 3]) for _ in conversations]


def test_world_model_patch_mode_is_one_batched_call():
    assert set(OUTPUT_MODES) >= {"tree", "patch"}
    backend = EchoPatchBackend(f"[Web state changes]\ntyped\n{PATCH_HEADER}\nCHANGE [13]: [13] textbox 'Ann'")
    world_model = WebWorldModel(backend, output_mode="patch")
    requests = [WorldModelRequest("g", "u", TREE, "type [13] [Ann]")] * 3
    predictions = world_model.predict(requests, seed=0)
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 3
    assert backend.calls[0][0][0]["content"] == patch_system_prompt()
    assert all("[13] textbox 'Ann'" in p.axtree and p.error is None for p in predictions)
    tree_mode = WebWorldModel(EchoPatchBackend("x"))
    assert tree_mode.build_messages(requests[0])[0]["content"] == world_model_system_prompt()
    # A repeated edit line ends a patch (a greedy loop would run to max_new_tokens); a tree may repeat lines.
    tree_mode.predict(requests, seed=0)
    assert backend.params[0].stop_at_repeated_line and not tree_mode.backend.params[0].stop_at_repeated_line


class FlakyPatchBackend:
    """Answers the prompts of its first call with a malformed patch on odd rows; every later call is clean."""

    def __init__(self):
        self.params, self.sizes = [], []

    def generate(self, conversations, params):
        first = not self.params
        self.params.append(params)
        self.sizes.append(len(conversations))
        good, bad = f"{PATCH_HEADER}\nCHANGE [13]: [13] textbox 'Ann'", f"{PATCH_HEADER}\nREMOVE [99]"
        return [Generation(bad if first and row % 2 else good, [1]) for row in range(len(conversations))]


def test_malformed_outputs_are_redrawn_sampled_in_one_call():
    requests = [WorldModelRequest("g", "u", TREE, "type [13] [Ann]")] * 4
    once = WebWorldModel(FlakyPatchBackend(), output_mode="patch").predict(requests, seed=3)
    assert [p.error is None for p in once] == [True, False, True, False]  # the default redraws nothing

    backend = FlakyPatchBackend()
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    world_model = WebWorldModel(backend, sampling=greedy, output_mode="patch", invalid_retries=2)
    predictions = world_model.predict(requests, seed=3)
    assert all(p.error is None and "[13] textbox 'Ann'" in p.axtree for p in predictions)
    assert backend.sizes == [4, 2]  # only the two malformed ones, together; no third call once all are clean
    assert backend.params[1].temperature >= RETRY_MIN_TEMPERATURE  # a greedy redraw would repeat the mistake
    assert backend.params[1].seed not in (None, 3)
    with pytest.raises(ValueError, match="invalid_retries"):
        WebWorldModel(backend, invalid_retries=-1)


def test_sft_patch_targets_reproduce_the_next_tree():
    for trajectory, index in real_transitions()[:20]:
        example = world_model_example(trajectory, index, output_mode="patch")
        if example is None:
            continue
        messages, target = example
        assert messages[0]["content"] == patch_system_prompt()
        before, after = trajectory.steps[index], trajectory.steps[index + 1]
        prediction = parse_patch_output(target, before.url, before.axtree)
        assert prediction.axtree.splitlines() == after.axtree.splitlines()
        assert prediction.terminal == is_terminal_transition(trajectory, index)
