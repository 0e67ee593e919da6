"""Teacher labelling: a teacher LLM describes the state changes Δ(o_t, o_{t+1}) of real transitions.

The DynaWeb world model is trained to describe, in free-form language, how the page changes when an
action is taken (paper, section 3.2). The paper's labels come from a teacher LLM (gpt-oss-120b) that
reads the objective, the current page, the action and the *real* next page, and writes a reasoning
trace and Δ. :class:`TeacherLabeler` does that with any
:class:`~dynaweb_env.llm.base.GenerationBackend` (``make_backend("openai:...")`` for an
OpenAI-compatible server), in batches; an answer that does not follow the format falls back to the
free structural diff (:func:`~dynaweb_env.axtree.structural_diff`), with the teacher's error recorded.

Whole trajectories and files are labelled by :mod:`~dynaweb_env.world_model.state_changes`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..axtree import DEFAULT_DIFF_MAX_CHARS, structural_diff, truncate_axtree
from ..llm.base import Conversation, GenerationBackend, GenerationError, SamplingParams
from .output_format import CHANGES_HEADER, TREE_HEADER, header_regex
from .prompts import format_world_model_input

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


_REASONING_RE = header_regex(TEACHER_REASONING_HEADER, whole_line=False)
_CHANGES_RE = header_regex(TEACHER_CHANGES_HEADER, whole_line=False)
# A teacher that goes on to write the next tree (as a world model would) is cut there.
_STOP_RE = header_regex(TREE_HEADER, whole_line=False)


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
        # The world model's own input, then what the teacher alone sees: the real next page.
        parts = [
            format_world_model_input(
                transition.goal, transition.url, transition.axtree, transition.action, transition.previous_action, cut
            ),
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


__all__ = [
    "TEACHER_CHANGES_HEADER",
    "TEACHER_REASONING_HEADER",
    "TEACHER_SYSTEM_PROMPT",
    "StateChangeLabel",
    "TeacherLabeler",
    "TeacherOutputError",
    "Transition",
    "diff_label",
    "parse_teacher_output",
]
