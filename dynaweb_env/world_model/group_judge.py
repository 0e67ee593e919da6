"""Group-relative judging, after ART's RULER: the judge scores the G dreams of one GSPO group together.

GSPO needs only advantages *within* a group of rollouts of one task query, so a judge need not say
whether a dream succeeded in absolute terms; it is enough that it orders the group's dreams rightly.
Two ways to score a group, each with one batched backend call for all groups of a rollout batch:

- ``"votes"``: each dream is judged on its own ``K`` times (:class:`~.judge.TrajectoryJudge` with
  ``votes=K``) and scores the share of SUCCESS votes, in ``[0, 1]``. This is what a *trained* judge
  can do: the shipped one learned to read one trajectory and write one verdict.
- ``"listwise"`` (RULER proper): one prompt shows the task once and every attempt of the group
  (actions, final page, answer, as :func:`~.judge.format_judge_input` writes one trajectory), and the
  judge writes one ``ATTEMPT i: SCORE x`` line per attempt, comparing them. For capable prompted
  judges (a large model behind ``openai:``).

A group whose judge output cannot be read (a missing or repeated attempt, a score outside
``[0, 1]``, no score lines) gets score 0 for every dream and :attr:`GroupScores.error` says why: an
unreadable judgement never crashes a run and never rewards.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..llm.base import Conversation, GenerationError
from .judge import JudgeRequest, JudgeStep, TrajectoryJudge, format_judge_input

#: How a group of dreams is scored (``"off"``: each dream is judged alone, the paper's reward).
GROUP_JUDGING_MODES = ("off", "votes", "listwise")
#: Extra generation budget per attempt of a listwise judgement (one ``ATTEMPT i: SCORE x`` line).
TOKENS_PER_ATTEMPT = 16
#: The least final-tree budget of one attempt in a listwise prompt (the judge's budget is split over the group).
MIN_ATTEMPT_AXTREE_CHARS = 500

GROUP_JUDGE_SYSTEM_PROMPT = """\
You are an expert in evaluating the performance of a web navigation agent. The agent was given the same \
task several times. For each attempt you are shown the actions it performed (each with the page element \
it acted on and its reasoning when available), the final web page's URL and accessibility tree, and the \
agent's answer (the text it returned with `stop [answer]`, or "None" if it did not stop).

Score every attempt from 0 to 1 by how completely it accomplished the objective: 1 if the final web page or \
the answer shows that every part of the objective was done, 0 if nothing was done, in between for partial \
progress. Compare the attempts with each other: an attempt that did more of the task must score higher than \
one that did less, and attempts that did the same must score the same. Do not give credit for actions that \
were planned but not performed, or for an answer that the final web page does not support.

Generate your answer in the following format:

REASONING: a short comparison of the attempts

ATTEMPT 1: SCORE <a number from 0 to 1>
ATTEMPT 2: SCORE <a number from 0 to 1>
(one line per attempt, in order)

The last lines of your answer MUST be the score lines, one for every attempt."""

# "ATTEMPT 2: SCORE 0.75", also "**Attempt 2**: 0.75", "ATTEMPT #2 - score: 1": the last line of an attempt counts.
_SCORE_LINE = re.compile(
    r"^[\W_]*ATTEMPT\s*#?\s*(\d+)\s*\**\s*[:\-]\s*\**\s*(?:SCORE\s*\**\s*[:=]?\s*)?\**\s*(-?\d+(?:\.\d+)?|\.\d+)",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class GroupScores:
    """The judge's scores of one group of trajectories.

    Attributes:
        scores: One score in ``[0, 1]`` per trajectory, in order (all ``0.0`` when ``error`` is set).
        error: Why the judgement could not be read, ``None`` if it could.
        raw: The generated text(s) as received (``"votes"``: the first vote of each trajectory).
    """

    scores: tuple[float, ...]
    error: str | None = None
    raw: str = ""

    @property
    def ranks(self) -> tuple[int, ...]:
        """Each trajectory's rank in its group, 1 the best; equal scores share the better rank."""
        return tuple(1 + sum(other > score for other in self.scores) for score in self.scores)


