"""State-change labels Δ(o_t, o_{t+1}) for real transitions: the supervision of the world model.

The DynaWeb world model is trained to describe, in free-form language, how the page changes when an
action is taken (paper, section 3.2). This module writes those descriptions for every real transition
of a trajectory, two ways:

- :func:`structural_diff` — deterministic and free: a diff of the two flattened accessibility trees
  (nodes keyed by bid) rendered as short sentences, e.g. ``"The checkbox [15] 'foo' became checked.
  A new StaticText [22] 'Done' appeared. URL unchanged."``
- :class:`TeacherLabeler` — the paper's way: a teacher LLM (the paper used gpt-oss-120b) reads the
  objective, the current page, the action and the *real* next page, and writes a reasoning trace and
  Δ. Any :class:`~dynaweb_env.llm.base.GenerationBackend` serves (``make_backend("openai:...")`` for
  an OpenAI-compatible server). Calls are batched; an output that does not follow the format falls
  back to the structural diff, with the teacher's error recorded.

:func:`label_trajectories` fills ``Step.changes`` (``steps[i].changes`` describes the transition from
``steps[i]`` to ``steps[i + 1]``) and records per-transition provenance (method, teacher reasoning,
errors) in ``trajectory.metadata["state_change_labels"]``.

Command line (resumable: trajectories already in ``--out`` are skipped)::

    python -m dynaweb_env.data.labels --in trajectories.jsonl --out labelled.jsonl --method diff
    python -m dynaweb_env.data.labels --in trajectories.jsonl --out labelled.jsonl \\
        --method teacher --teacher "openai:gpt-oss-120b@http://localhost:8000/v1"
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..llm.base import Conversation, GenerationBackend, GenerationError, SamplingParams
from ..observation import truncate_axtree
from ..world_model.prompts import CHANGES_HEADER, TREE_HEADER
from .io import iter_trajectories, write_trajectories
from .schema import Trajectory

#: Key of ``Trajectory.metadata`` holding per-transition label provenance.
LABELS_METADATA_KEY = "state_change_labels"
#: Default length cap of a structural-diff description (characters).
DEFAULT_DIFF_MAX_CHARS = 800
#: Fraction of the old page's nodes that must be gone (or now be other elements) for the page to count as replaced.
REPLACED_FRACTION = 0.6

LabelMethod = Literal["diff", "teacher"]

# ---------------------------------------------------------------------------------------------------
# Parsing node lines of BrowserGym's flattened tree: `[bid] role 'name' value='v', attr, key='x'`.
# ---------------------------------------------------------------------------------------------------

_BID_LINE = re.compile(r"^(?P<indent>\s*)(?:\[(?P<bid>[^\]\s]+)\]\s+)?(?P<role>\S+)(?P<rest>.*)$")
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_NAME = re.compile(rf"^\s*(?P<name>{_QUOTED})")
_VALUE = re.compile(rf"^\s*value=(?P<value>{_QUOTED})")


@dataclass(frozen=True)
class AxNode:
    """One node line of a flattened accessibility tree.

    Attributes:
        bid: The BrowserGym id (``""`` for lines printed without one, such as most ``StaticText``).
        role: The ARIA role (``button``, ``checkbox``, ``StaticText``...).
        name: The accessible name ("" if none).
        value: The ``value=`` field, or ``None``.
        attributes: Remaining properties: ``key -> value`` (bare flags such as ``focused`` map to ``"True"``).
        depth: Indentation depth.
    """

    bid: str
    role: str
    name: str
    value: str | None
    attributes: dict[str, str]
    depth: int

    def describe(self) -> str:
        """Short reference used in sentences: ``"checkbox [15] 'foo'"``."""
        ref = f"{self.role} [{self.bid}]" if self.bid else self.role
        return f"{ref} {_quote(self.name)}" if self.name else ref

    def content(self) -> tuple[Any, ...]:
        """Everything but the depth: two nodes with the same content are unchanged."""
        return (self.role, self.name, self.value, tuple(sorted(self.attributes.items())))


def _unquote(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
        return value if isinstance(value, str) else literal[1:-1]
    except (ValueError, SyntaxError):
        return literal[1:-1]


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"'{text}'"


def _split_attributes(text: str) -> list[str]:
    # Split on commas that are outside quotes.
    parts, current, quote, escaped = [], [], "", False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
            continue
        if char == "\\" and quote:
            escaped = True
            current.append(char)
            continue
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == ",":
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def parse_axtree_line(line: str) -> AxNode | None:
    """Parse one line of a flattened tree (``None`` for blank lines and cut markers)."""
    if not line.strip() or line.lstrip().startswith("... ("):
        return None
    match = _BID_LINE.match(line)
    if match is None:
        return None
    indent = match.group("indent")
    depth = indent.count("\t") + (len(indent.replace("\t", "")) // 2)
    rest = match.group("rest")
    name = ""
    name_match = _NAME.match(rest)
    if name_match:
        name = _unquote(name_match.group("name"))
        rest = rest[name_match.end() :]
    value = None
    value_match = _VALUE.match(rest)
    if value_match:
        value = _unquote(value_match.group("value"))
        rest = rest[value_match.end() :]
    attributes: dict[str, str] = {}
    for part in _split_attributes(rest):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not key:
            continue
        raw = raw.strip()
        attributes[key] = (_unquote(raw) if raw[:1] in "'\"" else raw) if sep else "True"
    return AxNode(match.group("bid") or "", match.group("role"), name, value, attributes, depth)


def parse_axtree(axtree: str) -> tuple[dict[str, AxNode], list[AxNode]]:
    """Split a flattened tree into nodes keyed by bid (in page order) and the unkeyed nodes."""
    keyed: dict[str, AxNode] = {}
    unkeyed: list[AxNode] = []
    for line in axtree.splitlines():
        node = parse_axtree_line(line)
        if node is None:
            continue
        if node.bid and node.bid not in keyed:
            keyed[node.bid] = node
        else:
            unkeyed.append(node)
    return keyed, unkeyed


# ---------------------------------------------------------------------------------------------------
# Structural diff.
# ---------------------------------------------------------------------------------------------------

_STATE_WORDS: dict[str, dict[str, str]] = {
    "checked": {"true": "became checked", "false": "became unchecked", "mixed": "became partially checked"},
    "selected": {"true": "became selected", "false": "was deselected"},
    "expanded": {"true": "expanded", "false": "collapsed"},
    "pressed": {"true": "became pressed", "false": "was released"},
    "disabled": {"true": "became disabled", "false": "became enabled"},
    "focused": {"true": "received focus", "false": "lost focus"},
    "hidden": {"true": "became hidden", "false": "became visible"},
}


def _state(value: str | None) -> str:
    return "false" if value is None else value.strip().lower()


def _node_change_phrases(before: AxNode, after: AxNode) -> list[str]:
    phrases = []
    if before.role != after.role:
        phrases.append(f"became a {after.role}")
    if before.name != after.name:
        phrases.append(f"now reads {_quote(after.name)}" if after.name else "lost its text")
    if before.value != after.value:
        phrases.append(f"now has value {_quote(after.value)}" if after.value else "was cleared")
    for key in sorted(set(before.attributes) | set(after.attributes)):
        old, new = before.attributes.get(key), after.attributes.get(key)
        if old == new:
            continue
        if key in _STATE_WORDS:
            word = _STATE_WORDS[key].get(_state(new))
            if word:
                phrases.append(word)
                continue
        if new is None:
            phrases.append(f"lost its {key} property")
        elif new == "True" and old is None:
            phrases.append(f"gained {key}")
        else:
            phrases.append(f"{key} changed to {_quote(new, 40)}")
    return phrases


def _join(phrases: list[str]) -> str:
    if len(phrases) <= 1:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _url_sentence(before_url: str, after_url: str) -> str:
    if before_url.strip() == after_url.strip():
        return "URL unchanged."
    if not after_url.strip():
        return "The URL is unknown."
    return f"The URL changed to {after_url.strip()[:300]}."


def _listing(nodes: Sequence[AxNode], limit: int) -> str:
    shown = [node.describe() for node in nodes[:limit]]
    more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return ", ".join(shown) + more


def _root_title(axtree: str) -> str:
    for line in axtree.splitlines():
        node = parse_axtree_line(line)
        if node is not None:
            return node.name if node.role in ("RootWebArea", "WebArea") else ""
    return ""


def structural_diff(
    before_axtree: str,
    after_axtree: str,
    before_url: str = "",
    after_url: str = "",
    *,
    max_chars: int = DEFAULT_DIFF_MAX_CHARS,
    max_items: int = 6,
) -> str:
    """Describe how a page changed between two flattened accessibility trees.

    Nodes are matched by bid. Nodes whose line changed are described by what changed (checked,
    value, name, focus...); nodes that appear or disappear are listed; lines without a bid (most
    ``StaticText``) are compared as a multiset of texts. When most of the old page's nodes are gone
    or changed, the page is described as replaced wholesale. The URL change always closes the
    description.

    Args:
        before_axtree: The tree before the action.
        after_axtree: The tree after the action.
        before_url: The URL before the action.
        after_url: The URL after the action.
        max_chars: Length cap of the whole description; sentences past it are summarised as a count.
        max_items: Most nodes named in one "appeared"/"disappeared" sentence.

    Returns:
        A concise natural-language description, deterministic for given inputs.

    Example:
        >>> structural_diff("RootWebArea 'T'\\n\\t[15] checkbox 'foo', checked='false'",
        ...                 "RootWebArea 'T'\\n\\t[15] checkbox 'foo', checked='true'\\n\\t[22] StaticText 'Done'")
        "The checkbox [15] 'foo' became checked. A new StaticText [22] 'Done' appeared. URL unchanged."
    """
    if max_chars < 80:
        raise ValueError(f"max_chars must be >= 80, got {max_chars}")
    url_sentence = _url_sentence(before_url, after_url)
    before_keyed, before_free = parse_axtree(before_axtree)
    after_keyed, after_free = parse_axtree(after_axtree)
    if not after_keyed and not after_free:
        return _cap(["The page became empty."], url_sentence, max_chars)

    removed = [node for bid, node in before_keyed.items() if bid not in after_keyed]
    added = [node for bid, node in after_keyed.items() if bid not in before_keyed]
    changed = [
        (node, after_keyed[bid])
        for bid, node in before_keyed.items()
        if bid in after_keyed and node.content() != after_keyed[bid].content()
    ]
    sentences: list[str] = []
    title_before, title_after = _root_title(before_axtree), _root_title(after_axtree)
    # Replaced wholesale: most old elements are gone or are now different elements (role or name
    # changed under the same bid, as when a new document reuses ids). State changes do not count.
    lost = len(removed) + sum((old.role, old.name) != (new.role, new.name) for old, new in changed)
    if (
        before_keyed
        and after_keyed
        and lost / len(before_keyed) > REPLACED_FRACTION
        and (len(before_keyed) >= 3 or lost == len(before_keyed))
    ):
        title = f" {_quote(title_after)}" if title_after else ""
        sentences.append(f"The page was replaced by a new page{title} with {len(after_keyed)} elements.")
        interactive = [node for node in after_keyed.values() if node.role not in ("StaticText", "generic")]
        if interactive:
            sentences.append(f"It shows {_listing(interactive, max_items)}.")
        return _cap(sentences, url_sentence, max_chars)

    if title_before != title_after and title_after:
        sentences.append(f"The page title changed to {_quote(title_after)}.")
    for before, after in changed:
        phrases = _node_change_phrases(before, after)
        if phrases:
            sentences.append(f"The {before.describe()} {_join(phrases)}.")
    if len(added) == 1:
        sentences.append(f"A new {added[0].describe()} appeared.")
    elif added:
        sentences.append(f"{len(added)} new elements appeared: {_listing(added, max_items)}.")
    if len(removed) == 1:
        sentences.append(f"The {removed[0].describe()} disappeared.")
    elif removed:
        sentences.append(f"{len(removed)} elements disappeared: {_listing(removed, max_items)}.")

    free_before = Counter(node.name for node in before_free if node.name and node.role != "RootWebArea")
    free_after = Counter(node.name for node in after_free if node.name and node.role != "RootWebArea")
    new_texts = list((free_after - free_before).elements())
    gone_texts = list((free_before - free_after).elements())
    if new_texts:
        shown = ", ".join(_quote(text) for text in new_texts[:max_items])
        more = f" and {len(new_texts) - max_items} more" if len(new_texts) > max_items else ""
        sentences.append(f"New text appeared: {shown}{more}.")
    if gone_texts:
        shown = ", ".join(_quote(text) for text in gone_texts[:max_items])
        more = f" and {len(gone_texts) - max_items} more" if len(gone_texts) > max_items else ""
        sentences.append(f"Text disappeared: {shown}{more}.")
    if not sentences:
        sentences.append("No visible change on the page.")
    return _cap(sentences, url_sentence, max_chars)


def _cap(sentences: list[str], closing: str, max_chars: int) -> str:
    budget = max_chars - len(closing) - 1
    kept: list[str] = []
    used = 0
    for index, sentence in enumerate(sentences):
        remaining = len(sentences) - index
        # Reserve room for the "(N more changes.)" note if anything would be left out.
        reserve = 0 if remaining == 1 else 24
        if used + len(sentence) + 1 > budget - reserve:
            if not kept:  # a single overlong sentence: cut it rather than drop everything
                kept.append(sentence[: max(budget - 26, 20)].rstrip() + "….")
                remaining -= 1
            if remaining > 0:
                kept.append(f"({remaining} more changes.)")
            break
        kept.append(sentence)
        used += len(sentence) + 1
    return " ".join([*kept, closing])


# ---------------------------------------------------------------------------------------------------
# Teacher labelling.
# ---------------------------------------------------------------------------------------------------

#: Section headers of the teacher's answer. The changes header is the world model's own, so that a
#: teacher label reads like the first section of a world-model output.
TEACHER_REASONING_HEADER = "[Reasoning]"
TEACHER_CHANGES_HEADER = CHANGES_HEADER

TEACHER_SYSTEM_PROMPT = f"""\
You label the transitions of a web browsing session for training a web world model.

