"""Converting models for the CTranslate2 engine, and the cache of converted models.

:func:`convert_model` converts a loaded transformers model (the trainer's live policy, adapter merged) with
CTranslate2's own converter; :func:`prepare_engine_model` converts a named or local model once into the
cache beside the other prepared models (``<cache>/models/ct2/``), LoRA adapters merged into their base.
Command line: ``python -m dynaweb_env.models engine [refs...]``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..compat.ctranslate2 import convert_loaded_model
from ..models import (
    EMBEDDED_MODELS,
    MARKER_FILE,
    SHIPPED_ADAPTERS,
    adapter_base,
    build_into_cache,
    cache_dir,
    resolve_model,
)

#: Weight type of converted models. float32: the engine then gives the transformers reference's greedy tokens
#: (24 of 24 world-model pages and judge verdicts on held-out data, ``benchmarks/results/engine/engine_fidelity.json``).
#: ``int8`` is faster but quantizes the activations of every matrix product too (CTranslate2's ``int8`` compute
#: type on a CPU): it changed 10 of those 24 pages (strict F1 0.86 -> 0.73) and one verdict.
DEFAULT_QUANTIZATION = "float32"


#: Written into every converted directory: what it was converted from and how.
ENGINE_INFO_FILE = "dynaweb_engine.json"


def import_ctranslate2() -> Any:
    """The ``ctranslate2`` module; ``ImportError`` saying how to install it when it is missing."""
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(
            "the ct2 backend needs CTranslate2: `pip install 'dynaweb[engine]'` (or `pip install ctranslate2`), "
            "or use a transformers spec such as 'transformers:smollm2-135m-judge'"
        ) from error
    return ctranslate2


def engine_available() -> bool:
    """Whether CTranslate2 can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("ctranslate2") is not None


