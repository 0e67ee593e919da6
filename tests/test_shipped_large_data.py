"""The shipped snapshot of ``dynaweb-build-data``'s large dataset: xz files that match their manifest."""

from __future__ import annotations

import json
import lzma

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import LARGE_DATA_DIR
from dynaweb_trainer.build_data import file_entry, verify


def test_every_shipped_file_matches_its_manifest_entry(tmp_path):
    manifest = json.loads((LARGE_DATA_DIR / "MANIFEST.json").read_text())
    assert set(manifest["files"]) == {
        f"{split}/{name}"
        for split in ("train", "validation", "test")
        for name in ("expert.jsonl", "explore-e0.3-s0.jsonl")
    }
    for name in manifest["files"]:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(lzma.decompress((LARGE_DATA_DIR / f"{name}.xz").read_bytes()))
    (tmp_path / "MANIFEST.json").write_text(json.dumps(manifest))
    # sha256, record counts and split labels (file_entry refuses a record of another split)
    assert verify(tmp_path) == []
    assert manifest["totals"]["records"] == sum(entry["records"] for entry in manifest["files"].values())
    tasks = {trajectory.task_id for trajectory in read_trajectories(tmp_path / "train")}
    assert tasks == set(manifest["tasks"])


def test_compressed_and_plain_files_read_the_same(tmp_path):
    compressed = LARGE_DATA_DIR / "test" / "expert.jsonl.xz"
    plain = tmp_path / "expert.jsonl"
    plain.write_bytes(lzma.decompress(compressed.read_bytes()))
    from_xz, from_plain = read_trajectories(compressed), read_trajectories(plain)
    assert from_xz == from_plain and len(from_xz) == file_entry(plain, "test")["records"]
    # a directory of .jsonl.xz files is read like one of .jsonl files
    assert len(read_trajectories(LARGE_DATA_DIR / "test")) == sum(
        entry["records"]
        for name, entry in json.loads((LARGE_DATA_DIR / "MANIFEST.json").read_text())["files"].items()
        if name.startswith("test/")
    )


def test_the_judges_dreamed_data_matches_its_manifest_and_is_labelled_by_split():
    import hashlib

    from dynaweb_env.data.shipped import DREAMED_JUDGE_DATA_DIR

    manifest = json.loads((DREAMED_JUDGE_DATA_DIR / "MANIFEST.json").read_text())
    for name, entry in manifest["files"].items():
        data = lzma.decompress((DREAMED_JUDGE_DATA_DIR / name).read_bytes())
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
    records = read_trajectories(DREAMED_JUDGE_DATA_DIR / "train")
    # Every record is a dream (never a world-model transition) with a real label, and test seeds stay out of train.
    assert records and all(record.source == "dream" and record.metadata.get("dreamed") for record in records)
    assert {record.metadata["split"] for record in records} <= {"train", "validation"}
    assert {r.metadata["split"] for r in read_trajectories(DREAMED_JUDGE_DATA_DIR / "test")} == {"test"}