You are given the user's objective, the current web page's accessibility tree and URL, the action \
that was performed on it, and the next web page's accessibility tree and URL, which are the real \
result of the action. Element ids in brackets, e.g. [15], identify the same element in both trees.

First reason briefly about what the action did to the page. Then describe the state changes: a \
concise, free-form description of how the next page differs from the current one (elements that \
appeared, disappeared or changed state, with their ids and names; a URL change; whether the page was \
replaced by a different page). Describe only differences that the next page really shows, so that a \
reader holding the current page and your description could write the next page.

Answer in exactly this format:

{TEACHER_REASONING_HEADER}
your reasoning

{TEACHER_CHANGES_HEADER}
the state changes"""


class TeacherOutputError(ValueError):
    """A teacher's answer does not follow the labelling format; the message says why."""


@dataclass(frozen=True)
class Transition:
    """One real transition ``(o_t, a_t, o_{t+1})`` with its objective, the input of a labeller."""

    goal: str
    url: str
    axtree: str
    action: str
    next_url: str
    next_axtree: str
    previous_action: str = ""


@dataclass(frozen=True)
class StateChangeLabel:
    """The label of one transition.

    Attributes:
        changes: The description Δ.
        reasoning: The teacher's reasoning trace ("" for structural diffs).
        source: ``"teacher"`` or ``"diff"`` (a structural diff, chosen or fallen back to).
        error: Why the teacher's answer was not used (``""`` when it was, or was never asked).
    """

    changes: str
    reasoning: str = ""
    source: str = "diff"
    error: str = ""


