"""Trajectory schema and JSONL IO: corrupt lines name their place and lose nothing else."""

import json

import pytest

from dynaweb_env.data.io import (
    CorruptRecordError,
    from_hf_dataset,
    read_trajectories,
    to_hf_dataset,
    write_trajectories,
)
from dynaweb_env.data.schema import SchemaError, Step, Trajectory


def make_trajectory(index: int) -> Trajectory:
    steps = [
        Step(url="file:///a.html", axtree="[1] button 'OK'", action="click [1]", reasoning="ok"),
        Step(url="file:///a.html", axtree="[1] button 'OK'"),
    ]
    return Trajectory(
        id=f"t{index}",
        task_id="miniwob.click-button",
        goal="Click OK",
        source="expert",
        steps=steps,
        success=True,
        reward=1.0,
        metadata={"seed": index},
    )


def test_round_trip(tmp_path):
    path = tmp_path / "data.jsonl"
    assert write_trajectories(path, [make_trajectory(0), make_trajectory(1)]) == 2
    loaded = read_trajectories(path)
    assert [t.to_dict() for t in loaded] == [make_trajectory(0).to_dict(), make_trajectory(1).to_dict()]
    assert loaded[0].actions == ["click [1]"]
    assert len(loaded[0].transitions()) == 1


def test_corrupt_lines_are_skipped_with_their_place(tmp_path):
    path = tmp_path / "data.jsonl"
    write_trajectories(path, [make_trajectory(0)])
    with path.open("a") as handle:
        handle.write("{not json\n")
        handle.write(json.dumps({"id": "x", "task_id": "t", "goal": "g", "source": "dream", "steps": []}) + "\n")
    write_trajectories(path, [make_trajectory(3)], append=True)
    with pytest.warns(UserWarning) as caught:
        loaded = read_trajectories(path)
    assert [str(w.message).split("data.jsonl:")[1][0] for w in caught] == ["2", "3"]
    assert [t.id for t in loaded] == ["t0", "t3"]
    with pytest.raises(CorruptRecordError, match=r"data.jsonl:2") as error:
        read_trajectories(path, on_error="raise")
    assert error.value.line_number == 2


def test_hostile_lines_are_skipped_with_their_place_and_lose_nothing_else(tmp_path):
    path = tmp_path / "data.jsonl"
    write_trajectories(path, [make_trajectory(0)])
    nan_reward = json.dumps(make_trajectory(1).to_dict()).replace('"reward": 1.0', '"reward": NaN')
    infinite = json.dumps(make_trajectory(2).to_dict()).replace('"reward": 1.0', '"reward": -Infinity')
    latin1 = json.dumps(make_trajectory(3).to_dict()).replace("Click OK", "Cliqu\u00e9").encode("utf-8")
    with path.open("ab") as handle:
        handle.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # RecursionError in json.loads
        handle.write(b'{"id": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}\n")
        handle.write(nan_reward.encode() + b"\n")
        handle.write(infinite.encode() + b"\n")
        handle.write(latin1.replace("Cliqu\u00e9".encode(), "Cliqu\u00e9".encode("latin-1")) + b"\n")
    write_trajectories(path, [make_trajectory(7)], append=True)
    with pytest.warns(UserWarning) as caught:
        loaded = read_trajectories(path)
    assert [t.id for t in loaded] == ["t0", "t7"]
    places = [str(w.message).split("data.jsonl:")[1].split(":")[0] for w in caught]
    assert places == ["2", "3", "4", "5", "6"]
    reasons = [str(w.message) for w in caught]
    assert "nested too deeply" in reasons[0] and "finite number" in reasons[2] and "utf-8" in reasons[4]
    for line in (2, 4, 6):  # raise mode names the first bad line
        lines = path.read_bytes().splitlines(keepends=True)
        single = tmp_path / f"only{line}.jsonl"
        single.write_bytes(lines[line - 1])
        with pytest.raises(CorruptRecordError, match=rf"only{line}.jsonl:1"):
            read_trajectories(single, on_error="raise")


def test_a_nan_reward_is_never_written(tmp_path):
    trajectory = make_trajectory(0)
    trajectory.reward = float("nan")
    with pytest.raises(ValueError):
        write_trajectories(tmp_path / "out.jsonl", [trajectory])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": "imagined"}, "source"),
        ({"reward": float("nan")}, "reward"),
        ({"reward": float("inf")}, "reward"),
        ({"steps": []}, "steps"),
        ({"reward": "high"}, "reward"),
        ({"success": 1}, "success"),
        ({"goal": None}, "goal"),
        ({"steps": [{"url": "u"}]}, r"steps\[0\].*axtree"),
    ],
)
def test_schema_errors_name_the_field(change, message):
    record = make_trajectory(0).to_dict() | change
    with pytest.raises(SchemaError, match=message):
        Trajectory.from_dict(record)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="trajectory file not found"):
        read_trajectories(tmp_path / "nope.jsonl")


def test_directory_and_hf_dataset(tmp_path):
    write_trajectories(tmp_path / "a.jsonl", [make_trajectory(0)])
    write_trajectories(tmp_path / "b.jsonl", [make_trajectory(1)])
    loaded = read_trajectories(tmp_path)
    assert [t.id for t in loaded] == ["t0", "t1"]
    dataset = to_hf_dataset(loaded)
    assert dataset.num_rows == 2
    assert [t.to_dict() for t in from_hf_dataset(dataset)] == [t.to_dict() for t in loaded]
