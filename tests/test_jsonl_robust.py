"""The one JSONL reader and appender (issue 49 items 2-4): a bad line is skipped and named, nothing else is lost."""

from __future__ import annotations

import json
import lzma
import random
import warnings
from pathlib import Path

import pytest

from dynaweb_env.data.io import iter_trajectories, read_trajectories, write_trajectories
from dynaweb_env.data.jsonl import (
    CorruptRecordError,
    CorruptRecordWarning,
    append_jsonl,
    iter_jsonl,
    iter_jsonl_lines,
    prepare_for_append,
)
from dynaweb_env.data.shipped import LARGE_DATA_DIR

#: One bad line of each kind, with a word its warning must hold.
BAD_LINES = [
    (b"\xff", "UTF-8"),  # a byte that is not UTF-8: issue 49's repro
    ('{"text": "caf\u00e9"}'.encode()[:-3], "not UTF-8"),  # a write cut inside a two-byte character
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),  # RecursionError in json.loads
    (b'{"reward": NaN}', "NaN is not a finite number"),
    (b'{"reward": -Infinity}', "-Infinity is not a finite number"),
    (b"[1, 2]", "not a JSON object (a JSON array)"),
    (b'"text"', "not a JSON object (a JSON string)"),
    (b"null", "not a JSON object (a JSON null)"),
    (b"{not json", "not valid JSON"),
]


def _place(warning: warnings.WarningMessage, name: str) -> int:
    return int(str(warning.message).split(f"{name}:")[1].split(":")[0])