def diff_label(transition: Transition, max_chars: int = DEFAULT_DIFF_MAX_CHARS) -> StateChangeLabel:
    """Label one transition with :func:`structural_diff`."""
    changes = structural_diff(
        transition.axtree, transition.next_axtree, transition.url, transition.next_url, max_chars=max_chars
    )
    return StateChangeLabel(changes=changes, source="diff")


_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S | re.I)


def _header(header: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(word) for word in header.strip("[]").split())
    return re.compile(
        rf"^[ \t]*(?:#+[ \t]*)?\**[ \t]*\[?[ \t]*{words}[ \t]*\]?[ \t]*\**[ \t]*:?[ \t]*\**[ \t]*", re.I | re.M
    )


_REASONING_RE = _header(TEACHER_REASONING_HEADER)
_CHANGES_RE = _header(TEACHER_CHANGES_HEADER)
# A teacher that goes on to write the next tree (as a world model would) is cut there.
_STOP_RE = _header(TREE_HEADER)


def parse_teacher_output(text: str, finish_reason: str = "stop", max_changes_chars: int = 4000) -> tuple[str, str]:
    """Read ``(reasoning, changes)`` from a teacher's answer.

    Tolerates markdown decoration of the headers, a ``<think>`` block (taken as reasoning when no
    reasoning section is given) and a trailing next-tree section (ignored).

    Raises:
        TeacherOutputError: If the changes section is missing or empty, or the answer was cut by the
            token limit before the changes were complete, or the changes are implausibly long.
    """
    if not isinstance(text, str) or not text.strip():
        raise TeacherOutputError("empty teacher output")
    think = " ".join(match.strip() for match in _THINK.findall(text)).strip()
    body = _THINK.sub("", text)
    changes_match = _CHANGES_RE.search(body)
    if changes_match is None:
        cut = " (cut by the token limit)" if finish_reason == "length" else ""
        raise TeacherOutputError(f"no {TEACHER_CHANGES_HEADER} section in the teacher output{cut}")
    if finish_reason == "length":
        raise TeacherOutputError("teacher output cut by the token limit inside the changes section")
    changes = body[changes_match.end() :]
    stop = _STOP_RE.search(changes)
    if stop:
        changes = changes[: stop.start()]
    changes = changes.strip().strip("`").strip()
    if not changes:
        raise TeacherOutputError(f"empty {TEACHER_CHANGES_HEADER} section")
    if len(changes) > max_changes_chars:
        raise TeacherOutputError(f"changes section too long ({len(changes)} > {max_changes_chars} characters)")
    head = body[: changes_match.start()]
    reasoning_match = _REASONING_RE.search(head)
    reasoning = head[reasoning_match.end() :].strip() if reasoning_match else head.strip()
    return (reasoning or think), changes


