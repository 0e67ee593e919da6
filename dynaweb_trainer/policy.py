"""The one policy interface of :func:`~dynaweb_trainer.rollout.run_episodes`, its implementations, and loading.

Each turn, the rollout loop hands a policy one :class:`PolicyTurn` per live episode: the latest
observation, the env's ``info`` and the episode encoded so far. A policy answers each with a
:class:`~dynaweb_env.llm.base.Generation`. An LLM policy (:class:`GenerationPolicy`) reads the token
ids; a scripted one (:class:`ScriptedExpertPolicy`) reads the observation. Nothing has to watch the
env on the side to tell a scripted policy which page a prompt belongs to.

:func:`load_policy` turns one reference, as written on a command line, into a policy plus the
tokenizer the episode encoding needs:

==================================  ===================================================================
``--policy``                        what is loaded
==================================  ===================================================================
``smollm2-135m``, ``tiny-random``   an embedded model (:mod:`dynaweb_env.models`)
``runs/sft`` (has ``config.json``)  a full checkpoint: SFT with ``use_peft=False``, or an RL run
``runs/sft`` (``adapter_config``)   a LoRA adapter: its base model (``base_model_name_or_path``) plus
                                    the adapter, merged for fast decoding
``outputs/run`` (``checkpoint-*``)  the latest complete checkpoint inside a training output directory
``openai:<model>@<url>``, ...       any other :func:`dynaweb_env.llm.make_backend` spec
``expert``                          the scripted experts (:mod:`dynaweb_env.experts`)
==================================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dynaweb_env.agent import format_policy_response
from dynaweb_env.llm.base import Conversation, Generation, GenerationBackend, SamplingParams

from .encoding import EncodedEpisode
from .model_loading import PolicyLoadError, load_model_and_tokenizer, resolve_checkpoint_dir

#: The ``--policy`` value that selects the scripted experts.
EXPERT_POLICY = "expert"


@dataclass
class PolicyTurn:
    """What a policy is given for one live episode at one turn.

    Attributes:
        observation: The latest observation (the shared ``goal/url/axtree/last_action/...`` dict).
        info: The env's ``info`` of the latest reset or step of this episode (``task_id``, ...).
        encoded: The episode's tokens so far; ``encoded.input_ids`` is the prompt of this turn.
        options: The reset options that started the episode (``task``, ``task_seed``, ``start_state``).
    """

    observation: dict[str, str]
    info: dict[str, Any]
    encoded: EncodedEpisode
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def turn(self) -> int:
        """Turns the policy has already taken in this episode."""
        return self.encoded.num_turns


@runtime_checkable
class Policy(Protocol):
    """Answers every live episode of a turn at once: one :class:`Generation` per :class:`PolicyTurn`.

    A generation must carry ``completion_ids`` (the tokens appended to the episode) and, when known,
    their sampling ``logprobs``.
    """

    model_name: str

    def act(self, turns: Sequence[PolicyTurn], sampling: SamplingParams) -> list[Generation]: ...


class GenerationPolicy:
    """An LLM policy: each episode's token ids go to a batched backend (token-in, token-out).

    Args:
        backend: Any :class:`~dynaweb_env.llm.base.GenerationBackend` whose ``generate_from_ids``
            returns completion ids (and log-probabilities for training).
    """

    def __init__(self, backend: GenerationBackend):
        self.backend = backend
        self.model_name = str(getattr(backend, "model_name", "model"))

    def act(self, turns: Sequence[PolicyTurn], sampling: SamplingParams) -> list[Generation]:
        return self.backend.generate_from_ids([turn.encoded.input_ids for turn in turns], sampling)


def as_policy(policy: Policy | GenerationBackend) -> Policy:
    """``policy`` itself, or a backend wrapped in :class:`GenerationPolicy`."""
    return policy if isinstance(policy, Policy) else GenerationPolicy(policy)


class ScriptedPolicy:
    """A policy written as a function from one :class:`PolicyTurn` to a response text.

    The text (``REASON: ...\\nACTION: ...``) is tokenized as an expert demonstration is
    (:meth:`~dynaweb_trainer.encoding.EpisodeEncoder.response_ids`: its tokens plus EOS), so the
    episode's tokens are those a model writing the same words would have produced.

    Args:
        tokenizer: The tokenizer of the episode encoding.
        respond: ``turn -> response text``.
        model_name: Its name in results.
    """

    def __init__(
        self, tokenizer: Any, respond: Callable[[PolicyTurn], str] | None = None, model_name: str = "scripted"
    ):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; a scripted turn ends with one")
        self.tokenizer, self.model_name = tokenizer, model_name
        if respond is not None:
            self.respond = respond  # type: ignore[method-assign]

    def respond(self, turn: PolicyTurn) -> str:
        raise NotImplementedError

    def act(self, turns: Sequence[PolicyTurn], sampling: SamplingParams) -> list[Generation]:
        """Answer each turn with :meth:`respond` (``sampling`` is ignored: scripts do not sample)."""
        generations = []
        for turn in turns:
            text = self.respond(turn)
            completion = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            generations.append(Generation(text, turn.encoded.input_ids, completion, [0.0] * len(completion), "stop"))
        return generations


class ScriptedExpertPolicy(ScriptedPolicy):
    """The scripted experts: the expert of each episode's task (``info["task_id"]``) reads its page.

    An expert that does not recognise the page (:class:`~dynaweb_env.experts.ExpertError`) answers
    ``stop [N/A]`` with the reason, so the episode ends as a failure instead of crashing an evaluation.

    Args:
        tokenizer: The tokenizer of the episode encoding.
        experts: Task id -> expert (default: every registered expert).
    """

    def __init__(self, tokenizer: Any, experts: Mapping[str, Any] | None = None):
        super().__init__(tokenizer, model_name=EXPERT_POLICY)
        if experts is None:
            from dynaweb_env.experts import EXPERTS

            experts = EXPERTS
        self.experts = experts

    @staticmethod
    def task_id(turn: PolicyTurn) -> str:
        """The episode's task: ``info["task_id"]``, else the ``task`` reset option."""
        return str(turn.info.get("task_id") or turn.options.get("task", ""))

    def respond(self, turn: PolicyTurn) -> str:
        from dynaweb_env.experts import ExpertError

        task_id = self.task_id(turn)
        expert = self.experts.get(task_id)
        if expert is None:
            return format_policy_response(f"no scripted expert for task {task_id!r}.", "stop [N/A]")
        try:
            return expert.respond(turn.observation)
        except ExpertError as error:
            reason = " ".join(str(error).split())[:200]
            return format_policy_response(f"the expert does not recognise the page ({reason}).", "stop [N/A]")


