"""Tests of the NNetNav importer on a small fixture written in the published layouts.

Where the layouts come from (read with the project's code-search tool, not downloaded):

- Step rows: the Hugging Face datasets ``stanfordnlp/nnetnav-wa`` / ``stanfordnlp/nnetnav-live``
  (``train.jsonl``, ``test.jsonl``) are the output of NNetNav's ``scripts/convert_to_sft_agentlab.py``
  (github.com/MurtyShikhar/NNetnav): one row per step with ``dataset, id, task_name, prompt, output,
  messages, n_tokens``; the user message follows the ``p_cot_llama_action_history`` template
  ("OBSERVATION: ... URL: ... OBJECTIVE: ... PREVIOUS ACTIONS: 1: None ..."), and the assistant
  answer ends "In summary, the next action I will perform is ```click [1475]```". A sample export
  of that script (Google Flights, ``NNetnav/datasets/llm/train.jsonl`` in a public fork) gave the
  trees below, shortened.
- Demonstrations: the per-trajectory JSON that script reads
  (``filtered_parsed_with_retroactive_stop_action.json``: ``task_id, intent, obs, parsed_actions,
  retroactive_reasoning, stop_action, action_descriptions, sites``).
"""

from __future__ import annotations

import json

import pytest

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.nnetnav import load_nnetnav, main, split_response

SYSTEM = "You are an autonomous intelligent agent tasked with navigating a web browser. ..."
GOAL = "Find travel options for Paris, France."
URL = "https://www.google.com/travel/flights"

TREE_1 = """<|begin_of_text|>RootWebArea 'Google Flights - Find Cheap Flight Options & Track Prices', url='https://www.google.com/travel/flights'
\t[340] search 'Flight', visible
\t\t[570] combobox 'Where from?' value='Montreal', clickable, visible, hasPopup='menu', expanded=False
\t\t\tStaticText 'Montreal'
\t\t[632] combobox 'Where to?', clickable, visible, focused, autocomplete='inline', hasPopup='menu', expanded=False
\t\t[851] button 'Explore destinations', visible"""

TREE_2 = """<|begin_of_text|>RootWebArea 'Google Flights - Find Cheap Flight Options & Track Prices', focused, url='https://www.google.com/travel/flights'
\t[340] search 'Flight', visible
\t\t[638] dialog 'Enter your destination', visible, modal=True
\t\t\t[649] combobox 'Where to?', clickable, visible, focused, autocomplete='both', hasPopup='menu', expanded=True
\t\t\t[1458] listbox '', visible, multiselectable=True, orientation='vertical'
\t\t\t\t[1475] option 'Paris, France', visible, selected=False
\t\t\t\t\tStaticText 'Paris, France'"""

TREE_3 = """RootWebArea 'Paris flights', focused, url='https://www.google.com/travel/flights/paris'
\t[2001] heading 'Flights to Paris'
\t[2002] link 'CA$1,160 Nonstop', clickable"""


def user_message(tree: str, history: list[str], url: str = URL, goal: str = GOAL) -> str:
    numbered = "\n".join(f"{index}: {entry}" for index, entry in enumerate(history, start=1))
    return f"OBSERVATION:\n{tree}\nURL: {url}\nOBJECTIVE: {goal}\nPREVIOUS ACTIONS:\n{numbered}"


def answer(reasoning: str, action: str) -> str:
    return f"Let's think step-by-step. {reasoning} In summary, the next action I will perform is ```{action}```."


def step_row(trajectory: str, tree: str, history: list[str], response: str, **overrides) -> dict:
    user = overrides.pop("user", None) or user_message(tree, history, **overrides)
    return {
        "dataset": "webarena_llm",
        "id": trajectory,
        "task_name": trajectory,
        "output": f"<|start_header_id|>assistant<|end_header_id|>\n{response}\n<|eot_id|>",
        "prompt": f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n{SYSTEM}\n<|eot_id|>...",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": user},
            {"role": "assistant", "content": response},
        ],
        "n_tokens": 1328,
    }


def good_trajectory(name: str) -> list[dict]:
    return [
        step_row(name, TREE_1, ["None"], answer("The 'Where to?' box is [632].", "click [632]")),
        step_row(
            name,
            TREE_2,
            ["None", "click [632] where [632] is Where to?"],
            answer("There is an option 'Paris, France' [1475].", "click [1475]"),
        ),
        step_row(
            name,
            TREE_3,
            ["None", "click [632] where [632] is Where to?", "click [1475] where [1475] is Paris, France"],
            "Let's think step-by-step. I have finished my tasks. In summary, the next action I will perform is "
            "```stop [CA$1,160 nonstop]```",
            url=URL + "/paris",
        ),
    ]


