"""Reading and parsing NNetNav records: the file layer of :mod:`dynaweb_env.data.nnetnav`.

:func:`iter_nnetnav_records` yields every record of a file or directory, corrupt ones as strings
naming what is wrong; :func:`parse_step_row` and :func:`split_response` read one published step
row. Assembling and cleaning whole trajectories is :mod:`~dynaweb_env.data.nnetnav`'s job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..actions import ACTION_ARGUMENTS, ActionParseError, extract_action, format_action, parse_action
from ..axtree import clean_axtree
from .io import PathLike
from .jsonl import parse_record

_LLAMA_SPECIAL = re.compile(r"<\|(?:begin_of_text|end_of_text|eot_id|start_header_id|end_header_id)\|>")
_USER_MESSAGE = re.compile(
    r"^\s*OBSERVATION:[ \t]*\n?(?P<obs>.*)\nURL:[ \t]*(?P<url>[^\n]*)\nOBJECTIVE:[ \t]*(?P<goal>.*?)"
    r"\nPREVIOUS ACTIONS?:[ \t]*\n?(?P<history>.*)$",
    re.S,
)
_HISTORY_ENTRY = re.compile(r"^(\d+):[ \t]?(.*)$")
_CODE_SPAN = re.compile(r"```(.*?)```", re.S)
_SUMMARY = re.compile(r"In summary,? the next action I will perform is", re.I)
_ROOT_URL = re.compile(r"\burl='([^']*)'")


class InvalidRecord(ValueError):
    """A record that cannot become part of a clean trajectory; ``reason`` is one of ``DROP_REASONS``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


@dataclass
class RawStep:
    """One parsed step row."""

    index: int  # 1-based step index (number of previous-action entries), 0 if unknown
    axtree: str
    url: str
    goal: str
    response: str
    history: list[str]


def iter_nnetnav_records(path: PathLike, split: str | None = None) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """Yield ``(location, record)`` for every record under ``path``; a corrupt record is a string.

    A record is corrupt when its bytes are not UTF-8, its text is not JSON (or is nested too deeply
    to parse), it is not an object, or its ``reward``/``score`` is not a finite number; the string
    says which, and ``location`` names the file and line (or index).

    Args:
        path: A ``.jsonl`` / ``.json`` / ``.parquet`` file, a ``datasets.save_to_disk`` directory, or a
            directory of such files (read in sorted order).
        split: For a saved ``DatasetDict``, the split to read (default: all splits).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file type is not one of the above.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"NNetNav data not found: {path}")
    if path.is_dir():
        if any((path / marker).is_file() for marker in ("dataset_info.json", "state.json", "dataset_dict.json")):
            yield from _iter_saved_dataset(path, split)
            return
        files = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".json", ".parquet") and p.is_file())
        if not files:
            raise ValueError(f"no .jsonl, .json or .parquet files under {path}")
        for file in files:
            yield from iter_nnetnav_records(file, split)
        return
    readers = {".jsonl": _iter_jsonl, ".json": _iter_json, ".parquet": _iter_parquet}
    if path.suffix not in readers:
        raise ValueError(f"unsupported NNetNav file {path}: expected .jsonl, .json, .parquet or a dataset directory")
    for location, record in readers[path.suffix](path):
        yield location, _checked(record)


def _loads(data: bytes) -> Any:
    """Parse JSON bytes; ``ValueError`` for bytes that are not UTF-8, not JSON, or nested too deeply."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8: {error}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON: {error}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply to read") from None


def _checked(record: Any) -> dict[str, Any] | str:
    if isinstance(record, str):
        return record
    if not isinstance(record, dict):
        return f"not an object: {type(record).__name__}"
    for key in ("reward", "score"):
        value = record.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            return f"field {key!r} is not a finite number: {value!r}"
    return record


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:  # the project's one rule for a JSONL line (its bad records go into the import report)
                yield f"{path}:{number}", parse_record(line, allow_nan=True)
            except ValueError as error:
                yield f"{path}:{number}", str(error)