class CompletionIdsBackend:
    """Wraps a backend so every generation carries its completion token ids.

    The episode encoding needs the tokens of each turn; a server that returns only text (no
    ``token_ids``, no token logprobs) would leave the turn out of the next prompt. Missing ids are
    filled by tokenizing the text with the policy's tokenizer, plus EOS when the turn stopped.

    Args:
        backend: Any :class:`~dynaweb_env.llm.base.GenerationBackend`.
        tokenizer: The tokenizer of the model the backend serves.
    """

    def __init__(self, backend: GenerationBackend, tokenizer: Any):
        self.backend, self.tokenizer = backend, tokenizer
        self.model_name = getattr(backend, "model_name", "server")

    def _fill(self, generations: list[Generation]) -> list[Generation]:
        for generation in generations:
            if not generation.completion_ids:
                ids = self.tokenizer.encode(generation.text, add_special_tokens=False)
                if generation.finish_reason == "stop" and self.tokenizer.eos_token_id is not None:
                    ids.append(self.tokenizer.eos_token_id)
                generation.completion_ids, generation.logprobs = ids, []
        return generations

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        return self._fill(self.backend.generate_from_ids(prompt_ids, params))

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        return self._fill(self.backend.generate(conversations, params))


@dataclass
class LoadedPolicy:
    """A policy ready for rollouts.

    Attributes:
        spec: The reference it was loaded from.
        kind: ``"model"``, ``"adapter"``, ``"server"`` (any non-local backend) or ``"expert"``.
        tokenizer: The tokenizer the episode encoding uses.
        policy: The :class:`Policy` that acts.
        details: What was resolved (model path, base model of an adapter, checkpoint chosen), for results.
    """

    spec: str
    kind: str
    tokenizer: Any
    policy: Policy
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        backend = getattr(self.policy, "backend", None)
        return getattr(backend, "model_name", None) or self.spec