class TeacherLabeler:
    """Labels transitions with a teacher LLM, in batches; malformed answers fall back to the diff.

    Args:
        backend: Any :class:`~dynaweb_env.llm.base.GenerationBackend` (the paper: gpt-oss-120b
            behind an OpenAI-compatible server).
        sampling: Sampling of the teacher (default: greedy, 512 new tokens).
        batch_size: Transitions per backend call.
        max_axtree_chars: Character budget of each tree in the prompt
            (:func:`~dynaweb_env.observation.truncate_axtree`; ``0``: no limit).
        include_diff_hint: Show the teacher the structural diff as a hint (helps weaker teachers).
        max_changes_chars: Answers with a longer changes section count as malformed.
        on_backend_error: ``"raise"`` (default; nothing is written, so a resumed run retries) or
            ``"fallback"`` (label the batch with structural diffs, recording the error).

    Example:
        >>> from dynaweb_env.llm import make_backend  # doctest: +SKIP
        >>> labeler = TeacherLabeler(make_backend("openai:gpt-oss-120b@http://localhost:8000/v1"))  # doctest: +SKIP
        >>> labeler.label([Transition(goal, url, tree, "click [13]", next_url, next_tree)])  # doctest: +SKIP
    """

    def __init__(
        self,
        backend: GenerationBackend,
        sampling: SamplingParams | None = None,
        *,
        batch_size: int = 8,
        max_axtree_chars: int = 6000,
        include_diff_hint: bool = True,
        max_changes_chars: int = 4000,
        on_backend_error: Literal["raise", "fallback"] = "raise",
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {max_axtree_chars}")
        if on_backend_error not in ("raise", "fallback"):
            raise ValueError(f"on_backend_error must be 'raise' or 'fallback', got {on_backend_error!r}")
        self.backend = backend
        self.sampling = sampling or SamplingParams(max_new_tokens=512, temperature=0.0)
        self.batch_size = batch_size
        self.max_axtree_chars = max_axtree_chars
        self.include_diff_hint = include_diff_hint
        self.max_changes_chars = max_changes_chars
        self.on_backend_error = on_backend_error

    @property
    def model_name(self) -> str:
        return str(getattr(self.backend, "model_name", type(self.backend).__name__))

    def build_messages(self, transition: Transition) -> Conversation:
        """The teacher's chat conversation for one transition (system + user message)."""
        cut = self.max_axtree_chars
        parts = [
            f"OBJECTIVE: {transition.goal}",
            f"CURRENT URL: {transition.url}",
            f"CURRENT ACCESSIBILITY TREE:\n{truncate_axtree(transition.axtree, cut)}",
            f"PREVIOUS ACTION: {transition.previous_action or 'None'}",
            f"CURRENT ACTION: {transition.action}",
            f"NEXT URL: {transition.next_url}",
            f"NEXT ACCESSIBILITY TREE:\n{truncate_axtree(transition.next_axtree, cut)}",
        ]
        if self.include_diff_hint:
            hint = structural_diff(transition.axtree, transition.next_axtree, transition.url, transition.next_url)
            parts.append(f"AUTOMATIC TREE DIFF (may be incomplete or noisy): {hint}")
        return [
            {"role": "system", "content": TEACHER_SYSTEM_PROMPT},
            {"role": "user", "content": "\n".join(parts)},
        ]

    def label(self, transitions: Sequence[Transition], progress: bool = False) -> list[StateChangeLabel]:
        """Label transitions, ``batch_size`` per backend call, in input order.

        Raises:
            GenerationError: If the backend fails and ``on_backend_error="raise"``.
        """
        labels: list[StateChangeLabel] = []
        batches = range(0, len(transitions), self.batch_size)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc=f"teacher {self.model_name}", unit="batch", file=sys.stderr)
        for start in batches:
            batch = list(transitions[start : start + self.batch_size])
            try:
                generations = self.backend.generate([self.build_messages(item) for item in batch], self.sampling)
                if len(generations) != len(batch):
                    raise GenerationError(f"backend returned {len(generations)} completions for {len(batch)} prompts")
            except GenerationError as error:
                if self.on_backend_error == "raise":
                    raise
                labels.extend(
                    StateChangeLabel(diff_label(item).changes, source="diff", error=f"backend error: {error}")
                    for item in batch
                )
                continue
            for item, generation in zip(batch, generations, strict=True):
                try:
                    reasoning, changes = parse_teacher_output(
                        generation.text, generation.finish_reason, self.max_changes_chars
                    )
                    labels.append(StateChangeLabel(changes, reasoning, source="teacher"))
                except TeacherOutputError as error:
                    labels.append(StateChangeLabel(diff_label(item).changes, source="diff", error=str(error)))
        return labels


