"""The trajectory judge: the model-based self-assessment ``r̂(τ, q) ∈ {0, 1}`` that rewards dreams.

A dream has no ground-truth reward, so (as in the paper) an LLM reads the whole trajectory — the
task, every action with the agent's reasoning (not in the compact style of trained judges: a policy could
copy the wording that came with success), the final page, and the ``stop`` answer — and
decides whether the task was accomplished. The prompt follows the structure of the paper's prompts
(role, information given, output format) and asks for a last line ``VERDICT: SUCCESS`` or
``VERDICT: FAILURE``; anything else earns reward 0 with the problem recorded in
:attr:`JudgeVerdict.error`.

All verdicts of a batch come from one backend call (:meth:`TrajectoryJudge.judge`). With ``votes > 1``
the judge samples that many verdicts per trajectory (in the same call) and *abstains* unless they all
agree: self-consistency, so that a reward the judge is unsure of is withheld rather than guessed.

Prompt styles (:data:`~dynaweb_env.world_model.prompts.PROMPT_STYLES`): ``"paper"`` is
:data:`JUDGE_SYSTEM_PROMPT`, written in the paper's prompt structure for prompted models;
``"compact"`` is :data:`COMPACT_JUDGE_SYSTEM_PROMPT` with the bare verdict line as the trained target,
for judges trained with ``dynaweb-train-wm --examples judge --prompt_style compact``; ``"grounded"`` is
compact plus notes that state which of the objective's names the trajectory acted on and the final page shows
(:mod:`~dynaweb_env.world_model.grounding`), since a small judge does not match names by itself. ``"grounded-text"``
is grounded, and also shows (and grounds) an unnamed element acted on by the text it shows: a tree item
``[17] listitem ''`` reads ``text='Marcella'``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..llm.base import Conversation, Generation, GenerationBackend, GenerationError, SamplingParams
from ..observation import action_target, target_text_and_row, truncate_axtree
from .grounding import format_objective_elements, step_grounding
from .prompts import GROUNDED_STYLES, check_prompt_style, is_compact_style
from .requirements import unmet_objective

#: Default token budget of one verdict (reasoning plus the verdict line).
DEFAULT_JUDGE_MAX_NEW_TOKENS = 256
#: Default character budget of the final tree in the judge prompt.
DEFAULT_JUDGE_MAX_AXTREE_CHARS = 4000

JUDGE_SYSTEM_PROMPT = """\
You are an expert in evaluating the performance of a web navigation agent. The agent is designed to help a human \
user complete a task on a website. Given the user's objective, the agent's action history, the final state of the \
web page, and the agent's answer, your goal is to decide whether the agent accomplished the task.

Here's the information you'll have:

The user's objective: This is the task the agent was asked to complete.

The action history: The actions the agent performed, in order, each with the page element it acted on and the \
agent's reasoning for it when available.

The final web page's URL: This is the page the agent ended on.

The final web page's accessibility tree: This is a simplified representation of the final webpage, providing key \
information.

The agent's answer: The text the agent returned with `stop [answer]`, or "None" if the agent did not stop.

The task is accomplished only if the final web page or the agent's answer shows that every part of the objective \
was done. If the objective asks for information, the answer must contain it and be correct. Do not give credit for \
actions that were planned but not performed, or for an answer that the final web page does not support.

Generate your answer in the following format:

REASONING: your step-by-step reasoning about whether the objective was accomplished

VERDICT: SUCCESS or FAILURE

The last line of your answer MUST be either `VERDICT: SUCCESS` or `VERDICT: FAILURE`."""

#: The compact style's judge system prompt (for trained judges): the task and the output format.
COMPACT_JUDGE_SYSTEM_PROMPT = """\
Decide whether the web agent accomplished every part of the objective, judging by the final page and the \
agent's answer. The last line of your answer must be `VERDICT: SUCCESS` or `VERDICT: FAILURE`."""

