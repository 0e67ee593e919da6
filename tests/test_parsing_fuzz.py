"""Response parsing is linear: large generated texts of many shapes parse quickly (issue #15, item 4).

The limits are pytest-timeout limits, generous for a linear parser and far below what the old
backtracking patterns took (``extract_action("\\n" * 4000)`` alone took 201 s). The differential
test keeps the old patterns as an oracle on small inputs, where they are fast: on single-line
section headers the new parser reads responses exactly as they did.
"""

from __future__ import annotations

import random
import re

import pytest

from dynaweb_env.actions import ACTION_ARGUMENTS, ActionParseError, extract_action, extract_reasoning, parse_action

SIZE = 100_000

_PIECES = ["ACTION", "action", "REASON", "reason", ":", "*", "**", " ", "\n", "`", "[", "]", "click", "stop", "type",
           "12", "OBSERVATION HIGHLIGHT", "note", "x", "\t", "Ab", "go_back", "  ", "\n\n", "[1]", "Reason",
           "ACTION:", "REASON:", "NOTE:", "é", "☕"]  # fmt: skip


def _shapes() -> dict[str, str]:
    rng = random.Random(15)
    shapes = {
        "newlines": "\n" * SIZE,
        "spaces": " " * SIZE,
        "tabs and newlines": "\t\n" * (SIZE // 2),
        "stars": "*" * SIZE,
        "newline stars": "\n**" * (SIZE // 3),
        "action headers": "ACTION:" * (SIZE // 7),
        "action header lines": "\n ** ACTION ** :" * (SIZE // 16),
        "reason headers": "REASON:" * (SIZE // 7),
        "reason words": "reason " * (SIZE // 7),
        "reason spaced": "REASON" + " " * SIZE + "x",
        "capital lines": "\nABC DEF" * (SIZE // 8),
        "capital line no colon": "A" + " " * SIZE + "x:",
        "action words": "click " * (SIZE // 6),
        "open brackets": "[" * SIZE,
        "close brackets": "]" * SIZE,
        "action words with brackets": "click [" * (SIZE // 7) + "]",
        "nested brackets": "stop " + "[" * (SIZE // 2) + "]" * (SIZE // 2),
        "bracketed args": "type " + "[a]" * (SIZE // 3),
        "long type": "type [1] [" + "x" * SIZE + "] [0]",
        "long stop": "stop [" + "[]" * (SIZE // 2) + "]",
        "backticks": "`" * SIZE,
        "response": ("REASON: " + "because " * (SIZE // 16) + "\nACTION: click [3]\n") * 2,
    }
    for index in range(8):
        pieces = []
        while sum(map(len, pieces)) < SIZE:
            pieces.append(rng.choice(_PIECES))
        shapes[f"random mix {index}"] = "".join(pieces)
    for name in ACTION_ARGUMENTS:
        shapes[f"{name} repeated"] = (name + " [") * (SIZE // (len(name) + 2))
    return shapes


SHAPES = _shapes()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(SHAPES))
def test_response_parsing_is_linear_on_large_inputs(name: str) -> None:
    text = SHAPES[name]
    assert len(text) >= SIZE * 0.9
    action = extract_action(text)
    reasoning = extract_reasoning(text)
    assert isinstance(action, str) and isinstance(reasoning, str)
    for candidate in (text, action):
        try:
            parse_action(candidate)
        except ActionParseError as error:
            assert str(error)


def test_large_inputs_parse_as_expected() -> None:
    assert extract_action(SHAPES["response"]) == "click [3]"
    assert extract_reasoning(SHAPES["response"]).startswith("because because")
    assert parse_action(SHAPES["long type"]).arg("text") == "x" * SIZE
    assert extract_action(SHAPES["newlines"]) == ""


# The patterns of the previous, backtracking parser: the oracle for the differential test below.
_OLD_HEADER = re.compile(r"(?:^|\n)\s*\**\s*ACTION\s*\**\s*:\s*\**", re.IGNORECASE)
_OLD_NEXT = re.compile(r"\n\s*\**\s*[A-Z][A-Z ]{2,}\s*\**\s*:")
_OLD_ANYWHERE = re.compile(r"`?\b(" + "|".join(ACTION_ARGUMENTS) + r")\b(?:\s*\[[^\n]*\])?`?")
_OLD_NAME = re.compile(r"\s*([a-z_]+)\s*")
_OLD_REASON = re.compile(r"REASON\s*\**\s*:\s*\**(.*?)(?=\n\s*\**\s*[A-Z][A-Z ]{2,}\s*\**\s*:|\Z)", re.S | re.I)


def _old_extract_action(response: str) -> str:
    headers = list(_OLD_HEADER.finditer(response))
    if headers:
        body = response[headers[-1].end() :]
        next_header = _OLD_NEXT.search("\n" + body)
        if next_header:
            body = ("\n" + body)[: next_header.start()]
        lines = [line.strip().strip("`").strip() for line in body.strip().splitlines() if line.strip()]
        candidate = lines[0] if lines else ""
        inline = _OLD_ANYWHERE.search(body)
        if candidate and not _OLD_NAME.match(candidate) and inline:
            candidate = inline.group(0)
        return candidate.strip("`").strip()
    matches = list(_OLD_ANYWHERE.finditer(response))
    return matches[-1].group(0).strip("`").strip() if matches else response.strip()


def _old_extract_reasoning(response: str) -> str:
    match = _OLD_REASON.search(response)
    return match.group(1).strip() if match else ""


# The old patterns let a header's whitespace run across lines ("ACTION\n:"); the new parser reads a
# section header on one line only. Inputs with such split headers are left out of the comparison.
_SPLIT_HEADER = re.compile(r"[A-Za-z][\s*]*\n[\s*]*:|:[\s*]*\n[\s*]*[A-Za-z ]+[\s*]*:")


def test_reads_responses_as_the_previous_parser_did() -> None:
    rng = random.Random(14)
    compared = 0
    for _ in range(20_000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 14)))
        if _SPLIT_HEADER.search(text):
            continue
        compared += 1
        assert extract_action(text) == _old_extract_action(text), text
        assert extract_reasoning(text) == _old_extract_reasoning(text), text
    assert compared > 10_000