def is_engine_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a converted CTranslate2 model (``model.bin`` and a vocabulary)."""
    path = Path(path)
    return (path / "model.bin").is_file() and any(
        (path / name).is_file() for name in ("vocabulary.json", "vocabulary.txt")
    )


def convert_model(
    model: Any,
    tokenizer: Any,
    target: str | os.PathLike[str],
    *,
    quantization: str = DEFAULT_QUANTIZATION,
    logits_temperature: float = 1.0,
    source: str = "",
    consume: bool = False,
) -> Path:
    """Convert a loaded transformers causal LM (LoRA adapters already merged) into a CTranslate2 directory.

    Uses CTranslate2's own ``TransformersConverter`` on the in-memory model, so nothing is reloaded from
    disk. The tokenizer is saved beside the converted weights (the backend needs its chat template).

    Args:
        model: A ``PreTrainedModel`` on the CPU, not peft-wrapped (merge adapters first).
        tokenizer: Its tokenizer.
        target: Directory to write (created; existing files are overwritten).
        quantization: CTranslate2 weight type: ``int8`` (default), ``int8_float32``, ``float32``, ...
        logits_temperature: Divide the output layer by this, so that the engine's log-probabilities at
            sampling temperature 1 are ``log_softmax(logits / logits_temperature)``: the sampling
            distribution of a policy sampled at that temperature (see :class:`CT2Backend`).
        source: What the model is, recorded in :data:`ENGINE_INFO_FILE`.
        consume: Let the converter take ``model`` apart (it deletes each layer once converted, to bound
            memory); otherwise it converts a copy and ``model`` stays usable (a trainer's live policy).

    Returns:
        ``target`` as a path.
    """
    import_ctranslate2()  # a clear ImportError naming the extra when it is missing
    if logits_temperature <= 0:
        raise ValueError(f"logits_temperature must be > 0, got {logits_temperature}")
    target = Path(target)
    if not consume:
        import copy

        model = copy.deepcopy(model)
    with tempfile.TemporaryDirectory(prefix="dynaweb-ct2-config-") as config_dir:
        # The converter reads the config from a path and the model through load_model: hand it ours.
        model.config.save_pretrained(config_dir)
        spec = convert_loaded_model(model, tokenizer, config_dir)
    if logits_temperature != 1.0:
        projection = spec.decoder.projection
        # A new array: with tied embeddings the projection shares the embedding's tensor.
        projection.weight = projection.weight / logits_temperature
    spec.validate()
    spec.optimize(quantization=quantization)
    target.mkdir(parents=True, exist_ok=True)
    spec.save(str(target))
    tokenizer.save_pretrained(target)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(target)  # its end-of-sequence ids
    info = {"source": source, "quantization": quantization, "logits_temperature": logits_temperature}
    (target / ENGINE_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return target


#: Subdirectory of the cache holding models converted for the inference engine (CTranslate2).
ENGINE_CACHE_DIR = "ct2"


def _fingerprint(directory: Path) -> str:
    """A short hash of a directory's files, so that a retrained or re-shipped model gets a new entry.

    Files up to 64 MB (configs, adapters) are hashed by content, so a fresh checkout of the same shipped
    adapter finds its conversion; larger ones (full checkpoints) by size and modification time.
    """
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size};".encode())
        if stat.st_size <= 64 * 2**20:
            digest.update(path.read_bytes())
        else:
            digest.update(f"{directory.resolve()}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


def engine_model_dir(reference: str | os.PathLike[str], quantization: str = DEFAULT_QUANTIZATION) -> Path:
    """Where the engine conversion of a model reference lives in the cache (prepared or not).

    Embedded names map to ``ct2/<name>-<quantization>``; shipped adapters and local directories add a
    fingerprint of their files, so re-shipping or retraining converts again.

    Raises:
        ValueError: If the reference is neither an embedded name, a shipped adapter nor a local directory.
    """
    text = os.fspath(reference).strip()
    path = resolve_model(text)
    if not isinstance(path, Path):
        raise ValueError(f"the engine converts local models only; {text!r} is not one (no model hub is assumed)")
    if text in EMBEDDED_MODELS:
        key = f"{text}-{quantization}"
    else:
        key = f"{text if text in SHIPPED_ADAPTERS else path.name}-{_fingerprint(path)}-{quantization}"
    return cache_dir() / ENGINE_CACHE_DIR / key


def prepare_engine_model(
    reference: str | os.PathLike[str],
    quantization: str = DEFAULT_QUANTIZATION,
    *,
    force: bool = False,
    verbose: bool = False,
) -> Path:
    """Convert a model for CTranslate2 into the cache once, and return the converted directory.

    Args:
        reference: An embedded name, a shipped adapter name, or a local checkpoint or adapter directory.
            A LoRA adapter is merged into its base model (:func:`adapter_base`) before conversion.
        quantization: CTranslate2 weight type (``float32``, ``int8``, ...).
        force: Convert again even if the entry exists.
        verbose: Print what is being done to stderr.

    Raises:
        ValueError: If the reference names no local model.
        ImportError: If CTranslate2 is not installed.
    """
    text = os.fspath(reference).strip()
    target = engine_model_dir(text, quantization)
    if (target / MARKER_FILE).is_file() and not force:
        return target

    def build(staging: Path) -> None:
        model, tokenizer = load_merged_model(text)
        convert_model(model, tokenizer, staging, quantization=quantization, source=text, consume=True)

    marker = {"name": target.name, "description": f"{text} converted for CTranslate2 ({quantization})"}
    return build_into_cache(target, build, marker, force=force, verbose=verbose)


def load_merged_model(reference: str | os.PathLike[str]) -> tuple[Any, Any]:
    """Load a model reference in float32 on the CPU, a LoRA adapter merged into its base, with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .transformers_backend import load_merged_adapter

    path = resolve_model(reference)
    base = adapter_base(path) if isinstance(path, Path) else None
    if base is None:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=False)
        return model, AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    model = load_merged_adapter(path, resolve_model(base), torch.float32)
    has_tokenizer = (path / "tokenizer_config.json").is_file()
    return model, AutoTokenizer.from_pretrained(path if has_tokenizer else resolve_model(base), trust_remote_code=False)


__all__ = [
    "DEFAULT_QUANTIZATION",
    "ENGINE_CACHE_DIR",
    "ENGINE_INFO_FILE",
    "convert_model",
    "import_ctranslate2",
    "engine_available",
    "engine_model_dir",
    "is_engine_dir",
    "load_merged_model",
    "prepare_engine_model",
]