# ---------------------------------------------------------------------------------------------------
# Labelling whole trajectories.
# ---------------------------------------------------------------------------------------------------


def trajectory_transitions(trajectory: Trajectory) -> list[Transition]:
    """The labeller inputs of a trajectory: one per consecutive step pair."""
    transitions = []
    for index, (before, after) in enumerate(trajectory.transitions()):
        previous = trajectory.steps[index - 1].action if index > 0 else ""
        transitions.append(
            Transition(trajectory.goal, before.url, before.axtree, before.action, after.url, after.axtree, previous)
        )
    return transitions


def label_trajectories(
    trajectories: Iterable[Trajectory],
    method: LabelMethod = "diff",
    labeler: TeacherLabeler | None = None,
    *,
    overwrite: bool = True,
    diff_max_chars: int = DEFAULT_DIFF_MAX_CHARS,
    progress: bool = False,
) -> list[Trajectory]:
    """Label every real transition of some trajectories; returns labelled copies.

    ``steps[i].changes`` receives Δ of the transition ``steps[i] -> steps[i + 1]``; the last step,
    which has no successor, is left as it is. Provenance goes to
    ``metadata["state_change_labels"]``: ``{"method", "model", "transitions": [{"step", "source",
    "reasoning", "error"}]}``. With ``method="teacher"`` all transitions of all trajectories are sent
    to the teacher in batches.

    Args:
        trajectories: The trajectories (not modified).
        method: ``"diff"`` (:func:`structural_diff`) or ``"teacher"`` (needs ``labeler``).
        labeler: The :class:`TeacherLabeler` for ``method="teacher"``.
        overwrite: Relabel steps that already have ``changes`` (``False`` keeps them).
        diff_max_chars: Length cap of structural-diff descriptions.
        progress: Show a progress bar.

    Raises:
        ValueError: For an unknown method, or ``method="teacher"`` without a labeler.
    """
    if method not in ("diff", "teacher"):
        raise ValueError(f"method must be 'diff' or 'teacher', got {method!r}")
    if method == "teacher" and labeler is None:
        raise ValueError("method='teacher' needs a TeacherLabeler (labeler=...)")
    copies = [copy.deepcopy(trajectory) for trajectory in trajectories]
    todo: list[tuple[int, int, Transition]] = []
    for t_index, trajectory in enumerate(copies):
        for s_index, transition in enumerate(trajectory_transitions(trajectory)):
            if overwrite or not trajectory.steps[s_index].changes:
                todo.append((t_index, s_index, transition))
    inputs = [transition for _, _, transition in todo]
    if method == "teacher":
        labels = labeler.label(inputs, progress=progress)  # type: ignore[union-attr]
    else:
        items: Iterable[Transition] = inputs
        if progress:
            from tqdm.auto import tqdm

            items = tqdm(inputs, desc="structural diff", unit="transition", file=sys.stderr)
        labels = [diff_label(item, diff_max_chars) for item in items]
    records: dict[int, list[dict[str, Any]]] = {}
    for (t_index, s_index, _), label in zip(todo, labels, strict=True):
        copies[t_index].steps[s_index].changes = label.changes
        records.setdefault(t_index, []).append(
            {"step": s_index, "source": label.source, "reasoning": label.reasoning, "error": label.error}
        )
    model = labeler.model_name if method == "teacher" and labeler is not None else "structural_diff"
    for t_index, entries in records.items():
        copies[t_index].metadata[LABELS_METADATA_KEY] = {"method": method, "model": model, "transitions": entries}
    return copies