def _iter_json(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        data = _loads(path.read_bytes())
    except ValueError as error:
        yield str(path), str(error)
        return
    if isinstance(data, dict):
        data = data.get("data", [data]) if not _looks_like_record(data) else [data]
    if not isinstance(data, list):
        yield str(path), f"expected a list of records, got {type(data).__name__}"
        return
    for number, record in enumerate(data):
        yield f"{path}[{number}]", record


def _iter_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    for number, record in enumerate(pq.read_table(path).to_pylist()):
        yield f"{path}[{number}]", record


def _iter_saved_dataset(path: Path, split: str | None) -> Iterator[tuple[str, dict[str, Any] | str]]:
    from datasets import DatasetDict, load_from_disk

    dataset = load_from_disk(str(path))
    if isinstance(dataset, DatasetDict):
        if split is not None and split not in dataset:
            raise ValueError(f"split {split!r} not in {path} (splits: {', '.join(dataset)})")
        parts = [(name, dataset[name]) for name in ([split] if split else list(dataset))]
    else:
        parts = [("", dataset)]
    for name, part in parts:
        for number, record in enumerate(part):
            yield f"{path}{'/' + name if name else ''}[{number}]", record


def _looks_like_record(data: dict[str, Any]) -> bool:
    return "messages" in data or "obs" in data


def clean_tree(text: str) -> str:
    return clean_axtree(_LLAMA_SPECIAL.sub("", text)).strip("\n")


def root_url(axtree: str) -> str:
    first = axtree.lstrip().split("\n", 1)[0]
    match = _ROOT_URL.search(first)
    return match.group(1) if match else ""


def parse_step_row(record: dict[str, Any]) -> RawStep:
    """Parse one published step row (see :mod:`dynaweb_env.data.nnetnav`). Raises :class:`InvalidRecord`."""
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise InvalidRecord("missing_observation", "field 'messages' is not a list")
    user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
    assistant = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "assistant"), None)
    if user is None or not isinstance(user.get("content"), str):
        raise InvalidRecord("missing_observation", "no user message")
    if assistant is None or not isinstance(assistant.get("content"), str):
        raise InvalidRecord("invalid_action", "no assistant message")
    match = _USER_MESSAGE.match(_LLAMA_SPECIAL.sub("", user["content"]))
    if match is None:
        raise InvalidRecord(
            "missing_observation", "user message lacks OBSERVATION / URL / OBJECTIVE / PREVIOUS ACTIONS"
        )
    axtree = clean_tree(match.group("obs"))
    history: list[str] = []
    for line in match.group("history").strip().splitlines():
        entry = _HISTORY_ENTRY.match(line.strip())
        if entry:
            history.append(entry.group(2).strip())
        elif history:  # a description spanning several lines
            history[-1] += "\n" + line
    url = match.group("url").strip()
    if not url or url == "not_found":
        url = root_url(axtree)
    return RawStep(len(history), axtree, url, match.group("goal").strip(), assistant["content"], history)


def split_response(response: str) -> tuple[str, str]:
    """Split an NNetNav answer into ``(reasoning, action string)``.

    The action is the last triple-backtick span (NNetNav: "In summary, the next action I will
    perform is ```click [12]```"); the reasoning is the text before the summary phrase.
    """
    text = _LLAMA_SPECIAL.sub("", response).strip()
    spans = _CODE_SPAN.findall(text)
    if spans:
        action = spans[-1].strip()
        summary = _SUMMARY.search(text)
        reasoning = text[: summary.start()] if summary else text[: text.rfind("```" + spans[-1])]
        return reasoning.strip(), action
    try:
        parse_action(text)
        return "", text
    except ActionParseError:
        return text, extract_action(text)


def normalize_action(action: str) -> str:
    """Canonical form of an action string (raises ``InvalidRecord`` outside the grammar)."""
    try:
        return format_action(parse_action(action))
    except ActionParseError as error:
        raise InvalidRecord("invalid_action", f"{action[:80]!r}: {error}") from None


def history_contradicts(entry: str, action: str) -> bool:
    # A history entry describes the action taken before, e.g. "click [632] where [632] is Where to?".
    # Only entries that start with an action name are checked; free-text descriptions are trusted.
    name = entry.split(" ", 1)[0].strip().lower() if entry else ""
    if name not in ACTION_ARGUMENTS:
        return False
    parsed = parse_action(action)
    if name != parsed.name:
        return True
    return parsed.element_id is not None and f"[{parsed.element_id}]" not in entry


__all__ = [
    "InvalidRecord",
    "RawStep",
    "clean_tree",
    "history_contradicts",
    "iter_nnetnav_records",
    "normalize_action",
    "parse_step_row",
    "root_url",
    "split_response",
]