# The verdict word must end its line, so an echo of the format line ("SUCCESS or FAILURE") never counts.
_VERDICT = re.compile(r"VERDICT\s*\**\s*:[\s`*]*(SUCCESS|FAILURE)[ \t`*.!]*$", re.IGNORECASE | re.MULTILINE)
_VERDICT_HEADER = re.compile(r"\**\s*VERDICT\s*\**\s*:", re.IGNORECASE)
_REASONING = re.compile(r"REASONING\s*\**\s*:\s*\**(.*?)(?=\**\s*VERDICT\s*\**\s*:|\Z)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class JudgeStep:
    """One action of a judged trajectory.

    Attributes:
        action: The action string, e.g. ``"click [12]"``.
        reasoning: The agent's reasoning for it (``""`` if unknown).
        target: The tree line of the element it acted on, in the page it was taken on, e.g.
            ``"[12] button 'Submit'"`` (``""`` for actions without an element, or unknown). A judge reading
            ``click [12]`` alone must find ``[12]`` in a page it is not shown.
            :func:`~dynaweb_env.observation.action_target` computes it.
        text: The text the element shows when it has no name, e.g. ``"Marcella"`` for ``[17] listitem ''``
            (``""`` otherwise, or unknown). :func:`~dynaweb_env.observation.target_text_and_row` computes it;
            only the ``"grounded-text"`` prompt style shows it.
        row: For an unnamed element that shows no text, the text before it in its row, e.g. ``"Zabrina Mi."`` for
            an inbox row's star ``[27] image ''`` (``""`` otherwise, or unknown).
            :func:`~dynaweb_env.observation.target_text_and_row` computes it; only ``"grounded-text"`` shows it.
    """

    action: str
    reasoning: str = ""
    target: str = ""
    text: str = ""
    row: str = ""


def judge_step(action: str, reasoning: str, axtree: str) -> JudgeStep:
    """The judge's record of ``action`` taken on the page ``axtree``: its target line and, for an unnamed
    element, the text it shows or else its row's text."""
    target = action_target(action, axtree)
    return JudgeStep(action, reasoning, target, *target_text_and_row(target, axtree))


@dataclass(frozen=True)
class JudgeRequest:
    """A whole trajectory to judge.

    Attributes:
        goal: The task query.
        steps: Every action taken, in order (for a dream from an intermediate start state: the
            recorded actions before it, then the dreamed ones).
        final_url: The URL of the last page.
        final_axtree: The accessibility tree of the last page.
        answer: The ``stop`` answer, or ``None`` if the trajectory ended without ``stop``.
        last_action_axtree: The page the last action other than ``stop`` was taken on (``""``: unknown), which the
            objective check reads where the final page no longer shows what was submitted (a saved event's time
            range).
    """

    goal: str
    steps: tuple[JudgeStep, ...] = field(default_factory=tuple)
    final_url: str = ""
    final_axtree: str = ""
    answer: str | None = None
    last_action_axtree: str = ""


@dataclass(frozen=True)
class JudgeVerdict:
    """The judge's decision on one trajectory.

    Attributes:
        reward: ``1.0`` for ``VERDICT: SUCCESS``, ``0.0`` otherwise (including unparsable output).
        reasoning: The ``REASONING:`` text (the whole output if that header is missing).
        raw: The generated text as received.
        error: Why the verdict could not be read, ``None`` if it could.
        votes: With self-consistency (``votes > 1``), every vote's reward in order; ``()`` otherwise.
        abstained: The votes split, so the judge gives no verdict (``reward`` is then ``0.0``).
        unmet: With ``objective_check``, the objective's explicit requirements a SUCCESS left undone
            (:func:`~dynaweb_env.world_model.requirements.unmet_objective`); the reward is then ``0.0``.
        success_probability: The judge's probability of SUCCESS (:func:`success_probability`), where the backend
            gives log-probs and a tokenizer; ``None`` where it does not. ``0.0`` when the objective check withheld
            a SUCCESS; the mean of the votes' with self-consistency.
    """

    reward: float
    reasoning: str
    raw: str = ""
    error: str | None = None
    votes: tuple[float, ...] = ()
    abstained: bool = False
    unmet: tuple[str, ...] = ()
    success_probability: float | None = None


def format_judge_input(
    request: JudgeRequest,
    max_axtree_chars: int = 0,
    reasons: bool = True,
    grounded: bool = False,
    element_text: bool = False,
) -> str:
    """The user message for one trajectory.

    Args:
        request: The trajectory.
        max_axtree_chars: Truncate the final tree to this many characters (``0``: whole).
        reasons: Show the agent's reasoning for each action. A judge trained on recorded trajectories must not
            read it: the policy writes it, and a recording's reasons tell its outcome apart (the scripted
            expert's "Every field holds its text; I click 'Submit'" against exploration's "Exploring: ..."),
            so a judge that reads them learns to grade the wording, which a policy can copy, not the page.
        grounded: Add the objective-grounding notes (:mod:`~dynaweb_env.world_model.grounding`): after each
            action, whether the element's name and the typed text are named in the objective; after the final
            tree, the final page's elements the objective names (from the whole tree, not the truncated one).
        element_text: Show an unnamed element's text (:attr:`JudgeStep.text`) on its ``ELEMENT`` line, as
            ``text='Marcella'``, or else its row's (:attr:`JudgeStep.row`), as ``row='Zabrina Mi.'``, and ground it
            by that text.
    """
    if request.steps:
        lines = []
        for index, step in enumerate(request.steps, start=1):
            lines.append(f"{index}. {step.action}")
            text, row = (step.text, step.row) if element_text else ("", "")
            if step.target:
                shown = f", text={text!r}" if text else f", row={row!r}" if row else ""
                lines.append(f"   ELEMENT: {step.target}{shown}")
            if grounded and (note := step_grounding(step.action, step.target, request.goal, text, row)):
                lines.append(f"   {note}")
            if reasons and step.reasoning.strip():
                lines.append(f"   REASON: {step.reasoning.strip()}")
        history = "\n".join(lines)
    else:
        history = "None"
    answer = "None" if request.answer is None else (request.answer or "(empty)")
    grounding = (
        f"OBJECTIVE'S ELEMENTS ON THE FINAL PAGE:\n{format_objective_elements(request.final_axtree, request.goal)}\n"
        if grounded
        else ""
    )
    return (
        f"OBJECTIVE: {request.goal}\n"
        f"ACTION HISTORY:\n{history}\n"
        f"FINAL URL: {request.final_url}\n"
        f"FINAL ACCESSIBILITY TREE:\n{truncate_axtree(request.final_axtree, max_axtree_chars)}\n"
        f"{grounding}"
        f"AGENT ANSWER: {answer}"
    )


def judge_system_prompt(prompt_style: str = "paper") -> str:
    """The judge's system message in this style: :data:`JUDGE_SYSTEM_PROMPT` (``"paper"``) or
    :data:`COMPACT_JUDGE_SYSTEM_PROMPT` (``"compact"`` and ``"grounded"``)."""
    return COMPACT_JUDGE_SYSTEM_PROMPT if is_compact_style(prompt_style) else JUDGE_SYSTEM_PROMPT


def build_judge_messages(request: JudgeRequest, max_axtree_chars: int = 0, prompt_style: str = "paper") -> Conversation:
    """The chat conversation asking for a verdict on one trajectory.

    The compact and grounded styles (trained judges) leave out the agent's reasoning (see
    :func:`format_judge_input`); the paper style shows it, as the paper's judge reads it. The grounded styles add
    the objective-grounding notes, and ``"grounded-text"`` an unnamed element's text.
    """
    user = format_judge_input(
        request,
        max_axtree_chars,
        reasons=not is_compact_style(prompt_style),
        grounded=prompt_style in GROUNDED_STYLES,
        element_text=prompt_style == "grounded-text",
    )
    return [{"role": "system", "content": judge_system_prompt(prompt_style)}, {"role": "user", "content": user}]


# What a trained judge writes (``dynaweb-train-wm --examples judge``): one fixed sentence per outcome, so the
# verdict is decided at the sentence's first differing word and costs ~25 tokens, not a free-form essay that a
# 135M model cannot write reliably. Both keep the prompt's output format.
JUDGE_TARGETS = {
    True: "REASONING: The action history and the final web page show that every part of the objective was done."
    "\n\nVERDICT: SUCCESS",
    False: "REASONING: The action history and the final web page do not show that every part of the objective was "
    "done.\n\nVERDICT: FAILURE",
}


#: What a judge trained on compact prompts writes: the verdict line alone (~5 tokens).
COMPACT_JUDGE_TARGETS = {True: "VERDICT: SUCCESS", False: "VERDICT: FAILURE"}


def format_judge_target(success: bool, prompt_style: str = "paper") -> str:
    """The output a trained judge learns for a trajectory with this outcome (it parses back to the same verdict)."""
    targets = COMPACT_JUDGE_TARGETS if is_compact_style(prompt_style) else JUDGE_TARGETS
    return targets[bool(success)]


def parse_judge_output(text: str) -> JudgeVerdict:
    """Read a verdict; the *last* ``VERDICT:`` line counts. Never raises."""
    raw = text if isinstance(text, str) else ""
    verdicts = _VERDICT.findall(raw)
    reasoning_match = _REASONING.search(raw)
    reasoning = (reasoning_match.group(1) if reasoning_match else _VERDICT_HEADER.split(raw)[0]).strip(" \t\n*")
    if not verdicts:
        return JudgeVerdict(0.0, reasoning, raw, "no 'VERDICT: SUCCESS|FAILURE' line in the judge output")
    return JudgeVerdict(1.0 if verdicts[-1].upper() == "SUCCESS" else 0.0, reasoning, raw, None)


def success_probability(generation: Generation, verdict: JudgeVerdict, tokenizer: Any) -> float | None:
    """The judge's probability of SUCCESS, read from the log-prob of the token that decided its verdict word.

    The verdict word's first token (``" SU"`` of ``" SUCCESS"``, ``" FA"`` of ``" FAILURE"``) is where the two
    outcomes part; its probability ``p`` is the judge's confidence, and the rest of the mass is taken to be the
    other verdict's: ``p`` for SUCCESS, ``1 - p`` for FAILURE. Unlike the 0/1 reward, it ranks two trajectories
    the judge gives the same verdict.

    Returns:
        The probability, or ``None`` when the verdict is unreadable or the generation carries no log-probs or
        token ids (or no tokenizer is given).
    """
    ids, logprobs = generation.completion_ids, generation.logprobs
    if verdict.error or tokenizer is None or not ids or len(logprobs) != len(ids):
        return None
    matches = list(_VERDICT.finditer(generation.text))
    if not matches:
        return None
    word_start = matches[-1].start(1)
    for index in range(len(ids)):
        if len(tokenizer.decode(ids[: index + 1], skip_special_tokens=True)) > word_start:
            chosen = math.exp(min(0.0, float(logprobs[index])))
            return chosen if verdict.reward >= 0.5 else 1.0 - chosen
    return None


def check_success_threshold(value: Any, name: str, also: str = "") -> None:
    """``ValueError`` unless ``value`` is ``None`` or a number in ``(0, 1)`` (or the sentinel ``also``)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None or (also and value == also) or (number and 0 < value < 1):
        return
    allowed = f"{also!r}, None" if also else "None"
    raise ValueError(f"{name} must be {allowed} or in (0, 1), got {value!r}")


def apply_success_threshold(reward: float, probability: float | None, threshold: float | None) -> float:
    """The reward a verdict pays at a success threshold: ``1.0`` where ``P(SUCCESS) >= threshold``, else ``0.0``.

    ``threshold=None``, or a verdict without a probability (an unreadable one, or a backend without log-probs), keeps
    the verdict word's ``reward``.
    """
    if threshold is None or probability is None:
        return reward
    return 1.0 if probability >= threshold else 0.0


class TrajectoryJudge:
    """Scores whole trajectories with an LLM, in batches.

    Args:
        backend: Any :class:`~dynaweb_env.llm.base.GenerationBackend`.
        sampling: Sampling parameters (default: greedy, :data:`DEFAULT_JUDGE_MAX_NEW_TOKENS` tokens):
            a judge should not flip its verdict from one call to the next.
        max_axtree_chars: Character budget of the final tree in the prompt (``0``: no limit).
        prompt_style: ``"paper"`` (default, for prompted models), ``"compact"`` or ``"grounded"`` (for a judge
            trained on those prompts; :func:`~dynaweb_env.models.model_prompt_style` says which a trained judge
            needs).
        votes: Verdicts sampled per trajectory (self-consistency). ``1`` (default): one verdict with
            ``sampling``. ``K > 1``: ``K`` verdicts at ``vote_temperature`` in the same backend call; the
            judge abstains (:attr:`JudgeVerdict.abstained`, reward 0) unless all ``K`` agree.
        vote_temperature: Sampling temperature of the votes (greedy votes would always agree).
        objective_check: Withhold a SUCCESS whose trajectory left one of the objective's explicit requirements
            undone (quoted text typed nowhere, a named checkbox unchecked:
            :func:`~dynaweb_env.world_model.requirements.unmet_objective`): reward 0, :attr:`JudgeVerdict.unmet`.
        success_threshold: Pay a verdict whose ``P(SUCCESS)`` is at least this (:func:`apply_success_threshold`),
            before the votes are tallied and the objective check vetoes. ``None`` (default): the verdict word, as
            generated. A trained judge records the threshold chosen for it
            (:func:`~dynaweb_env.models.model_success_threshold`; ``benchmarks/judge_threshold.py``).
    """

    def __init__(
        self,
        backend: GenerationBackend,
        sampling: SamplingParams | None = None,
        max_axtree_chars: int = DEFAULT_JUDGE_MAX_AXTREE_CHARS,
        prompt_style: str = "paper",
        votes: int = 1,
        vote_temperature: float = 0.7,
        objective_check: bool = False,
        success_threshold: float | None = None,
    ):
        check_success_threshold(success_threshold, "success_threshold")
        if not callable(getattr(backend, "generate", None)):
            raise ValueError(f"backend must implement GenerationBackend.generate, got {type(backend).__name__}")
        if max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {max_axtree_chars}")
        if isinstance(votes, bool) or not isinstance(votes, int) or votes < 1:
            raise ValueError(f"votes must be a positive integer, got {votes!r}")
        if votes > 1 and not vote_temperature > 0:
            raise ValueError(
                f"vote_temperature must be > 0 when votes > 1 (greedy votes agree), got {vote_temperature}"
            )
        self.backend = backend
        self.sampling = sampling or SamplingParams(temperature=0.0, max_new_tokens=DEFAULT_JUDGE_MAX_NEW_TOKENS)
        self.max_axtree_chars = max_axtree_chars
        self.prompt_style = check_prompt_style(prompt_style)
        self.votes = votes
        self.vote_temperature = vote_temperature
        self.objective_check = bool(objective_check)
        self.success_threshold = None if success_threshold is None else float(success_threshold)

    def judge(self, requests: Sequence[JudgeRequest], seed: int | None = None) -> list[JudgeVerdict]:
        """Judge every trajectory with one batched backend call (none for an empty batch).

        With ``votes > 1`` each trajectory's verdict is the unanimous vote of its ``votes`` samples, or an
        abstention (:attr:`JudgeVerdict.abstained`) when they split.

        Raises:
            GenerationError: If the backend fails or returns a wrong number of generations.
        """
        if not requests:
            return []
        params = dataclasses.replace(self.sampling, seed=seed)
        if self.votes > 1:
            params = dataclasses.replace(params, temperature=self.vote_temperature)
        conversations = [
            build_judge_messages(request, self.max_axtree_chars, self.prompt_style)
            for request in requests
            for _ in range(self.votes)
        ]
        generations = self.backend.generate(conversations, params)
        if len(generations) != len(conversations):
            raise GenerationError(f"backend returned {len(generations)} generations for {len(conversations)} prompts")
        verdicts = []
        tokenizer = getattr(self.backend, "tokenizer", None)
        for generation in generations:
            verdict = parse_judge_output(generation.text)
            if verdict.error and generation.finish_reason == "length":
                verdict = dataclasses.replace(verdict, error=verdict.error + " (generation hit the token limit)")
            probability = success_probability(generation, verdict, tokenizer)
            reward = apply_success_threshold(verdict.reward, probability, self.success_threshold)
            if reward != verdict.reward:  # say why the reward is not the verdict word's
                word = "SUCCESS" if verdict.reward >= 0.5 else "FAILURE"
                relation = ">=" if reward >= 0.5 else "<"
                note = f"P(SUCCESS) {probability:.2f} {relation} threshold {self.success_threshold}"
                note += f" (the verdict said {word})"
                reasoning = f"{note}: {verdict.reasoning}" if verdict.reasoning else note
                verdict = dataclasses.replace(verdict, reasoning=reasoning)
            verdicts.append(dataclasses.replace(verdict, reward=reward, success_probability=probability))
        if self.votes > 1:
            verdicts = [tally_votes(verdicts[i : i + self.votes]) for i in range(0, len(verdicts), self.votes)]
        if self.objective_check:
            verdicts = [check_objective(request, verdict) for request, verdict in zip(requests, verdicts, strict=True)]
        return verdicts

    def __repr__(self) -> str:
        name = getattr(self.backend, "model_name", type(self.backend).__name__)
        check = ", objective_check=True" if self.objective_check else ""
        threshold = "" if self.success_threshold is None else f", success_threshold={self.success_threshold}"
        return f"TrajectoryJudge({name!r}, prompt_style={self.prompt_style!r}, votes={self.votes}{check}{threshold})"


def check_objective(request: JudgeRequest, verdict: JudgeVerdict) -> JudgeVerdict:
    """A SUCCESS withheld (reward 0, :attr:`JudgeVerdict.unmet`) when the trajectory left an explicit requirement of
    its objective undone; any other verdict as it is."""
    if verdict.reward < 0.5:
        return verdict
    actions = [step.action for step in request.steps]
    targets = [step.target for step in request.steps]
    shown = [(step.text, step.row) for step in request.steps]
    unmet = unmet_objective(request.goal, actions, targets, request.final_axtree, shown, request.last_action_axtree)
    if not unmet:
        return verdict
    reasoning = f"SUCCESS withheld: {'; '.join(unmet)} (the judge said: {verdict.reasoning})"
    withheld = None if verdict.success_probability is None else 0.0
    return dataclasses.replace(
        verdict, reward=0.0, reasoning=reasoning, unmet=tuple(unmet), success_probability=withheld
    )


def tally_votes(votes: Sequence[JudgeVerdict]) -> JudgeVerdict:
    """One verdict from several sampled ones: the first vote if all rewards agree, else an abstention.

    An unreadable vote counts as FAILURE, as a lone unreadable verdict does.
    """
    rewards = tuple(vote.reward for vote in votes)
    probabilities = [vote.success_probability for vote in votes]
    mean = None if None in probabilities else sum(probabilities) / len(probabilities)  # type: ignore[arg-type]
    if len(set(rewards)) == 1:
        return dataclasses.replace(votes[0], votes=rewards, success_probability=mean)
    successes = sum(reward >= 0.5 for reward in rewards)
    reasoning = f"the judge abstained: {successes} of {len(rewards)} votes said SUCCESS"
    return JudgeVerdict(0.0, reasoning, votes[0].raw, None, rewards, True, success_probability=mean)


__all__ = [
    "DEFAULT_JUDGE_MAX_NEW_TOKENS",
    "DEFAULT_JUDGE_MAX_AXTREE_CHARS",
    "JUDGE_SYSTEM_PROMPT",
    "COMPACT_JUDGE_SYSTEM_PROMPT",
    "COMPACT_JUDGE_TARGETS",
    "JudgeStep",
    "JudgeRequest",
    "JudgeVerdict",
    "JUDGE_TARGETS",
    "TrajectoryJudge",
    "apply_success_threshold",
    "check_success_threshold",
    "build_judge_messages",
    "check_objective",
    "judge_system_prompt",
    "tally_votes",
    "format_judge_input",
    "judge_step",
    "format_judge_target",
    "parse_judge_output",
    "success_probability",
]