def fixture_rows() -> list[dict]:
    """Two good trajectories and one of each problem the paper filters."""
    rows = good_trajectory("/exp/run_0") + good_trajectory("/exp/run_1")
    bad_action = good_trajectory("/exp/bad_action")
    bad_action[1]["messages"][2]["content"] = answer("Scroll.", "scroll [sideways]")
    missing_obs = good_trajectory("/exp/missing_obs")
    missing_obs[1]["messages"][1]["content"] = user_message("", ["None", "click [632] where [632] is Where to?"])
    gap = good_trajectory("/exp/gap")
    del gap[1]  # the second step's row is missing
    contradicting = good_trajectory("/exp/contradicting_history")
    contradicting[2]["messages"][1]["content"] = user_message(
        TREE_3, ["None", "click [632] where [632] is Where to?", "hover [1475] where [1475] is Paris, France"]
    )
    absent_target = good_trajectory("/exp/absent_target")
    absent_target[0]["messages"][2]["content"] = answer("Click the missing thing.", "click [9999]")
    history = ["None", "click [9999] where [9999] is gone", "click [1475] where [1475] is Paris, France"]
    absent_target[1]["messages"][1]["content"] = user_message(TREE_2, history[:2])
    absent_target[2]["messages"][1]["content"] = user_message(TREE_3, history, url=URL + "/paris")
    early_stop = good_trajectory("/exp/early_stop")
    early_stop[0]["messages"][2]["content"] = answer("Done already.", "stop [N/A]")
    one_step = good_trajectory("/exp/one_step")[:1]
    return rows + bad_action + missing_obs + gap + contradicting + absent_target + early_stop + one_step


def write_jsonl(path, rows, corrupt_line: bool = False):
    lines = [json.dumps(row) for row in rows]
    if corrupt_line:
        lines.insert(3, '{"dataset": "webarena_llm", "id": "/exp/run_0", "messages": [')  # cut mid-record
    path.write_text("\n".join(lines) + "\n")
    return path


