"""Policies for :func:`~dynaweb_trainer.rollout.run_episodes`: LLMs from any reference, and scripted experts.

:func:`load_policy` turns one reference, as written on a command line, into a batched
:class:`~dynaweb_env.llm.base.GenerationBackend` plus the tokenizer the episode encoding needs:

==================================  ===================================================================
``--policy``                        what is loaded
==================================  ===================================================================
``smollm2-135m``, ``tiny-random``   an embedded model (:mod:`dynaweb_env.models`)
``runs/sft`` (has ``config.json``)  a full checkpoint: SFT with ``use_peft=False``, or an RL run
``runs/sft`` (``adapter_config``)   a LoRA adapter: its base model (``base_model_name_or_path``) plus
                                    the adapter, merged for fast decoding
``outputs/run`` (``checkpoint-*``)  the latest checkpoint inside a training output directory
``openai:<model>@<url>``, ...       any other :func:`dynaweb_env.llm.make_backend` spec
``expert``                          the scripted experts (:mod:`dynaweb_env.experts`)
==================================  ===================================================================

The experts read observations, not tokens, while ``run_episodes`` hands a policy only the token ids
of each live episode. :class:`ExpertBackend` bridges the two: an :class:`ObservationRecorder` around
the vector env remembers every sub-env's latest observation and task, and each prompt is matched to
the sub-env whose observation it ends with (the encoder's exact tokens for that observation), so the
expert answers from the full, untruncated page.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from dynaweb_env.agent import format_policy_response
from dynaweb_env.llm.base import Conversation, Generation, GenerationBackend, SamplingParams

from .encoding import EpisodeEncoder

#: The ``--policy`` value that selects the scripted experts.
EXPERT_POLICY = "expert"


@dataclass
class LoadedPolicy:
    """A policy ready for rollouts.

    Attributes:
        spec: The reference it was loaded from.
        kind: ``"model"``, ``"adapter"``, ``"server"`` (any non-local backend) or ``"expert"``.
        tokenizer: The tokenizer the episode encoding uses.
        backend: The batched generator; ``None`` for experts until :meth:`bind` gives them a recorder.
        details: What was resolved (model path, base model of an adapter, checkpoint chosen), for results.
    """

    spec: str
    kind: str
    tokenizer: Any
    backend: GenerationBackend | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.backend, "model_name", None) or self.spec


class PolicyLoadError(FileNotFoundError):
    """A policy reference names nothing loadable; the message says what was looked for."""


def _looks_like_path(spec: str) -> bool:
    # Backend specs with a prefix (``hf:org/model``, ``openai:m@http://...``) contain slashes too.
    return spec.startswith((".", "/", "~")) or ("/" in spec and ":" not in spec.split("/", 1)[0])


def resolve_checkpoint_dir(path: str | os.PathLike[str]) -> tuple[Path, str]:
    """Find what a local policy directory holds.

    Args:
        path: A checkpoint directory, or a training output directory with ``checkpoint-*`` inside.

    Returns:
        ``(directory, kind)`` with kind ``"adapter"`` (``adapter_config.json``) or ``"model"`` (``config.json``).

    Raises:
        PolicyLoadError: If the path does not exist or holds neither.
    """
    directory = Path(path).expanduser()
    if not directory.exists():
        raise PolicyLoadError(f"policy path not found: {directory}")
    if not directory.is_dir():
        raise PolicyLoadError(f"policy path {directory} is a file; pass a checkpoint or adapter directory")
    if (directory / "adapter_config.json").is_file():
        return directory, "adapter"
    if (directory / "config.json").is_file():
        return directory, "model"
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(directory))
    if last is not None:
        return resolve_checkpoint_dir(last)
    raise PolicyLoadError(
        f"{directory} holds no model: expected adapter_config.json (a LoRA adapter), config.json (a full "
        "checkpoint) or checkpoint-* directories"
    )


def load_adapter_model(adapter_dir: str | os.PathLike[str], device: str | None = None, merge: bool = True) -> tuple:
    """Load a LoRA adapter on its base model.

    The base is ``base_model_name_or_path`` of ``adapter_config.json`` (an embedded name or a local
    directory). The tokenizer comes from the adapter directory when it has one (SFT saves it there),
    else from the base.

    Args:
        adapter_dir: Directory with ``adapter_config.json`` and the adapter weights.
        device: Where to load (default: CUDA if available, else CPU).
        merge: Fold the adapter into the base weights (faster decoding; the adapter is not trained here).

    Returns:
        ``(model, tokenizer, base_model_reference)``.

    Raises:
        PolicyLoadError: If the adapter or its base model is missing.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dynaweb_env.models import resolve_model

    adapter_dir = Path(adapter_dir).expanduser()
    config_file = adapter_dir / "adapter_config.json"
    if not config_file.is_file():
        raise PolicyLoadError(f"adapter not found: {config_file} does not exist")
    try:
        base_reference = json.loads(config_file.read_text())["base_model_name_or_path"]
    except (json.JSONDecodeError, KeyError) as error:
        raise PolicyLoadError(f"{config_file} has no readable base_model_name_or_path ({error})") from None
    try:
        base_path = resolve_model(base_reference)
    except ValueError as error:
        raise PolicyLoadError(f"base model of adapter {adapter_dir} not found: {error}") from None
    if not Path(base_path).is_dir():
        raise PolicyLoadError(
            f"base model {base_reference!r} of adapter {adapter_dir} is not a local directory or embedded model"
        )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype)
    model = PeftModel.from_pretrained(model, str(adapter_dir))
    if merge:
        model = model.merge_and_unload()
    model = model.to(device).eval()
    has_tokenizer = (adapter_dir / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir if has_tokenizer else base_path)
    return model, tokenizer, str(base_reference)