def _looks_like_path(spec: str) -> bool:
    # Backend specs with a prefix (``hf:org/model``, ``openai:m@http://...``) contain slashes too.
    return spec.startswith((".", "/", "~")) or ("/" in spec and ":" not in spec.split("/", 1)[0])


def load_policy(
    spec: str,
    tokenizer: str | None = None,
    device: str | None = None,
    max_batch_size: int = 16,
) -> LoadedPolicy:
    """Load a policy from a command-line reference (see the module docstring for the forms).

    Args:
        spec: The reference.
        tokenizer: Tokenizer to encode episodes with when the policy has none locally (server backends,
            experts; an embedded name or a directory). Defaults to the embedded default model's.
        device: Device of local models (default: CUDA if available).
        max_batch_size: Most sequences a local model decodes together.

    Raises:
        PolicyLoadError: If a path (or an adapter's base model) does not exist.
        ValueError: If the reference is not a valid backend spec.
    """
    from transformers import AutoTokenizer

    from dynaweb_env.llm import make_backend, parse_backend_spec
    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_env.models import DEFAULT_MODEL, EMBEDDED_MODELS, resolve_model

    spec = spec.strip()
    if not spec:
        raise ValueError("empty policy reference")

    def side_tokenizer() -> Any:
        return AutoTokenizer.from_pretrained(resolve_model(tokenizer or DEFAULT_MODEL), trust_remote_code=False)

    if spec == EXPERT_POLICY:
        expert_tokenizer = side_tokenizer()
        details = {"experts": "dynaweb_env.experts"}
        return LoadedPolicy(spec, "expert", expert_tokenizer, ScriptedExpertPolicy(expert_tokenizer), details)
    local = Path(spec).expanduser()
    if spec not in EMBEDDED_MODELS and (local.exists() or _looks_like_path(spec)):
        directory, kind = resolve_checkpoint_dir(local)
        details: dict[str, Any] = {"path": str(directory)}
        if kind == "adapter":
            import torch

            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            model, policy_tokenizer, loaded = load_model_and_tokenizer(directory, device=device)
            details["base_model"] = loaded["base_model"]
            # Loaded for inference alone: its system prompt's KV cache is kept between calls, and its last prompts.
            backend = TransformersBackend(
                model, policy_tokenizer, max_batch_size=max_batch_size, model_name=spec, frozen=True, keep_prompts=True
            )
            return LoadedPolicy(spec, "adapter", policy_tokenizer, GenerationPolicy(backend), details)
        backend = TransformersBackend(
            directory, device=device, max_batch_size=max_batch_size, model_name=spec, keep_prompts=True
        )
        return LoadedPolicy(spec, "model", backend.tokenizer, GenerationPolicy(backend), details)
    options = parse_backend_spec(spec)
    if options["backend"] == "transformers":
        backend = make_backend(spec, cache=False, device=device, max_batch_size=max_batch_size, keep_prompts=True)
        return LoadedPolicy(spec, "model", backend.tokenizer, GenerationPolicy(backend), {"model": options["model"]})
    policy_tokenizer = side_tokenizer()
    backend = CompletionIdsBackend(make_backend(spec, cache=False), policy_tokenizer)
    return LoadedPolicy(spec, "server", policy_tokenizer, GenerationPolicy(backend), {"backend": options["backend"]})


__all__ = [
    "EXPERT_POLICY",
    "CompletionIdsBackend",
    "GenerationPolicy",
    "LoadedPolicy",
    "Policy",
    "PolicyLoadError",
    "PolicyTurn",
    "ScriptedExpertPolicy",
    "ScriptedPolicy",
    "as_policy",
    "load_policy",
    "resolve_checkpoint_dir",
]
