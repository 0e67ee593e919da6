"""Text-generation backends shared by the world model, the judge and the policy.

Everything that generates text builds its backend with :func:`make_backend`, from a spec string (as
found in configs and on command lines), a dict, or a backend object. Spec grammar:

==============================  =================================================================
Spec                            Backend
==============================  =================================================================
``smollm2-135m``                embedded model (see :mod:`dynaweb_env.models`), transformers
``tiny-random``                 embedded tiny random model, transformers (tests, smoke runs)
``smollm2-135m-judge``          a shipped adapter (judge, world models): ``auto:`` when CTranslate2 is
                                installed, else transformers (see "Engine defaults" below)
``auto:<ref>``                  the engine per call shape (:mod:`.routed_backend`): CTranslate2 for one
                                prompt at a time, transformers from the first batch on
``ct2:<ref>``                   CTranslate2 (``pip install dynaweb[engine]``): an embedded name, a shipped
                                adapter, a local checkpoint or adapter directory (converted once into
                                the cache, adapters merged, float32 weights), or an already converted
                                directory
``/path/to/checkpoint``         local checkpoint directory (also ``./rel`` or ``~/...``), transformers
``hf:<id-or-path>``             transformers ``from_pretrained(<id>)`` (a hub id needs network access)
``transformers:<ref>``          same as the bare forms above, spelled out
``<model spec>?dtype=bfloat16``  options of a local model's backend: ``dtype`` (transformers, ``auto:``'s
                                batches) and ``quantization`` (``ct2:``, ``auto:``'s single prompts)
``openai:<model>@<base_url>``   an OpenAI-compatible server, e.g.
                                ``openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1``;
                                ``?timeout=S&retries=N`` after the URL bounds each request
                                (default 120 s, 2 retries; see :mod:`.openai_backend`),
                                ``&vllm_extensions=0`` for servers other than vLLM/SGLang;
                                ``&prompt_style=compact|paper&output_mode=tree|patch`` say how the
                                served world model or judge was trained (a server cannot tell)
``vllm:<model-or-path>``        in-process vLLM (``pip install dynaweb[vllm]``, GPU)
==============================  =================================================================

A dict names the backend and its constructor arguments:
``{"backend": "transformers" | "ct2" | "auto" | "openai" | "vllm", "model": ..., **kwargs}`` (``openai`` also takes
``base_url``, and ``prompt_style`` / ``output_mode`` as above).

Engine defaults: the shipped adapters are frozen models (world model, judge), so their bare names use
the CTranslate2 engine wherever it is installed, for single prompts; a batch (a vector env's step, a host
library's threads batched together) goes to transformers, which prefills a batch's shared prefix once and
its rows without padding, where the engine is slower batched than one prompt at a time
(``benchmarks/results/throughput/env_throughput_defaults.json``). ``transformers`` stays the reference and
the fallback.
The engine copies are float32: they give the reference's greedy tokens, where int8 matrix products change
the world models' pages (on held-out transitions the tree world model loops until the token limit,
``benchmarks/results/world_model_rank_cut/wm_tree_rank8*.json``, and the patch world model's strict F1 falls from
0.86 to 0.73,
``benchmarks/results/engine/engine_fidelity.json``). ``make_backend("ct2:<ref>", quantization="int8")`` asks for
int8 all the same. Write ``transformers:smollm2-135m-judge`` for the
reference, or set ``DYNAWEB_ENGINE=transformers`` to make every bare name resolve to it
(``DYNAWEB_ENGINE=ct2`` pins the engine for every call shape, and makes a missing engine an error).

Backends are cached per process: the same spec (and keyword arguments) returns the same loaded
backend, so several envs sharing a world model never load it twice. Pass ``cache=False`` for a
fresh one, or call :func:`clear_backend_cache`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from .base import Conversation, Generation, GenerationBackend, GenerationError, SamplingParams

_BACKEND_KINDS = ("transformers", "ct2", "auto", "openai", "vllm")
#: Environment variable choosing what bare shipped-adapter names resolve to: ``auto`` (default: the engine per
#: call shape when CTranslate2 is installed, :mod:`.routed_backend`), ``ct2`` or ``transformers``.
ENGINE_ENV_VAR = "DYNAWEB_ENGINE"
_cache: dict[str, GenerationBackend] = {}
_cache_lock = threading.Lock()


def parse_backend_spec(spec: str | dict[str, Any]) -> dict[str, Any]:
    """Turn a spec string or dict into ``{"backend": kind, "model": ..., **kwargs}``.

    Raises:
        ValueError: If the spec is malformed, names an unknown backend, or a bare reference is
            neither an embedded model nor an existing local path.
    """
    if isinstance(spec, dict):
        return _dict_spec(spec)
    if not isinstance(spec, str):
        raise ValueError(f"a backend spec must be a string, a dict or a backend, got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise ValueError("empty backend spec")
    prefix, colon, rest = text.partition(":")
    if colon and prefix == "openai":
        return _openai_spec(rest, spec)
    text, query = _model_query(text, spec)
    prefix, colon, rest = text.partition(":")
    if colon and prefix in _MODEL_PREFIXES:
        if not rest:
            raise ValueError(f"{prefix} spec must look like '{prefix}:<model>', got {spec!r}")
        return _with_query({"backend": _MODEL_PREFIXES[prefix], "model": rest}, query, spec)
    if colon and prefix == "transformers":
        text = rest
    elif colon and prefix.isidentifier() and not Path(text).exists():
        raise ValueError(
            f"unknown backend prefix {prefix!r} in {spec!r}; known: ct2:, auto:, openai:, vllm:, hf:, transformers:"
        )
    from ..models import EMBEDDED_MODELS, SHIPPED_ADAPTERS

    if text in SHIPPED_ADAPTERS and not colon:
        return _with_query({"backend": default_engine(), "model": text}, query, spec)
    if text in EMBEDDED_MODELS or text in SHIPPED_ADAPTERS or Path(text).expanduser().is_dir():
        return _with_query({"backend": "transformers", "model": text}, query, spec)
    raise ValueError(
        f"backend spec {spec!r} is neither an embedded model or shipped adapter "
        f"({', '.join([*EMBEDDED_MODELS, *SHIPPED_ADAPTERS])}) nor a local directory; "
        "write 'hf:<id>' for a hub model, 'ct2:<model>', 'openai:<model>@<url>' or 'vllm:<model>'"
    )


#: Spec prefixes followed by a model reference -> backend kind.
_MODEL_PREFIXES = {"vllm": "vllm", "ct2": "ct2", "auto": "auto", "hf": "transformers"}
#: Query options of a local model's spec string (``transformers:<ref>?dtype=bfloat16``) -> the backends that take them.
MODEL_SPEC_OPTIONS = {
    "dtype": ("transformers", "auto"),
    "quantization": ("ct2", "auto"),
}


def _model_query(text: str, spec: str) -> tuple[str, dict[str, str]]:
    """``<model spec>?key=value&...`` -> the spec without its query, and the query's options."""
    base, mark, query = text.partition("?")
    if not mark or Path(text).expanduser().exists():
        return text, {}
    try:
        return base, dict(parse_qsl(query, strict_parsing=True))
    except ValueError:
        raise ValueError(f"malformed options {query!r} in {spec!r}; write e.g. '<model>?dtype=bfloat16'") from None