def load_policy(
    spec: str,
    tokenizer: str | None = None,
    device: str | None = None,
    max_batch_size: int = 16,
) -> LoadedPolicy:
    """Load a policy from a command-line reference (see the module docstring for the forms).

    Args:
        spec: The reference.
        tokenizer: Tokenizer to encode episodes with when the policy has none locally (server backends;
            an embedded name or a directory). Defaults to the embedded default model's.
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
        return AutoTokenizer.from_pretrained(resolve_model(tokenizer or DEFAULT_MODEL))

    if spec == EXPERT_POLICY:
        return LoadedPolicy(spec, "expert", side_tokenizer(), details={"experts": "dynaweb_env.experts"})
    local = Path(spec).expanduser()
    if spec not in EMBEDDED_MODELS and (local.exists() or _looks_like_path(spec)):
        directory, kind = resolve_checkpoint_dir(local)
        details: dict[str, Any] = {"path": str(directory)}
        if kind == "adapter":
            model, policy_tokenizer, base = load_adapter_model(directory, device=device)
            details["base_model"] = base
            backend = TransformersBackend(model, policy_tokenizer, max_batch_size=max_batch_size, model_name=spec)
            return LoadedPolicy(spec, "adapter", policy_tokenizer, backend, details)
        backend = TransformersBackend(directory, device=device, max_batch_size=max_batch_size, model_name=spec)
        return LoadedPolicy(spec, "model", backend.tokenizer, backend, details)
    options = parse_backend_spec(spec)
    if options["backend"] == "transformers":
        backend = make_backend(spec, cache=False, device=device, max_batch_size=max_batch_size)
        return LoadedPolicy(spec, "model", backend.tokenizer, backend, {"model": options["model"]})
    policy_tokenizer = side_tokenizer()
    backend = CompletionIdsBackend(make_backend(spec, cache=False), policy_tokenizer)
    return LoadedPolicy(spec, "server", policy_tokenizer, backend, {"backend": options["backend"]})


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


class ObservationRecorder(gym.vector.VectorWrapper):
    """Remembers the latest observation and task id of every sub-env of a vector env.

    Nothing is changed: observations, rewards and infos pass through untouched.

    Attributes:
        observations: Per sub-env, its latest observation (``None`` before its first reset).
        task_ids: Per sub-env, the ``info["task_id"]`` of its current episode.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self.observations: list[dict[str, str] | None] = [None] * self.num_envs
        self.task_ids: list[str] = [""] * self.num_envs

    def _record(self, observations: Mapping[str, Any], infos: Mapping[str, Any]) -> None:
        task_ids, present = infos.get("task_id"), infos.get("_task_id")
        for slot in range(self.num_envs):
            self.observations[slot] = {key: str(values[slot]) for key, values in observations.items()}
            if task_ids is not None and (present is None or bool(present[slot])):
                self.task_ids[slot] = str(task_ids[slot])

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observations, infos = self.env.reset(seed=seed, options=options)
        self._record(observations, infos)
        return observations, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        self._record(observations, infos)
        return observations, rewards, terminations, truncations, infos