def build_group_messages(requests: Sequence[JudgeRequest], max_axtree_chars: int = 0) -> Conversation:
    """The chat conversation asking for a score of every trajectory of one group (they share the goal)."""
    if not requests:
        raise ValueError("a group to judge needs at least one trajectory")
    per_attempt = max(MIN_ATTEMPT_AXTREE_CHARS, max_axtree_chars // len(requests)) if max_axtree_chars else 0
    attempts = [
        # format_judge_input's first line is the objective, shown once above the attempts.
        f"=== ATTEMPT {index} ===\n" + format_judge_input(request, per_attempt).split("\n", 1)[1]
        for index, request in enumerate(requests, start=1)
    ]
    user = f"OBJECTIVE: {requests[0].goal}\nNUMBER OF ATTEMPTS: {len(requests)}\n\n" + "\n\n".join(attempts)
    return [{"role": "system", "content": GROUP_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_group_scores(text: Any, count: int) -> GroupScores:
    """Read the ``ATTEMPT i: SCORE x`` lines of a listwise judgement of ``count`` attempts. Never raises.

    The last line of each attempt counts. Every attempt ``1..count`` needs a score in ``[0, 1]``, and
    no other attempt number may appear; otherwise every score is 0 and ``error`` says why.
    """
    raw = text if isinstance(text, str) else ""
    found: dict[int, float] = {}
    for number, value in _SCORE_LINE.findall(raw):
        found[int(number)] = float(value)
    failed = GroupScores((0.0,) * count, raw=raw)
    if not found:
        return dataclasses.replace(failed, error="no 'ATTEMPT i: SCORE x' line in the judge output")
    expected = set(range(1, count + 1))
    if set(found) != expected:
        missing, extra = sorted(expected - set(found)), sorted(set(found) - expected)
        return dataclasses.replace(failed, error=f"attempt scores missing {missing} or unknown {extra}")
    outside = {number: value for number, value in found.items() if not 0.0 <= value <= 1.0}
    if outside:
        return dataclasses.replace(failed, error=f"scores outside [0, 1]: {outside}")
    return GroupScores(tuple(found[number] for number in range(1, count + 1)), None, raw)


def judge_groups(
    judge: TrajectoryJudge, groups: Sequence[Sequence[JudgeRequest]], mode: str, seed: int | None = None
) -> list[GroupScores]:
    """Score every group with one batched backend call (none when there is nothing to score).

    Args:
        judge: The judge; with ``mode="votes"`` its ``votes`` (> 1) are sampled per trajectory.
        groups: The trajectories of each group (an empty group gets empty scores).
        mode: ``"votes"`` or ``"listwise"`` (:data:`GROUP_JUDGING_MODES`).
        seed: Sampling seed of the call.

    Raises:
        GenerationError: If the backend fails or returns a wrong number of generations.
        ValueError: For an unknown ``mode``.
    """
    if mode == "votes":
        flat = [request for group in groups for request in group]
        verdicts = iter(judge.judge(flat, seed=seed))
        scored = []
        for group in groups:
            mine = [next(verdicts) for _ in group]
            # A single verdict (votes=1) is its own score; an unreadable vote counts as FAILURE (tally_votes).
            scores = tuple(sum(v.votes) / len(v.votes) if v.votes else v.reward for v in mine)
            scored.append(GroupScores(scores, None, "\n---\n".join(v.raw for v in mine)))
        return scored
    if mode != "listwise":
        raise ValueError(f"group judging mode must be 'votes' or 'listwise', got {mode!r}")
    asked = [index for index, group in enumerate(groups) if group]
    conversations = [build_group_messages(groups[index], judge.max_axtree_chars) for index in asked]
    results = [GroupScores(()) for _ in groups]
    if not conversations:
        return results
    longest = max(len(groups[index]) for index in asked)
    params = dataclasses.replace(
        judge.sampling, seed=seed, max_new_tokens=judge.sampling.max_new_tokens + TOKENS_PER_ATTEMPT * longest
    )
    generations = judge.backend.generate(conversations, params)
    if len(generations) != len(conversations):
        raise GenerationError(f"backend returned {len(generations)} generations for {len(conversations)} prompts")
    for index, generation in zip(asked, generations, strict=True):
        results[index] = parse_group_scores(generation.text, len(groups[index]))
    return results


def request_from_dict(value: dict[str, Any]) -> JudgeRequest:
    """A :class:`JudgeRequest` from its ``dataclasses.asdict`` form (as it travels in an env's ``info``)."""
    steps = tuple(JudgeStep(**step) for step in value.get("steps", ()))
    return JudgeRequest(**{**value, "steps": steps})


__all__ = [
    "GROUP_JUDGE_SYSTEM_PROMPT",
    "GROUP_JUDGING_MODES",
    "GroupScores",
    "build_group_messages",
    "judge_groups",
    "parse_group_scores",
    "request_from_dict",
]