def _with_query(options: dict[str, Any], query: dict[str, str], spec: str) -> dict[str, Any]:
    """``options`` with the spec's query options, each checked against the backend it is for."""
    for key, value in query.items():
        kinds = MODEL_SPEC_OPTIONS.get(key)
        if kinds is None:
            raise ValueError(f"unknown option {key!r} in {spec!r}; known: {', '.join(MODEL_SPEC_OPTIONS)}")
        if options["backend"] not in kinds:
            raise ValueError(f"option {key!r} in {spec!r} is for the {' and '.join(kinds)} backends only")
        options[key] = value
    return options


def _dict_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A dict spec checked (``ValueError`` naming what is missing), with its backend kind filled in."""
    options = dict(spec)
    kind = options.get("backend", "transformers")
    if kind not in _BACKEND_KINDS:
        raise ValueError(f"unknown backend {kind!r} in {spec!r}; expected one of {_BACKEND_KINDS}")
    if not options.get("model"):
        raise ValueError(f"backend spec {spec!r} needs a 'model'")
    if kind == "openai" and not options.get("base_url"):
        raise ValueError(f"openai backend spec {spec!r} needs a 'base_url'")
    for key in SERVED_MODEL_OPTIONS:
        if key in options:
            _check_served_model_option(key, options[key], spec)
    options["backend"] = kind
    return options


def _flag(value: str) -> bool:
    """``1``/``true``/``yes`` or ``0``/``false``/``no`` (``ValueError`` otherwise)."""
    words = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
    if value.strip().lower() not in words:
        raise ValueError(value)
    return words[value.strip().lower()]


_flag.__name__ = "flag (0 or 1)"  # how the error message names the expected type

#: Query options of an ``openai:`` spec string -> (constructor argument, type).
OPENAI_SPEC_OPTIONS: dict[str, tuple[str, Any]] = {
    "timeout": ("timeout", float),
    "retries": ("max_retries", int),
    "vllm_extensions": ("vllm_extensions", _flag),  # 0 for servers that refuse vLLM's extra request fields
}
#: Options of a spec that describe the model, not the connection: how a world model or judge was trained.
#: A local checkpoint records them beside its weights (:func:`~dynaweb_env.models.model_prompt_style`); a
#: server cannot, so an ``openai:`` spec states them.
SERVED_MODEL_OPTIONS = ("prompt_style", "output_mode")


def _check_served_model_option(key: str, value: Any, spec: Any) -> str:
    from ..world_model.model import OUTPUT_MODES  # deferred: the world model package builds on this one
    from ..world_model.prompts import PROMPT_STYLES

    allowed = PROMPT_STYLES if key == "prompt_style" else tuple(OUTPUT_MODES)
    if value not in allowed:
        raise ValueError(f"option {key}={value!r} in {spec!r} must be one of {', '.join(allowed)}")
    return value


def _openai_spec(rest: str, spec: str) -> dict[str, Any]:
    """``openai:<model>@<url>[?timeout=S&retries=N]`` -> backend options (``ValueError`` naming what is wrong)."""
    for scheme in ("@http://", "@https://"):
        model, at, url = rest.rpartition(scheme)
        if at and model:
            url, _, query = url.partition("?")
            options: dict[str, Any] = {"backend": "openai", "model": model, "base_url": scheme[1:] + url}
            for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
                if key in SERVED_MODEL_OPTIONS:
                    options[key] = _check_served_model_option(key, value, spec)
                    continue
                if key not in OPENAI_SPEC_OPTIONS:
                    known = ", ".join([*OPENAI_SPEC_OPTIONS, *SERVED_MODEL_OPTIONS])
                    raise ValueError(f"unknown option {key!r} in {spec!r}; known: {known}")
                name, kind = OPENAI_SPEC_OPTIONS[key]
                try:
                    options[name] = kind(value)
                except ValueError:
                    raise ValueError(f"option {key}={value!r} in {spec!r} must be a {kind.__name__}") from None
                if not 0 <= options[name] < float("inf") or (key == "timeout" and options[name] == 0):
                    raise ValueError(f"option {key}={value!r} in {spec!r} is out of range")
            return options
    raise ValueError(
        f"openai spec must look like 'openai:<model>@http://host:port/v1[?timeout=S&retries=N]', got {spec!r}"
    )


def default_engine() -> str:
    """The backend bare shipped-adapter names resolve to: ``"auto"`` (the engine per call shape) where
    CTranslate2 is installed, else ``"transformers"``; :data:`ENGINE_ENV_VAR` overrides it.

    Raises:
        ValueError: If the variable holds anything else.
    """
    choice = os.environ.get(ENGINE_ENV_VAR, "auto").strip().lower() or "auto"
    if choice not in ("auto", "ct2", "transformers"):
        raise ValueError(f"{ENGINE_ENV_VAR} must be auto, ct2 or transformers, got {choice!r}")
    if choice != "auto":
        return choice
    from .ct2_convert import engine_available

    return "auto" if engine_available() else "transformers"


def make_backend(
    spec: str | dict[str, Any] | GenerationBackend = "smollm2-135m", *, cache: bool = True, **kwargs: Any
) -> GenerationBackend:
    """Build (or fetch from the per-process cache) the generation backend a spec names.

    Args:
        spec: A spec string (grammar in this module's docstring), a dict, or a backend, which is
            returned unchanged.
        cache: Reuse a backend already built from the same spec and keyword arguments.
        **kwargs: Extra constructor arguments (e.g. ``max_batch_size``, ``device``, ``timeout``).

    Returns:
        A :class:`GenerationBackend`.

    Raises:
        ValueError: If the spec is malformed.
        ImportError: If the backend's optional dependency (CTranslate2, vLLM) is missing.
        GenerationError: If the model cannot be loaded.
    """
    if isinstance(spec, GenerationBackend):
        return spec
    options = {**parse_backend_spec(spec), **kwargs}
    try:
        key = json.dumps(options, sort_keys=True)
    except TypeError:  # unserialisable kwargs (a dtype object, ...): build without caching
        key = None
    if cache and key is not None:
        with _cache_lock:
            if key not in _cache:
                _cache[key] = _build(options)
            return _cache[key]
    return _build(options)


def _build(options: dict[str, Any]) -> GenerationBackend:
    options = dict(options)
    kind = options.pop("backend")
    for key in SERVED_MODEL_OPTIONS:  # facts about the model for its prompts, not backend arguments
        options.pop(key, None)
    if kind == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(**options)
    if kind == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(**options)
    model = options.pop("model")
    model = os.fspath(Path(model).expanduser()) if model.startswith("~") else model
    if kind == "ct2":
        from .ct2_backend import CT2Backend

        # transformers-only options (a dtype, prefix sharing) mean nothing to the engine.
        for option in ("dtype", "share_prefix"):
            options.pop(option, None)
        return CT2Backend(model, **options)
    if kind == "auto":
        from .routed_backend import RoutedBackend

        return RoutedBackend(model, **options)
    from .transformers_backend import TransformersBackend

    return TransformersBackend(model, **options)


def clear_backend_cache() -> None:
    """Forget every cached backend (their models are freed once no one else holds them)."""
    with _cache_lock:
        _cache.clear()


__all__ = [
    "Conversation",
    "Generation",
    "GenerationBackend",
    "GenerationError",
    "SERVED_MODEL_OPTIONS",
    "SamplingParams",
    "clear_backend_cache",
    "default_engine",
    "make_backend",
    "parse_backend_spec",
]