def test_every_kind_of_bad_line_is_skipped_and_named_and_the_rest_kept(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [b'{"n": 1}']  # each good record holds its own line number
    for bad, _ in BAD_LINES:
        lines += [bad, json.dumps({"n": len(lines) + 2, "text": "\u00e9"}, ensure_ascii=False).encode(), b"   "]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.warns(CorruptRecordWarning) as caught:
        good = list(iter_jsonl_lines(path))
    # Every good line, with its own line number and bytes; every bad one named by its line, with the reason.
    assert [line.number for line in good] == [1] + [3 * k + 3 for k in range(len(BAD_LINES))]
    assert all(line.record["n"] == line.number and line.text == lines[line.number - 1] for line in good)
    assert [_place(w, "mixed.jsonl") for w in caught] == [3 * k + 2 for k in range(len(BAD_LINES))]
    for warning, (_, reason) in zip(caught, BAD_LINES, strict=True):
        assert reason in str(warning.message)
    # Strict readers opt in: the first bad line is an error naming it.
    with pytest.raises(CorruptRecordError, match=r"mixed\.jsonl:2: not UTF-8") as error:
        list(iter_jsonl(path, on_error="raise"))
    assert error.value.line_number == 2
    # NaN and Infinity can be read on request (files written by other tools).
    path.write_bytes(b'{"reward": NaN}\n{"reward": Infinity}\n')
    assert [str(r["reward"]) for r in iter_jsonl(path, allow_nan=True)] == ["nan", "inf"]


def test_a_cut_xz_stream_keeps_every_record_before_the_cut_and_names_the_file(tmp_path):
    noise = random.Random(0)  # text that does not compress away, so each cut falls inside the records
    records = [{"n": n, "text": "é" * (n % 7) + f"{noise.getrandbits(800):x}"} for n in range(400)]
    data = lzma.compress(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records))
    for cut in (len(data) // 3, len(data) // 2, len(data) - 20):  # the last: only the stream's index and footer
        path = tmp_path / f"cut{cut}.jsonl.xz"
        path.write_bytes(data[:cut])
        # What the cut left decodable, by liblzma itself: every whole line of it must come back.
        readable = lzma.LZMADecompressor().decompress(data[:cut])
        whole = readable.count(b"\n")
        with pytest.warns(CorruptRecordWarning) as caught:
            got = list(iter_jsonl(path))
        assert got == records[:whole] and 0 < whole <= len(records)
        assert whole < len(records) or cut == len(data) - 20
        (warning,) = caught
        assert f"{path}:{whole + 1}: the compressed stream is cut short" in str(warning.message)
        with pytest.raises(CorruptRecordError, match="cut short"):
            list(iter_jsonl(path, on_error="raise"))
    # A file that is not xz at all under an .xz name: named, nothing read, no traceback.
    fake = tmp_path / "fake.jsonl.xz"
    fake.write_bytes(b'{"n": 0}\n')
    with pytest.warns(CorruptRecordWarning, match=r"fake\.jsonl\.xz:1: the compressed stream"):
        assert list(iter_jsonl(fake)) == []


def test_a_truncated_shipped_large_data_file_keeps_its_records(tmp_path):
    """Issue 49's repro on the format the large dataset ships in: half a shipped ``.jsonl.xz``."""
    shipped = sorted(LARGE_DATA_DIR.glob("*/*.jsonl.xz"))[0]
    complete = read_trajectories(shipped, on_error="raise")
    half = tmp_path / shipped.name
    half.write_bytes(shipped.read_bytes()[: shipped.stat().st_size // 2])
    with pytest.warns(CorruptRecordWarning, match=rf"{half.name}:\d+: the compressed stream is cut short"):
        kept = read_trajectories(half)
    assert kept and [t.to_dict() for t in kept] == [t.to_dict() for t in complete[: len(kept)]]


def test_append_repairs_a_cut_line_refuses_non_jsonl_and_never_writes_nan(tmp_path):
    path = tmp_path / "out.jsonl"
    assert append_jsonl(path, [{"n": 0}, {"n": 1}]) == 2
    with path.open("ab") as handle:
        handle.write('{"n": 2, "text": "caf\u00e9"}'.encode()[:-4])  # killed mid-record, inside a character
    with pytest.warns(UserWarning, match="removing a cut-short last line"):
        assert append_jsonl(path, [{"n": 3}]) == 1
    assert [r["n"] for r in iter_jsonl(path, on_error="raise")] == [0, 1, 3]
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # a whole record that only lost its newline: kept
    append_jsonl(path, [{"n": 4}])
    assert [r["n"] for r in iter_jsonl(path, on_error="raise")] == [0, 1, 3, 4]
    # NaN is not JSON: the append stops before it, the records before it are written and whole.
    with pytest.raises(ValueError, match="NaN or Infinity"):
        append_jsonl(path, [{"n": 5}, {"n": float("nan")}, {"n": 6}])
    assert [r["n"] for r in iter_jsonl(path, on_error="raise")] == [0, 1, 3, 4, 5]
    # A lone surrogate (a web page can hold one) cannot be UTF-8: the line escapes it and it reads back.
    append_jsonl(path, [{"n": 7, "text": "a\ud800b"}])
    assert list(iter_jsonl(path, on_error="raise"))[-1] == {"n": 7, "text": "a\ud800b"}
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes\nno newline")
    with pytest.raises(ValueError, match="not a JSONL file"):
        append_jsonl(notes, [{"n": 0}])
    with pytest.raises(ValueError, match="not a JSONL file"):
        prepare_for_append(notes)
    assert notes.read_text() == "meeting notes\nno newline"


def _trajectory_line(trajectory_id: str, global_step: int) -> str:
    steps = [{"url": "u", "axtree": "[1] button 'OK'"}]
    record = {"id": trajectory_id, "task_id": "miniwob.click-button", "goal": "g", "source": "dream", "steps": steps}
    return json.dumps({**record, "metadata": {"global_step": global_step}})


def test_episode_log_trim_survives_bad_lines_and_keeps_records_byte_for_byte(tmp_path):
    """What ``dynaweb-train --resume`` does first with ``episodes.jsonl`` (it died on ``printf '\\xff\\n' >>``)."""
    from dynaweb_trainer.episode_log import keep_updates_before

    log = tmp_path / "episodes.jsonl"
    good = [_trajectory_line(f"a{n}", n // 2) for n in range(6)]  # updates 0, 0, 1, 1, 2, 2
    nan = '{"id": "x", "metadata": {"global_step": NaN}}'
    lines = [*good[:3], "\udcff", "[" * 50_000, good[3], nan, *good[4:]]  # line 4: the byte 0xff
    log.write_bytes("".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape"))
    with pytest.warns(CorruptRecordWarning) as caught:
        assert keep_updates_before(log, 2) == 4
    assert [_place(w, "episodes.jsonl") for w in caught] == [4, 5, 7]
    assert log.read_text() == "".join(line + "\n" for line in good[:4])


def test_eval_resume_skips_a_corrupt_partial_line_with_its_number(tmp_path):
    """Issue 49's repro: ``printf '\\xff\\n' >> ev.json.partial.jsonl`` made the rerun exit 2."""
    from test_evaluate import _DiesAfterSteps
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model
    from dynaweb_trainer.evaluate import EvalConfig, evaluate_policy, load_partial_results, partial_results_path
    from dynaweb_trainer.identity_env import TASK_ID, make_click_button_vector_env
    from dynaweb_trainer.policy import LoadedPolicy, ScriptedPolicy

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random"))
    clicker = ScriptedPolicy(tokenizer, lambda turn: "REASON: the first button.\nACTION: click [1]")
    policy = LoadedPolicy("clicker", "scripted", tokenizer, clicker)
    config = EvalConfig(policy="clicker", tasks=[TASK_ID], seeds="0-3", num_envs=1, max_steps=1,
                        output=str(tmp_path / "ev.json"))  # fmt: skip
    with pytest.raises(RuntimeError, match="browser died"):  # one step per episode: killed after two episodes
        evaluate_policy(config, policy, _DiesAfterSteps(make_click_button_vector_env(1), 2), show_progress=False)
    partial = partial_results_path(config.output)
    header, *finished = partial.read_text().splitlines()
    assert len(finished) == 2
    # What a crash and a careless user may add: bad bytes, nesting too deep to parse, and a record cut short.
    with partial.open("ab") as handle:
        handle.write(b"\xff\n" + b'{"a": ' * 30_000 + b"1" + b"}" * 30_000 + b"\n" + finished[0][:50].encode())
    with pytest.warns(CorruptRecordWarning) as caught:
        assert sorted(load_partial_results(config)) == [(TASK_ID, 0), (TASK_ID, 1)]
    assert [_place(w, "ev.json.partial.jsonl") for w in caught] == [4, 5, 6]
    assert "UTF-8" in str(caught[0].message) and "nested too deeply" in str(caught[1].message)
    with pytest.warns(UserWarning):
        resumed = evaluate_policy(config, policy, make_click_button_vector_env(1), show_progress=False)
    assert resumed["resumed_episodes"] == 2 and [e["task_seed"] for e in resumed["episodes"]] == [0, 1, 2, 3]
    assert not partial.exists()


def test_writers_append_after_a_cut_line_and_readers_name_bad_ones(tmp_path):
    """The six appenders go through one repair rule: a cut line is removed, never glued to the next record."""
    from dynaweb_trainer.dreamed_judge_data import _read_existing
    from dynaweb_trainer.episode_log import EpisodeLog

    path = tmp_path / "t.jsonl"
    path.write_text(_trajectory_line("a", 0) + "\n" + _trajectory_line("b", 0)[:30])
    with pytest.warns(UserWarning, match="cut-short last line"):
        assert [t.id for t in _read_existing(path)] == ["a"]  # dreamed_judge_data: repaired, then read
    trajectory = next(iter_trajectories(path))
    path.write_bytes(path.read_bytes() + b'{"id": "c", "steps": [{"url": "\xe9')  # cut inside a character
    with pytest.warns(UserWarning, match="cut-short last line"):
        write_trajectories(path, [trajectory], append=True)  # collect, state_changes, dreamed judge data
    assert [t.id for t in read_trajectories(path, on_error="raise")] == ["a", "a"]
    with path.open("ab") as handle:
        handle.write(b"\xff\n")
        handle.write(_trajectory_line("z", 0)[:20].encode())
    with pytest.warns(CorruptRecordWarning, match=r"t\.jsonl:3: not UTF-8"):
        EpisodeLog(path).append([], global_step=1, call=0)  # the training log: trimmed on first use
    assert [t.id for t in read_trajectories(path, on_error="raise")] == ["a", "a"]


def test_replayed_policy_dreams_skip_a_bad_episode_line(tmp_path):
    from test_dreamed_judge_data import _episode

    from dynaweb_trainer.dreamed_judge_data import replayed_policy_dreams

    run = tmp_path / "r"
    run.mkdir()
    acts = ["type [3] [bob] [0]", "click [4]"]
    (run / "episodes.jsonl").write_bytes(b"\xff\n" + json.dumps(_episode(acts, 0)).encode() + b"\n")
    dream = {"run": "r", "id": "step-0/call-0/slot-0", "global_step": 0, "dream_reward": 1.0, "real_reward": 0.0,
             "real_actions": acts, "dream_actions": acts, "replayed": True, "start_reproduced": True}  # fmt: skip
    with pytest.warns(CorruptRecordWarning, match=r"episodes\.jsonl:1: not UTF-8"):
        records, left_out = replayed_policy_dreams({"dreams": [dream]}, tmp_path)
    assert left_out == 0 and [r.actions for r in records] == [acts]  # the good line after the bad one is read


def test_build_data_relabel_and_claims_train_split_read_through_the_shared_reader(tmp_path):
    from dynaweb_trainer.build_data import _relabel

    path = tmp_path / "collected.jsonl"
    path.write_bytes(_trajectory_line("a", 0).encode() + b"\n\xff\n" + _trajectory_line("b", 0).encode() + b"\n")
    with pytest.warns(CorruptRecordWarning, match=r"collected\.jsonl:2"):
        _relabel(path, "val")
    assert [t.metadata["split"] for t in read_trajectories(path, on_error="raise")] == ["val", "val"]


@pytest.mark.slow
def test_train_resume_survives_a_bad_episode_line_cli(tmp_path, capfd):
    """Issue 49's repro as a user runs it: ``printf '\\xff\\n' >> run/episodes.jsonl``, then ``--resume``."""
    from test_train_cli import TINY

    from dynaweb_trainer.cli import parse_train_args, train_main

    slots = 4 * parse_train_args([]).gradient_accumulation_steps  # episodes an update: TINY's batch x the preset's
    output_dir = tmp_path / "run"
    run = [*TINY, "--env", "dream", "--expert-frac", "0.5", "--save-steps", "1", "--output-dir", str(output_dir),
           "--disable-tqdm", "true"]  # fmt: skip
    assert train_main([*run, "--max-steps", "1"]) == 0
    log = output_dir / "episodes.jsonl"
    before = log.read_bytes()
    with log.open("ab") as handle:
        handle.write(b"\xff\n")
    with pytest.warns(CorruptRecordWarning, match=rf"episodes\.jsonl:{slots + 1}: not UTF-8"):
        assert train_main([*run, "--max-steps", "2", "--resume"]) == 0
    assert "resume=" in capfd.readouterr().out
    assert log.read_bytes().startswith(before)  # update 0's records kept byte for byte
    steps = [t.metadata["global_step"] for t in iter_trajectories(log, on_error="raise")]
    assert steps == [0] * slots + [1] * slots


def test_no_project_reader_bypasses_the_shared_one():
    """Every JSONL reader goes through ``dynaweb_env.data.jsonl``: no line-by-line ``json.loads`` elsewhere."""
    root = Path(__file__).resolve().parents[1]
    offenders = []
    for folder in ("dynaweb_env", "dynaweb_trainer", "benchmarks"):
        for source in (root / folder).rglob("*.py"):
            text = source.read_text()
            if source.name != "jsonl.py" and ("json.loads(line" in text or "lzma.open" in text):
                offenders.append(str(source.relative_to(root)))
    assert offenders == [], offenders
