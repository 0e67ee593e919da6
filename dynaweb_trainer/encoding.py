"""The one multi-turn token encoding of an episode, shared by rollouts, expert interleaving and SFT.

A web episode is one growing chat conversation (see :mod:`dynaweb_env.agent`)::

    system     policy system prompt
    user       first observation                  ┐ prompt_ids (chat template + generation prompt)
    assistant  turn 1 (sampled / expert)          ┐
    user       second observation                 │ completion_ids, with
    assistant  turn 2                             │ env_mask = 1 on assistant tokens
    ...                                           ┘          = 0 on observation tokens

``prompt_ids`` is the chat template of ``[system, first user observation]`` with the generation
prompt. Then, for every turn, the assistant's completion tokens (``env_mask`` 1) are followed by
the *observation turn*: the chat-template text between the end of an assistant message and the
next assistant generation prompt (for ChatML,
``"\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n"``), tokenized on its own
(``env_mask`` 0). The tokens a trainer optimises are therefore exactly the tokens the policy
sampled, and the tokens it conditions on are exactly the tokens it saw while sampling.

Boundary handling (documented, tested in ``tests/test_encoding.py``):

- An assistant turn ends with the EOS token, as a sampled turn that stopped normally does. A chat
  template renders some text *after* EOS (ChatML: ``"\\n"``); that text belongs to the next
  observation turn, and after the final turn it is not encoded at all.
- A sampled turn cut by ``max_new_tokens`` has no EOS; before the next observation turn an EOS is
  appended with ``env_mask`` 0 (the policy did not sample it, so it is not trained on).
- Observation turns are computed by rendering a minimal dummy conversation with and without the new
  user message and slicing after the last EOS, as TRL does for tool results, so any chat template
  that renders past turns unchanged works.

With ``page_history="actions"`` an episode is not one sequence: every turn has a prompt of its own,
``[system, user(latest page whole + the actions so far)]`` with the generation prompt
(:func:`dynaweb_env.agent.observation_actions_message`), so a long task's prompt stays bounded.
``completion_ids`` then holds the assistant turns alone, ``turn_prompts`` each turn's prompt, and
:meth:`EncodedEpisode.turns` gives the ``(prompt, answer)`` pairs SFT trains on; ``input_ids`` is always
the prompt the policy answers next.

Expert demonstrations (:func:`encode_expert_trajectory`) go through the same
:class:`EpisodeEncoder`: each expert step becomes ``format_policy_response(reasoning, action)`` +
EOS, i.e. exactly the tokens a policy that had sampled those words would have produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dynaweb_env.agent import (
    POLICY_SYSTEM_PROMPT,
    check_page_history,
    format_policy_response,
    initial_conversation,
    observation_actions_message,
    observation_edits_message,
    observation_message,
)
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.observation import make_observation

#: Log-probability recorded for tokens whose sampling probability is unknown (expert turns). TRL
#: 1.16 treats NaN sampling log-probs as "no correction" (importance ratio 1) in its vLLM
#: importance-sampling and off-policy-mask code, which is what an expert turn needs.
UNKNOWN_LOGPROB = float("nan")


@dataclass
class EncodedEpisode:
    """Token-level form of one episode, in the layout TRL's ``rollout_func`` returns.

    Attributes:
        prompt_ids: Chat template of ``[system, first observation]`` with the generation prompt.
        completion_ids: Every assistant turn and observation turn after the prompt, concatenated.
        env_mask: Aligned with ``completion_ids``: 1 on tokens the policy produced (trained on), 0 on
            observation-turn tokens (and on EOS tokens appended after a truncated turn).
        logprobs: Aligned with ``completion_ids``: the sampling log-probability of each policy token,
            ``0.0`` on env tokens, :data:`UNKNOWN_LOGPROB` (NaN) where the policy did not sample the
            token (expert turns).
        turn_spans: ``(start, end)`` index ranges of the assistant turns inside ``completion_ids``.
        turn_prompts: With a prompt of its own each turn (``page_history="actions"``): every turn's prompt in order,
            the last one that of the turn the policy answers next; empty for one growing conversation.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_prompts: list[list[int]] = field(default_factory=list)
    #: The last page encoded (its tree): what an ``"edits"`` history writes the next page against.
    page: str = field(default="", repr=False, compare=False)
    #: The actions taken so far, as the env reported them (``last_action``): an ``"actions"`` history lists them.
    actions: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def per_turn(self) -> bool:
        """Whether each turn has a prompt of its own (``page_history="actions"``)."""
        return bool(self.turn_prompts)

    @property
    def num_turns(self) -> int:
        return len(self.turn_spans)

    @property
    def num_policy_tokens(self) -> int:
        """Tokens the loss is computed on (``env_mask`` 1)."""
        return sum(self.env_mask)

    @property
    def input_ids(self) -> list[int]:
        """The prompt of the policy's next turn: ``prompt_ids + completion_ids`` (the whole episode as the model reads
        it), or with a prompt each turn the last of ``turn_prompts``."""
        return list(self.turn_prompts[-1]) if self.turn_prompts else self.prompt_ids + self.completion_ids

    def turns(self) -> list[tuple[list[int], list[int]]]:
        """``(prompt, answer)`` token ids of every assistant turn: its own prompt with a prompt each turn, else the
        episode up to that turn."""
        full = self.prompt_ids + self.completion_ids
        return [
            (
                list(self.turn_prompts[index]) if self.turn_prompts else full[: len(self.prompt_ids) + start],
                self.completion_ids[start:end],
            )
            for index, (start, end) in enumerate(self.turn_spans)
        ]

    def add_policy_turn(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        """Append one assistant turn (tokens as sampled, ending with EOS if it stopped normally)."""
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise ValueError(f"logprobs ({len(logprobs)}) must align with token_ids ({len(token_ids)})")
        start = len(self.completion_ids)
        self.completion_ids.extend(int(token) for token in token_ids)
        self.env_mask.extend([1] * len(token_ids))
        if logprobs is None:
            self.logprobs.extend([UNKNOWN_LOGPROB] * len(token_ids))
        else:
            self.logprobs.extend(float(value) for value in logprobs)
        self.turn_spans.append((start, len(self.completion_ids)))

    def add_env_tokens(self, token_ids: Sequence[int]) -> None:
        """Append tokens the policy did not produce (observation turns, closing EOS): ``env_mask`` 0."""
        self.completion_ids.extend(int(token) for token in token_ids)
        self.env_mask.extend([0] * len(token_ids))
        self.logprobs.extend([0.0] * len(token_ids))

    def policy_turn_ids(self) -> list[list[int]]:
        """The token ids of each assistant turn."""
        return [self.completion_ids[start:end] for start, end in self.turn_spans]

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids),
            "env_mask": list(self.env_mask),
            "logprobs": list(self.logprobs),
            **({"turn_prompts": [list(prompt) for prompt in self.turn_prompts]} if self.turn_prompts else {}),
        }


