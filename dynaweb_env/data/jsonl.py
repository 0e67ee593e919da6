"""JSONL files, read and appended to robustly: the one reader and the one appender of the project.

Reading (:func:`iter_jsonl`, :func:`iter_jsonl_lines`) yields one JSON object per non-blank line of a
``.jsonl`` file or of an xz-compressed ``.jsonl.xz``. A bad record never costs the rest of the file: by
default (``on_error="skip"``) it is skipped with a :class:`CorruptRecordWarning` naming ``file:line`` and
the reason; ``on_error="raise"`` raises :class:`CorruptRecordError` naming them instead. A record is bad when
its line

- is not UTF-8 (a write cut short can split a character: records are written with ``ensure_ascii=False``),
- is not JSON, or nests deeper than the parser can follow (``RecursionError``),
- holds ``NaN``, ``Infinity`` or ``-Infinity``: not JSON (RFC 8259), refused by most other readers (``jq``,
  JavaScript, Arrow), so they are never written here and are bad records when read (``allow_nan=True`` reads
  them, for files written elsewhere),
- is not a JSON object (a list, a number, a string),
- or fails the caller's ``convert`` (a schema check) with a ``ValueError``.

A truncated or corrupt ``.xz`` stream keeps every record before the cut and warns (or raises) naming the file
and the line where the stream stopped.

Appending (:func:`append_jsonl`) first makes a file that an interrupted run cut short safe to append to
(:func:`prepare_for_append`: a cut-short last line is removed, a whole last record only missing its newline
gets it, and a file that is not JSONL at all is refused, never edited), then writes each record as one
flushed line.
"""

from __future__ import annotations

import json
import lzma
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

PathLike = str | os.PathLike[str]
OnError = Literal["skip", "raise"]

#: Bytes read at a time when looking for the start of the last line.
_CHUNK = 65536


class CorruptRecordError(ValueError):
    """A line of a JSONL file is not a valid record; the message names the file and the line.

    Attributes:
        path: The file.
        line_number: The 1-based line.
        reason: What is wrong with it.
    """

    def __init__(self, path: PathLike, line_number: int, reason: str):
        self.path, self.line_number, self.reason = str(path), line_number, reason
        super().__init__(f"{path}:{line_number}: {reason}")


class CorruptRecordWarning(UserWarning):
    """A bad record of a JSONL file was skipped (the message names the file and the line)."""


class JsonlLine(NamedTuple):
    """One record of a JSONL file, where it was and how it was written."""

    number: int
    """The 1-based line number."""
    text: bytes
    """The line as stored, without its newline."""
    record: Any
    """The parsed JSON object (what ``convert`` returned, when one was given)."""


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number (JSON has no NaN or Infinity)")


def parse_record(line: bytes | str, allow_nan: bool = False) -> dict[str, Any]:
    """Parse one JSONL line into its JSON object.

    Args:
        line: The line, as bytes (decoded as strict UTF-8) or text.
        allow_nan: Accept ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON; refused by default).

    Returns:
        The object.

    Raises:
        ValueError: Naming the reason: not UTF-8, not JSON, nested too deeply, a NaN/Infinity, not an object.
    """
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text ({error})") from None
    try:
        record = json.loads(text) if allow_nan else json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object (a JSON {_json_type(record)})")
    return record


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _report(path: Path, line_number: int, reason: str, on_error: OnError) -> None:
    error = CorruptRecordError(path, line_number, reason)
    if on_error == "raise":
        raise error
    warnings.warn(f"skipping corrupt record: {error}", CorruptRecordWarning, stacklevel=3)


def _open(path: Path):
    return lzma.open(path, "rb") if path.suffix == ".xz" else path.open("rb")


def iter_jsonl_lines(
    path: PathLike,
    on_error: OnError = "skip",
    *,
    convert: Callable[[dict[str, Any]], Any] | None = None,
    allow_nan: bool = False,
) -> Iterator[JsonlLine]:
    """Yield each good record of a JSONL file with its line number and stored text (blank lines are passed over).

    Args:
        path: A ``.jsonl`` file, or an xz-compressed one (``.xz``).
        on_error: ``"skip"`` warns (:class:`CorruptRecordWarning`, naming file, line and reason) and goes on;
            ``"raise"`` raises :class:`CorruptRecordError` at the first bad record.
        convert: Applied to each object (e.g. a schema's ``from_dict``); a ``ValueError`` it raises makes the
            record bad, with the error as the reason.
        allow_nan: Accept ``NaN`` and ``Infinity`` (see :func:`parse_record`).

    Raises:
        FileNotFoundError: If ``path`` is not a file (the message names it).
        CorruptRecordError: With ``on_error="raise"``, at the first bad record or at a cut or corrupt xz stream.
    """
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"JSONL file not found: {path}")
    line_number = 0
    with _open(path) as handle:
        try:
            for line_number, raw in enumerate(handle, start=1):
                text = raw.rstrip(b"\r\n")
                if not text.strip():
                    continue
                try:
                    record = parse_record(text, allow_nan)
                    if convert is not None:
                        record = convert(record)
                except ValueError as error:
                    _report(path, line_number, str(error), on_error)
                    continue
                yield JsonlLine(line_number, text, record)
        except (EOFError, lzma.LZMAError) as error:
            # Every line before the cut was yielded; the one being read when the stream broke is lost.
            reason = f"the compressed stream is cut short or corrupt here ({error}); the records before it are kept"
            _report(path, line_number + 1, reason, on_error)