def transition_reasoning(trajectory: Trajectory, step_index: int) -> str:
    """The teacher's reasoning recorded for transition ``step_index`` ("" if none)."""
    record = trajectory.metadata.get(LABELS_METADATA_KEY, {})
    for entry in record.get("transitions", []) if isinstance(record, dict) else []:
        if isinstance(entry, dict) and entry.get("step") == step_index:
            return str(entry.get("reasoning") or "")
    return ""


# ---------------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------------


@dataclass
class LabelRunSummary:
    """What one labelling run did (printed as a line by the CLI)."""

    read: int = 0
    skipped_existing: int = 0
    labelled: int = 0
    transitions: int = 0
    teacher_labels: int = 0
    fallbacks: int = 0
    errors: Counter[str] = field(default_factory=Counter)


def _existing_ids(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a half-written last line of an interrupted run is expected
        return {trajectory.id for trajectory in iter_trajectories(path, on_error="skip")}


def _drop_partial_last_line(path: Path) -> None:
    # An interrupted writer can leave half a record without its newline; appending after it would
    # glue the next record onto it and lose both. The half record is relabelled (its id is not done).
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        handle.truncate(data.rfind(b"\n") + 1)


def run_labelling(
    input_path: str | Path,
    output_path: str | Path,
    method: LabelMethod = "diff",
    labeler: TeacherLabeler | None = None,
    *,
    chunk_size: int = 16,
    progress: bool = True,
) -> LabelRunSummary:
    """Label a JSONL file into another, resumably: trajectories already in the output are skipped.

    Trajectories are labelled ``chunk_size`` at a time and appended after each chunk, so an
    interruption loses at most one chunk of work and nothing already written.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if input_path.resolve() == output_path.resolve():
        raise ValueError("--in and --out must be different files")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    done = _existing_ids(output_path)
    _drop_partial_last_line(output_path)
    summary = LabelRunSummary()
    pending = []
    for trajectory in iter_trajectories(input_path, on_error="skip"):
        summary.read += 1
        if trajectory.id in done:
            summary.skipped_existing += 1
        else:
            pending.append(trajectory)
            done.add(trajectory.id)  # duplicates inside the input are labelled once
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc=f"labelling ({method})", unit="traj", file=sys.stderr)
    for start in range(0, len(pending), chunk_size):
        chunk = label_trajectories(pending[start : start + chunk_size], method, labeler)
        write_trajectories(output_path, chunk, append=True)
        for trajectory in chunk:
            summary.labelled += 1
            for entry in trajectory.metadata.get(LABELS_METADATA_KEY, {}).get("transitions", []):
                summary.transitions += 1
                if entry["source"] == "teacher":
                    summary.teacher_labels += 1
                elif method == "teacher":
                    summary.fallbacks += 1
                    summary.errors[entry["error"].split(":")[0][:80]] += 1
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m dynaweb_env.data.labels", description="Write state-change labels for real transitions."
    )
    parser.add_argument("--in", dest="input", required=True, help="input trajectories (JSONL)")
    parser.add_argument("--out", required=True, help="output trajectories (JSONL; appended to, resumable)")
    parser.add_argument("--method", choices=("diff", "teacher"), default="diff", help="labelling method")
    parser.add_argument("--teacher", default="", help="teacher backend spec for make_backend (method=teacher)")
    parser.add_argument("--batch-size", type=int, default=8, help="transitions per teacher call")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="teacher token budget per transition")
    parser.add_argument("--max-axtree-chars", type=int, default=6000, help="tree budget in the teacher prompt")
    parser.add_argument("--chunk-size", type=int, default=16, help="trajectories labelled per append")
    parser.add_argument("--no-diff-hint", action="store_true", help="do not show the teacher the structural diff")
    args = parser.parse_args(argv)
    if not Path(args.input).is_file():
        parser.error(f"input file not found: {args.input}")
    labeler = None
    if args.method == "teacher":
        if not args.teacher:
            parser.error("--method teacher needs --teacher SPEC (e.g. smollm2-135m or openai:MODEL@URL)")
        from ..llm import make_backend

        labeler = TeacherLabeler(
            make_backend(args.teacher),
            SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0),
            batch_size=args.batch_size,
            max_axtree_chars=args.max_axtree_chars,
            include_diff_hint=not args.no_diff_hint,
        )
    summary = run_labelling(args.input, args.out, args.method, labeler, chunk_size=args.chunk_size)
    print(
        f"read {summary.read} trajectories, skipped {summary.skipped_existing} already labelled, "
        f"labelled {summary.labelled} ({summary.transitions} transitions"
        + (
            f"; teacher {summary.teacher_labels}, fallback to diff {summary.fallbacks}"
            if args.method == "teacher"
            else ""
        )
        + f") -> {args.out}"
    )
    for reason, count in summary.errors.most_common():
        print(f"  fallback x{count}: {reason}")
    return 0


__all__ = [
    "LABELS_METADATA_KEY",
    "AxNode",
    "parse_axtree_line",
    "parse_axtree",
    "structural_diff",
    "TEACHER_SYSTEM_PROMPT",
    "TeacherOutputError",
    "Transition",
    "StateChangeLabel",
    "diff_label",
    "parse_teacher_output",
    "TeacherLabeler",
    "trajectory_transitions",
    "label_trajectories",
    "transition_reasoning",
    "LabelRunSummary",
    "run_labelling",
    "main",
]


if __name__ == "__main__":
    raise SystemExit(main())