class ExpertBackend:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` whose answers come from scripted experts.

    Each prompt (an episode's token ids, as :func:`~dynaweb_trainer.rollout.run_episodes` builds them)
    is matched to the sub-env of ``recorder`` whose latest observation it ends with, and the expert
    of that sub-env's task answers ``REASON: ...\\nACTION: ...``. An expert that does not recognise
    the page (:class:`~dynaweb_env.experts.ExpertError`) answers ``stop [N/A]`` with the reason, so
    the episode ends as a failure instead of crashing the evaluation.

    Args:
        encoder: The encoder ``run_episodes`` uses (same tokenizer, system prompt and tree cut).
        recorder: The :class:`ObservationRecorder` around the vector env being stepped.
        experts: Task id -> expert (default: every registered expert).
    """

    model_name = "expert"

    def __init__(
        self, encoder: EpisodeEncoder, recorder: ObservationRecorder, experts: Mapping[str, Any] | None = None
    ):
        if experts is None:
            from dynaweb_env.experts import EXPERTS

            experts = EXPERTS
        self.encoder, self.recorder, self.experts = encoder, recorder, experts

    def _respond(self, slot: int) -> str:
        from dynaweb_env.experts import ExpertError

        observation, task_id = self.recorder.observations[slot], self.recorder.task_ids[slot]
        expert = self.experts.get(task_id)
        if expert is None:
            return format_policy_response(f"no scripted expert for task {task_id!r}.", "stop [N/A]")
        try:
            return expert.respond(observation)
        except ExpertError as error:
            reason = " ".join(str(error).split())[:200]
            return format_policy_response(f"the expert does not recognise the page ({reason}).", "stop [N/A]")

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Answer each episode from the observation of the sub-env it belongs to (``params`` is ignored)."""
        suffixes: dict[int, tuple[list[int], list[int]]] = {}
        for slot, observation in enumerate(self.recorder.observations):
            if observation is not None:
                suffixes[slot] = (self.encoder.prompt_ids(observation), self.encoder.observation_turn_ids(observation))
        generations = []
        for ids in prompt_ids:
            ids = list(ids)
            slot = next(
                (
                    slot
                    for slot, (first, turn) in suffixes.items()
                    if ids == first or (len(ids) > len(turn) and ids[-len(turn) :] == turn)
                ),
                None,
            )
            if slot is None:
                raise RuntimeError("an episode's prompt matches no sub-env's latest observation (not this env's)")
            text = self._respond(slot)
            completion = self.encoder.response_ids(text)
            generations.append(Generation(text, ids, completion, [0.0] * len(completion), "stop"))
        return generations

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Chat form: the prompt of each conversation is tokenized with the chat template, then as above."""
        tokenizer = self.encoder.tokenizer
        prompt_ids = [
            list(
                tokenizer.apply_chat_template(
                    list(conversation), add_generation_prompt=True, tokenize=True, return_dict=False
                )
            )
            for conversation in conversations
        ]
        return self.generate_from_ids(prompt_ids, params)


def bind_expert(policy: LoadedPolicy, encoder: EpisodeEncoder, recorder: ObservationRecorder) -> LoadedPolicy:
    """Give an ``expert`` policy its backend, reading observations from ``recorder``."""
    if policy.kind != "expert":
        raise ValueError(f"bind_expert needs an expert policy, got {policy.kind!r}")
    policy.backend = ExpertBackend(encoder, recorder)
    return policy


__all__ = [
    "EXPERT_POLICY",
    "LoadedPolicy",
    "PolicyLoadError",
    "resolve_checkpoint_dir",
    "load_adapter_model",
    "load_policy",
    "CompletionIdsBackend",
    "ObservationRecorder",
    "ExpertBackend",
    "bind_expert",
]