class EpisodeEncoder:
    """Turns observations and responses into the token layout of :class:`EncodedEpisode`.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template and an EOS token.
        system_prompt: The policy system prompt (:func:`dynaweb_env.agent.policy_system_prompt`).
        max_axtree_chars: Cut accessibility trees longer than this many characters with
            :func:`dynaweb_env.observation.truncate_axtree` (``0``: never cut).
        page_history: ``"full"`` writes every page whole; ``"edits"`` writes each page after the first as the edits
            of the page before where that is shorter (:func:`dynaweb_env.agent.observation_edits_message`), which
            keeps long tasks' episodes within a completion budget; ``"actions"`` gives every turn a prompt of its own
            (the latest page whole, the actions so far listed), bounded however long the episode. A policy is
            evaluated with the history it was trained with.

    Example:
        >>> encoder = EpisodeEncoder(tokenizer)
        >>> episode = encoder.start(first_observation)
        >>> episode.add_policy_turn(sampled_ids, sampled_logprobs)
        >>> encoder.add_observation(episode, next_observation)
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str = POLICY_SYSTEM_PROMPT,
        max_axtree_chars: int = 0,
        page_history: str = "full",
    ):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; multi-turn encoding needs one to end assistant turns")
        if max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {max_axtree_chars}")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.max_axtree_chars = max_axtree_chars
        self.page_history = check_page_history(page_history)
        self.eos_token_id: int = tokenizer.eos_token_id
        self._dummy_prefix_ids: list[int] | None = None

    # -- chat template ---------------------------------------------------------------------------
    def _template_ids(self, conversation: list[dict[str, str]], add_generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
        )
        if ids and isinstance(ids[0], list):  # some processors return a batch of one
            ids = ids[0]
        return [int(token) for token in ids]

    def _dummy_conversation(self) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt[:16] or "system"},
            {"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "dummy"},
        ]

    def _prefix_ids(self) -> list[int]:
        if self._dummy_prefix_ids is None:
            prefix = self._template_ids(self._dummy_conversation(), add_generation_prompt=False)
            eos_positions = [index for index, token in enumerate(prefix) if token == self.eos_token_id]
            if not eos_positions:
                raise ValueError("the chat template does not end assistant messages with the EOS token")
            self._dummy_prefix_ids = prefix[: eos_positions[-1] + 1]
        return self._dummy_prefix_ids

    # -- public API ------------------------------------------------------------------------------
    def conversation(self, observation: dict[str, str]) -> list[dict[str, str]]:
        """The first-step conversation ``[system, user(observation)]``."""
        return initial_conversation(observation, self.system_prompt, self.max_axtree_chars)

    def prompt_ids(self, observation: dict[str, str]) -> list[int]:
        """Chat template of ``[system, first observation]`` with the generation prompt."""
        return self._template_ids(self.conversation(observation), add_generation_prompt=True)

    @property
    def per_turn(self) -> bool:
        """Whether every turn has a prompt of its own (``page_history="actions"``)."""
        return self.page_history == "actions"

    def start(self, observation: dict[str, str], history: Sequence[str] = ()) -> EncodedEpisode:
        """A new episode whose prompt is the first observation.

        Args:
            observation: The first page.
            history: The actions taken before it, when the episode starts mid-way (DreamWeb-v0's
                ``start_history``). With a prompt each turn they open the list of previous actions, so a dream
                that starts mid-way reads as the later turns of a recorded episode do; where none are given, the
                page's ``last_action`` stands for them. Growing conversations show ``last_action`` alone.
        """
        if not self.per_turn:
            return EncodedEpisode(prompt_ids=self.prompt_ids(observation), page=observation["axtree"])
        actions = list(history) or ([observation["last_action"]] if observation.get("last_action") else [])
        prompt = self.turn_prompt_ids(observation, actions)
        return EncodedEpisode(prompt_ids=prompt, turn_prompts=[prompt], actions=actions, page=observation["axtree"])

    def turn_prompt_ids(self, observation: dict[str, str], actions: Sequence[str]) -> list[int]:
        """A turn's own prompt: ``[system, user(page + actions so far)]`` with the generation prompt."""
        message = observation_actions_message(observation, actions, self.max_axtree_chars)
        conversation = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": message}]
        return self._template_ids(conversation, add_generation_prompt=True)

    def observation_turn_ids(self, observation: dict[str, str], previous_page: str | None = None) -> list[int]:
        """Tokens between the EOS ending an assistant turn and the next assistant generation prompt (with an
        ``"edits"`` history and the page before given, the page is written against it)."""
        if self.page_history == "edits" and previous_page is not None:
            text = observation_edits_message(previous_page, observation, self.max_axtree_chars)
        else:
            text = observation_message(observation, self.max_axtree_chars)
        message = {"role": "user", "content": text}
        full = self._template_ids([*self._dummy_conversation(), message], add_generation_prompt=True)
        prefix = self._prefix_ids()
        if full[: len(prefix)] != prefix:
            raise ValueError(
                "unexpected chat template: the EOS-trimmed prefix is not a prefix of the full conversation"
            )
        return full[len(prefix) :]

    def response_ids(self, response: str) -> list[int]:
        """An assistant turn written as text (expert demonstrations): its tokens followed by EOS."""
        return [*self.tokenizer.encode(response, add_special_tokens=False), self.eos_token_id]

    def observation_tokens(self, episode: EncodedEpisode, observation: dict[str, str]) -> list[int]:
        """The env tokens :meth:`add_observation` would append: a closing EOS after a truncated turn, then the turn
        (with a prompt each turn: the next turn's whole prompt)."""
        if episode.per_turn:
            return self.turn_prompt_ids(observation, [*episode.actions, observation.get("last_action", "")])
        closing = (
            [self.eos_token_id] if episode.completion_ids and episode.completion_ids[-1] != self.eos_token_id else []
        )
        return closing + self.observation_turn_ids(observation, episode.page)

    def add_observation(
        self, episode: EncodedEpisode, observation: dict[str, str], tokens: Sequence[int] | None = None
    ) -> None:
        """Close the last assistant turn if it was truncated, then append the observation turn (``tokens``: what
        :meth:`observation_tokens` returned for it, when the caller already has them). With a prompt each turn, the
        next turn's prompt is added to ``turn_prompts`` instead."""
        tokens = self.observation_tokens(episode, observation) if tokens is None else tokens
        if episode.per_turn:
            episode.turn_prompts.append(list(tokens))
        else:
            episode.add_env_tokens(tokens)
        episode.actions.append(observation.get("last_action", ""))
        episode.page = observation["axtree"]

    def decode_turn(self, token_ids: Sequence[int]) -> str:
        """The text of a sampled turn (special tokens removed), from which the action is extracted."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def trajectory_observations(trajectory: Trajectory) -> list[dict[str, str]]:
    """The observation the policy saw before each step of a trajectory (shared observation format)."""
    observations = []
    for index, step in enumerate(trajectory.steps):
        last_action = trajectory.steps[index - 1].action if index > 0 else ""
        observations.append(
            make_observation(trajectory.goal, step.url, step.axtree, last_action, step.last_action_error)
        )
    return observations


def encode_expert_trajectory(
    tokenizer: Any | EpisodeEncoder,
    trajectory: Trajectory,
    system_prompt: str = POLICY_SYSTEM_PROMPT,
    max_axtree_chars: int = 0,
    max_turns: int | None = None,
) -> EncodedEpisode:
    """Encode an expert trajectory exactly as a policy rollout of the same actions would be encoded.

    Each step with an action becomes one assistant turn ``format_policy_response(reasoning,
    action)`` + EOS; the observation of each later step becomes an observation turn. Steps after the
    last action (a final page without one) are not encoded. Expert tokens carry
    :data:`UNKNOWN_LOGPROB` log-probabilities.

    Args:
        tokenizer: The policy tokenizer, or an :class:`EpisodeEncoder` (then ``system_prompt`` and
            ``max_axtree_chars`` are taken from it).
        trajectory: The demonstration.
        system_prompt: The policy system prompt.
        max_axtree_chars: Tree cut, as for policy rollouts (``0``: never cut).
        max_turns: Encode at most this many steps (the agent's step limit), ``None`` for all.

    Raises:
        ValueError: If the trajectory has no step with an action.
    """
    encoder = (
        tokenizer
        if isinstance(tokenizer, EpisodeEncoder)
        else EpisodeEncoder(tokenizer, system_prompt, max_axtree_chars)
    )
    steps = [
        (step, observation)
        for step, observation in zip(trajectory.steps, trajectory_observations(trajectory), strict=False)
    ]
    while steps and not steps[-1][0].action:
        steps.pop()
    if max_turns is not None:
        steps = steps[:max_turns]
    if not steps:
        raise ValueError(f"trajectory {trajectory.id!r} has no step with an action")
    episode = encoder.start(steps[0][1])
    for index, (step, observation) in enumerate(steps):
        if index > 0:
            encoder.add_observation(episode, observation)
        episode.add_policy_turn(encoder.response_ids(format_policy_response(step.reasoning, step.action)))
    return episode


__all__ = [
    "UNKNOWN_LOGPROB",
    "EncodedEpisode",
    "EpisodeEncoder",
    "trajectory_observations",
    "encode_expert_trajectory",
]