def test_step_rows_are_grouped_cleaned_and_reported(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", fixture_rows(), corrupt_line=True)
    trajectories, report = load_nnetnav(path)

    assert [t.metadata["nnetnav_id"] for t in trajectories] == ["/exp/run_0", "/exp/run_1"]
    assert report.kept == 2 and report.trajectories == 9
    assert report.dropped == {
        "corrupt_record": 1,
        "invalid_action": 1,
        "missing_observation": 2,  # empty tree, missing step
        "inconsistent_transition": 3,  # contradicting history, absent target, early stop
        "too_short": 1,
    }
    assert any("scroll [sideways]" in example for example in report.examples["invalid_action"])
    assert any("train.jsonl:4" in example for example in report.examples["corrupt_record"])
    summary = report.summary()
    assert "kept 2" in summary and "invalid_action: 1" in summary

    trajectory = trajectories[0]
    assert trajectory.source == "expert" and trajectory.success and trajectory.reward == 1.0
    assert trajectory.metadata["reward_source"] == "nnetnav-relabelled"
    assert trajectory.goal == GOAL
    assert trajectory.actions == ["click [632]", "click [1475]", "stop [CA$1,160 nonstop]"]
    assert trajectory.steps[0].reasoning == "Let's think step-by-step. The 'Where to?' box is [632]."
    assert trajectory.steps[0].url == URL and trajectory.steps[2].url == URL + "/paris"
    # Llama special tokens are stripped; the tree keeps BrowserGym's flattened form.
    assert trajectory.steps[0].axtree.startswith("RootWebArea 'Google Flights")
    assert "<|" not in trajectory.steps[1].axtree
    assert "\t\t\t\t[1475] option 'Paris, France'" in trajectory.steps[1].axtree
    assert trajectory.id != trajectories[1].id and trajectory.id.endswith("/expert")


def test_rows_out_of_order_are_sorted_by_history_length(tmp_path):
    rows = good_trajectory("t")
    path = write_jsonl(tmp_path / "shuffled.jsonl", [rows[2], rows[0], rows[1]])
    (trajectory,), report = load_nnetnav(path)
    assert trajectory.actions == ["click [632]", "click [1475]", "stop [CA$1,160 nonstop]"]
    assert report.kept == 1 and not report.dropped


def test_options_min_steps_and_target_check(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", fixture_rows())
    _, strict = load_nnetnav(path, min_steps=4)
    assert strict.kept == 0 and strict.dropped["too_short"] == 3  # two good ones + the one-step one
    kept, lenient = load_nnetnav(path, check_targets=False)
    assert lenient.kept == 3 and "/exp/absent_target" in [t.metadata["nnetnav_id"] for t in kept]


def demonstration(task_id: int, **overrides) -> dict:
    record = {
        "task_id": task_id,
        "intent": GOAL,
        "obs": [TREE_1, TREE_2, TREE_3],
        "parsed_actions": ["click [632]", "click [1475]", "click [2002]"],
        "retroactive_reasoning": [answer("Open the box.", "click [632]"), answer("Pick Paris.", "click [1475]"), ""],
        "stop_action": "stop [CA$1,160 nonstop]",
        "action_descriptions": ["click [632] where [632] is Where to?", "click [1475] where [1475] is Paris"],
        "sites": ["google_flights"],
    }
    record.update(overrides)
    return record


def test_demonstration_layout_json_file(tmp_path):
    records = [
        demonstration(7),
        demonstration(8, parsed_actions=["click [632]", "click [1475]"]),  # one action short
        demonstration(9, reward=0.0),
    ]
    path = tmp_path / "filtered_parsed_with_retroactive_stop_action.json"
    path.write_text(json.dumps(records))
    trajectories, report = load_nnetnav(path)
    assert report.kept == 2 and report.dropped == {"inconsistent_transition": 1}
    first, labelled = trajectories
    assert first.actions == ["click [632]", "click [1475]", "stop [CA$1,160 nonstop]"]
    assert first.steps[0].reasoning == "Let's think step-by-step. Open the box."
    assert first.steps[2].url == "https://www.google.com/travel/flights/paris"  # from the root's url='...'
    assert first.metadata["sites"] == ["google_flights"] and first.metadata["layout"] == "demonstration"
    assert labelled.reward == 0.0 and not labelled.success and labelled.metadata["reward_source"] == "label"


def test_saved_dataset_and_parquet(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = good_trajectory("a") + good_trajectory("b")
    dataset = datasets.Dataset.from_list(rows)
    dataset.save_to_disk(str(tmp_path / "saved"))
    from_disk, report = load_nnetnav(tmp_path / "saved")
    assert report.kept == 2 and [t.actions for t in from_disk][0][-1].startswith("stop")
    dataset.to_parquet(str(tmp_path / "rows.parquet"))
    from_parquet, _ = load_nnetnav(tmp_path / "rows.parquet")
    assert [(t.goal, t.steps) for t in from_parquet] == [(t.goal, t.steps) for t in from_disk]


def test_bad_paths_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_nnetnav(tmp_path / "nope.jsonl")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported"):
        load_nnetnav(tmp_path / "data.csv")
    (tmp_path / "other.jsonl").write_text(json.dumps({"question": "?", "answer": "!"}) + "\n")
    trajectories, report = load_nnetnav(tmp_path / "other.jsonl")
    assert trajectories == [] and report.dropped == {"unknown_layout": 1}


def test_split_response_variants():
    assert split_response(answer("Go.", "type [164] [restaurants near CMU] [1]")) == (
        "Let's think step-by-step. Go.",
        "type [164] [restaurants near CMU] [1]",
    )
    assert split_response("stop [N/A]") == ("", "stop [N/A]")
    assert split_response("Let's think. My next action is ```press [Enter]```") == (
        "Let's think. My next action is",
        "press [Enter]",
    )


def test_cli_writes_trajectories_and_report(tmp_path, capsys):
    source = write_jsonl(tmp_path / "train.jsonl", fixture_rows())
    out, report_path = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert main(["--in", str(source), "--out", str(out), "--report", str(report_path)]) == 0
    assert len(read_trajectories(out, on_error="raise")) == 2
    assert json.loads(report_path.read_text())["dropped"]["invalid_action"] == 1
    assert "kept 2" in capsys.readouterr().out


def test_hostile_lines_are_corrupt_records_named_by_place(tmp_path):
    rows = good_trajectory("/exp/run_0")
    nan_row = dict(rows[0], id="/exp/nan", task_name="/exp/nan", reward=float("nan"))
    path = tmp_path / "hostile.jsonl"
    with path.open("wb") as handle:
        handle.write(json.dumps(rows[0]).encode() + b"\n")
        handle.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # RecursionError in json.loads
        handle.write(json.dumps(rows[1]).encode() + b"\n")
        handle.write(b'{"id": "caf\xe9"}\n')  # latin-1, not UTF-8
        handle.write(json.dumps(nan_row).encode() + b"\n")  # json writes NaN
        handle.write(json.dumps(rows[2]).encode() + b"\n")
    trajectories, report = load_nnetnav(path)
    assert [t.metadata["nnetnav_id"] for t in trajectories] == ["/exp/run_0"]
    assert report.dropped["corrupt_record"] == 3
    examples = report.examples["corrupt_record"]
    assert [example.split(": ", 1)[0] for example in examples] == [f"{path}:2", f"{path}:4", f"{path}:5"]
    assert "nested too deeply" in examples[0] and "UTF-8" in examples[1] and "finite" in examples[2]
