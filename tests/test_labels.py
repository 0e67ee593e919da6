"""Tests of the state-change labels: structural diff, teacher labelling (scripted and real model), CLI."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from dynaweb_env.axtree import parse_axtree_line, structural_diff
from dynaweb_env.data.io import read_trajectories, write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.llm.base import Generation, GenerationError, SamplingParams
from dynaweb_env.world_model.state_changes import (
    LABELS_METADATA_KEY,
    label_trajectories,
    main,
    transition_reasoning,
)
from dynaweb_env.world_model.teacher import TeacherLabeler, TeacherOutputError, Transition, parse_teacher_output

SHIPPED = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_small.jsonl"))

CHECKBOXES_BEFORE = """RootWebArea 'Click Checkboxes Task', focused
\t[5] StaticText 'Select nothing and click Submit.'
\t[9] checkbox 'foo', checked='false'
\t[11] checkbox 'bar', checked='false'
\t[14] button 'Submit'"""
CHECKBOXES_AFTER = """RootWebArea 'Click Checkboxes Task', focused
\t[5] StaticText 'Select nothing and click Submit.'
\t[9] checkbox 'foo', checked='true', focused
\t[11] checkbox 'bar', checked='false'
\t[14] button 'Submit'
\t[22] StaticText 'Done'"""


def test_diff_describes_state_changes_additions_and_url():
    text = structural_diff(CHECKBOXES_BEFORE, CHECKBOXES_AFTER, "file:///a.html", "file:///a.html")
    assert text == (
        "The checkbox [9] 'foo' became checked and received focus. A new StaticText [22] 'Done' appeared. "
        "URL unchanged."
    )
    back = structural_diff(CHECKBOXES_AFTER, CHECKBOXES_BEFORE, "file:///a.html", "file:///b.html")
    assert "The checkbox [9] 'foo' became unchecked and lost focus." in back
    assert "The StaticText [22] 'Done' disappeared." in back
    assert back.endswith("The URL changed to file:///b.html.")


def test_diff_values_unkeyed_text_no_change_and_replacement():
    before = "RootWebArea 'Form'\n\t[3] textbox 'Name'\n\t[4] button 'Go'\n\tStaticText 'Hello'"
    after = "RootWebArea 'Form'\n\t[3] textbox 'Name' value='Bob'\n\t[4] button 'Go'\n\tStaticText 'Bye'"
    assert structural_diff(before, after) == (
        "The textbox [3] 'Name' now has value 'Bob'. New text appeared: 'Bye'. Text disappeared: 'Hello'. "
        "URL unchanged."
    )
    assert structural_diff(before, before, "u", "u") == "No visible change on the page. URL unchanged."
    new_page = "RootWebArea 'Results'\n\t[40] heading 'Results'\n\t[41] link 'First hit'\n\t[42] link 'Second'"
    replaced = structural_diff(before, new_page, "http://s/", "http://s/q")
    assert replaced.startswith("The page was replaced by a new page 'Results' with 3 elements.")
    assert "link [41] 'First hit'" in replaced and replaced.endswith("The URL changed to http://s/q.")
    assert structural_diff(before, "", "u", "u") == "The page became empty. URL unchanged."


def test_diff_is_capped_and_deterministic():
    before = "RootWebArea 'List'\n" + "\n".join(f"\t[{i}] checkbox 'item {i}', checked='false'" for i in range(100))
    after = "RootWebArea 'List'\n" + "\n".join(
        f"\t[{i}] checkbox 'item {i}', checked='{'true' if i < 40 else 'false'}'" for i in range(100)
    )
    text = structural_diff(before, after, max_chars=300)
    assert len(text) <= 300 and text.endswith("URL unchanged.")
    assert "more changes.)" in text and text == structural_diff(before, after, max_chars=300)
    with pytest.raises(ValueError, match="max_chars"):
        structural_diff(before, after, max_chars=10)


def test_parse_axtree_line_reads_browsergym_lines():
    node = parse_axtree_line(
        "\t\t[349] combobox 'Change ticket type. Round trip' value='Round trip', visible, hasPopup='listbox', "
        "expanded=False"
    )
    assert (node.bid, node.role, node.name, node.value, node.depth) == (
        "349",
        "combobox",
        "Change ticket type. Round trip",
        "Round trip",
        2,
    )
    assert node.attributes == {"visible": "True", "hasPopup": "listbox", "expanded": "False"}
    quoted = parse_axtree_line("\t[6] checkbox \"Don't forget, ok\", checked='true'")
    assert quoted.name == "Don't forget, ok" and quoted.attributes == {"checked": "true"}
    assert parse_axtree_line("... (12 more lines cut)") is None


def test_diff_on_real_shipped_transitions():
    trajectories = read_trajectories(SHIPPED, on_error="raise")
    transitions = [(t, i) for t in trajectories for i in range(len(t.steps) - 1)]
    assert transitions, "the shipped data has real transitions"
    first: dict[str, str] = {}
    for trajectory, index in transitions:
        before, after = trajectory.steps[index], trajectory.steps[index + 1]
        text = structural_diff(before.axtree, after.axtree, before.url, after.url)
        assert 0 < len(text) <= 800 and text.endswith("URL unchanged.")  # MiniWoB++ tasks stay on their page
        assert text.startswith("No visible change") == (before.axtree == after.axtree)
        assert "replaced" not in text
        first.setdefault(trajectory.task_id, text)
    # What the expert's first action did, on real pages:
    assert "became checked and received focus" in first["miniwob.click-checkboxes"]
    assert "now has value" in first["miniwob.enter-text"]
    assert "elements disappeared: dialog [" in first["miniwob.click-dialog"]  # closing the dialog
    assert "became selected" in first["miniwob.click-tab"] and "tabpanel" in first["miniwob.click-tab"]


class ScriptedTeacher:
    """A GenerationBackend that answers from a script and records its calls (the happy path)."""

    model_name = "scripted-teacher"

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls: list[int] = []

    def generate(self, conversations, params):
        self.calls.append(len(conversations))
        for conversation in conversations:
            assert conversation[0]["role"] == "system" and "CURRENT ACTION:" in conversation[1]["content"]
        out = [self.answers.pop(0) for _ in conversations]
        return [Generation(text=text, finish_reason=reason) for text, reason in out]

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError


def make_trajectory(name: str, steps: int = 3) -> Trajectory:
    trees = [CHECKBOXES_BEFORE, CHECKBOXES_AFTER, CHECKBOXES_AFTER.replace("'Done'", "'Done!'")]
    return Trajectory(
        id=name,
        task_id="miniwob.click-checkboxes",
        goal="Select foo and click Submit.",
        source="expert",
        steps=[Step("file:///cb.html", trees[i % 3], "click [9]" if i < steps - 1 else "") for i in range(steps)],
        success=True,
        reward=1.0,
    )


def test_teacher_happy_path_batches_and_falls_back_per_item():
    good = "[Reasoning]\nClicking foo checks it.\n\n[Web state changes]\nThe checkbox [9] 'foo' is now checked."
    teacher = ScriptedTeacher(
        [
            (good, "stop"),
            ("I think the page changed a lot.", "stop"),  # no changes section
            ("**Web state changes:**\nNothing else.", "stop"),  # decorated header, no reasoning
            ("[Reasoning]\nhmm\n[Web state changes]\nThe check", "length"),  # cut by the token limit
        ]
    )
    labeler = TeacherLabeler(teacher, batch_size=3)
    labelled = label_trajectories([make_trajectory("a"), make_trajectory("b")], "teacher", labeler)
    assert teacher.calls == [3, 1]  # 4 transitions, batches of 3
    a, b = labelled
    assert a.steps[0].changes == "The checkbox [9] 'foo' is now checked."
    assert transition_reasoning(a, 0) == "Clicking foo checks it."
    diff = structural_diff(CHECKBOXES_AFTER, a.steps[2].axtree, "file:///cb.html", "file:///cb.html")
    assert a.steps[1].changes == diff  # fallback to the structural diff
    records = a.metadata[LABELS_METADATA_KEY]
    assert records["method"] == "teacher" and records["model"] == "scripted-teacher"
    assert [entry["source"] for entry in records["transitions"]] == ["teacher", "diff"]
    assert "no [Web state changes] section" in records["transitions"][1]["error"]
    assert b.steps[0].changes == "Nothing else." and transition_reasoning(b, 0) == ""
    assert "token limit" in b.metadata[LABELS_METADATA_KEY]["transitions"][1]["error"]
    assert a.steps[-1].changes == ""  # the last step has no successor


def test_teacher_backend_errors_raise_or_fall_back():
    class Broken(ScriptedTeacher):
        def generate(self, conversations, params):
            raise GenerationError("server down")

    transition = Transition("g", "u", CHECKBOXES_BEFORE, "click [9]", "u", CHECKBOXES_AFTER)
    with pytest.raises(GenerationError, match="server down"):
        TeacherLabeler(Broken([])).label([transition])
    (label,) = TeacherLabeler(Broken([]), on_backend_error="fallback").label([transition])
    assert label.source == "diff" and "server down" in label.error
    with pytest.raises(ValueError, match="batch_size"):
        TeacherLabeler(Broken([]), batch_size=0)
    with pytest.raises(ValueError, match="needs a TeacherLabeler"):
        label_trajectories([make_trajectory("a")], "teacher")
    with pytest.raises(ValueError, match="method"):
        label_trajectories([make_trajectory("a")], "magic")


def test_parse_teacher_output_errors():
    with pytest.raises(TeacherOutputError, match="empty"):
        parse_teacher_output("  ")
    with pytest.raises(TeacherOutputError, match="empty \\[Web state changes\\]"):
        parse_teacher_output("[Reasoning]\nx\n[Web state changes]\n\n")
    with pytest.raises(TeacherOutputError, match="too long"):
        parse_teacher_output("[Web state changes]\n" + "x" * 50, max_changes_chars=10)
    reasoning, changes = parse_teacher_output(
        "<think>The click toggles it.</think>\n[Web state changes]\nfoo checked.\n[Next page accessibility tree]\n..."
    )
    assert (reasoning, changes) == ("The click toggles it.", "foo checked.")


def test_teacher_with_real_tiny_model_falls_back(tmp_path):
    from dynaweb_env.llm import make_backend

    # Eight new tokens cannot hold a complete answer: every label must be the recorded fallback.
    labeler = TeacherLabeler(
        make_backend("smollm2-135m"), SamplingParams(max_new_tokens=8, temperature=0.0), max_axtree_chars=1000
    )
    (labelled,) = label_trajectories([make_trajectory("real", steps=2)], "teacher", labeler)
    entries = labelled.metadata[LABELS_METADATA_KEY]["transitions"]
    assert [entry["source"] for entry in entries] == ["diff"]
    assert all(entry["error"] for entry in entries)
    assert labelled.steps[0].changes == structural_diff(CHECKBOXES_BEFORE, CHECKBOXES_AFTER, "file:///cb.html",
                                                        "file:///cb.html")  # fmt: skip
    assert labelled.metadata[LABELS_METADATA_KEY]["model"] == "smollm2-135m"


def test_label_trajectories_diff_keeps_existing_when_asked():
    trajectory = make_trajectory("a")
    trajectory.steps[0].changes = "hand-written"
    (kept,) = label_trajectories([trajectory], "diff", overwrite=False)
    assert kept.steps[0].changes == "hand-written" and kept.steps[1].changes.endswith("URL unchanged.")
    assert [e["step"] for e in kept.metadata[LABELS_METADATA_KEY]["transitions"]] == [1]
    (relabelled,) = label_trajectories([trajectory], "diff")
    assert relabelled.steps[0].changes.startswith("The checkbox [9] 'foo' became checked")
    assert trajectory.steps[1].changes == ""  # the input is not modified


def test_cli_is_resumable(tmp_path, capsys):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_trajectories(source, [make_trajectory(f"t{i}") for i in range(5)])
    # An earlier, interrupted run: two trajectories written, then half a line.
    write_trajectories(out, label_trajectories([make_trajectory("t0"), make_trajectory("t1")], "diff"))
    with out.open("a") as handle:
        handle.write('{"id": "t2", "task_id": "miniwob.cl')
    assert main(["--in", str(source), "--out", str(out), "--method", "diff", "--chunk-size", "2"]) == 0
    assert "skipped 2 already labelled, labelled 3" in capsys.readouterr().out
    done = read_trajectories(out, on_error="raise")  # the half line was dropped, not glued to the next record
    assert sorted(t.id for t in done) == ["t0", "t1", "t2", "t3", "t4"]
    assert all(t.steps[0].changes for t in done)
    # Running again does nothing new.
    assert main(["--in", str(source), "--out", str(out)]) == 0
    assert "labelled 0" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--in", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    with pytest.raises(SystemExit):
        main(["--in", str(source), "--out", str(tmp_path / "x.jsonl"), "--method", "teacher"])


def test_metadata_round_trips_through_jsonl(tmp_path):
    labelled = label_trajectories([make_trajectory("a")], "diff")
    write_trajectories(tmp_path / "l.jsonl", labelled)
    (back,) = read_trajectories(tmp_path / "l.jsonl", on_error="raise")
    assert back.to_dict() == labelled[0].to_dict()
    assert json.dumps(back.metadata[LABELS_METADATA_KEY])