def iter_jsonl(
    path: PathLike,
    on_error: OnError = "skip",
    *,
    convert: Callable[[dict[str, Any]], Any] | None = None,
    allow_nan: bool = False,
) -> Iterator[Any]:
    """Yield each good record of a JSONL file (see :func:`iter_jsonl_lines`, whose arguments it takes)."""
    for line in iter_jsonl_lines(path, on_error, convert=convert, allow_nan=allow_nan):
        yield line.record


def dumps_record(record: Mapping[str, Any]) -> bytes:
    """One record as a JSONL line (UTF-8, with its newline).

    Text is stored as UTF-8, not ``\\u`` escapes; a string that UTF-8 cannot hold (a lone surrogate, as a web
    page can produce) makes the line use escapes instead, so nothing is lost.

    Raises:
        ValueError: If the record holds NaN or Infinity (not JSON), or is not a mapping.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"a JSONL record must be a JSON object, got {type(record).__name__}")
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError as error:
        raise ValueError(f"a record holds NaN or Infinity, which JSON cannot store ({error})") from None
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")


def _last_line_start(handle, size: int) -> int:
    position = size
    while position > 0:
        step = min(_CHUNK, position)
        handle.seek(position - step)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            return position - step + newline + 1
        position -= step
    return 0


def _is_record(line: bytes) -> bool:
    try:
        parse_record(line, allow_nan=True)
    except ValueError:
        return False
    return True


def _has_record_before(path: Path, end: int) -> bool:
    """Whether any line before byte ``end`` is a JSON object."""
    with path.open("rb") as handle:
        read = 0
        for line in handle:
            read += len(line)
            if read > end:
                return False
            if line.strip() and _is_record(line):
                return True
    return False


def prepare_for_append(path: PathLike) -> None:
    """Make ``path`` safe to append JSON lines to (nothing to do if it is missing or empty).

    A run killed mid-write leaves a last line without its newline, often not valid JSON: it is removed
    (with a warning), or, when it is a whole record that only lacks its newline, the newline is added, so the
    next record starts on a line of its own.

    Raises:
        ValueError: If the file holds no JSON object line at all: it is not a JSONL file (it is left as is).
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = _last_line_start(handle, size)
        handle.seek(start)
        last = handle.read()
        whole = _is_record(last)
        if not whole and not _has_record_before(path, start):
            raise ValueError(
                f"{path} is not a JSONL file of records (no line is a JSON object); refusing to append to it"
            )
        if not last:  # the file ends with a newline: the last record is whole
            return
        if whole:
            handle.write(b"\n")  # a whole record that only lacks its newline
            return
        warnings.warn(f"{path}: removing a cut-short last line ({len(last)} bytes) before appending", stacklevel=2)
        handle.truncate(start)


def append_jsonl(path: PathLike, records: Iterable[Mapping[str, Any]], *, fsync: bool = False) -> int:
    """Append records to a JSONL file, one flushed line each, after :func:`prepare_for_append`.

    The file (and its directory) is created if missing. An interruption leaves whole lines and at most one
    cut-short last line, which the next append removes and every reader skips.

    Args:
        path: The file.
        records: JSON objects; each line is written (and flushed) before the next record is taken.
        fsync: Also ``os.fsync`` the file at the end (the lines survive a power loss, not only a killed process).

    Returns:
        How many records were written.

    Raises:
        ValueError: If ``path`` is not a JSONL file (nothing is written), or a record holds NaN or Infinity
            (the records before it are written, nothing of it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prepare_for_append(path)
    count = 0
    with path.open("ab") as handle:
        for record in records:
            try:
                line = dumps_record(record)
            except ValueError as error:
                raise ValueError(f"{path}: record {count + 1} of this append not written: {error}") from None
            handle.write(line)
            handle.flush()
            count += 1
        if fsync:
            os.fsync(handle.fileno())
    return count


__all__ = [
    "CorruptRecordError",
    "CorruptRecordWarning",
    "JsonlLine",
    "append_jsonl",
    "dumps_record",
    "iter_jsonl",
    "iter_jsonl_lines",
    "parse_record",
    "prepare_for_append",
]
