"""What DynaWeb changes inside CTranslate2's transformers converter."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from . import require_version

#: The CTranslate2 releases this was tested with (the ``engine`` extra's range; measured with 4.8.5).
CTRANSLATE2_TESTED = ">=4.5,<5"


@contextlib.contextmanager
def _no_per_layer_gc() -> Iterator[None]:
    # The transformers converter calls gc.collect() after every layer to bound the peak memory of huge
    # models; for a 135M model that is ~95% of the conversion time (12 s of 13 s measured), and more in a
    # trainer's large heap. The model here is small and already in memory, so the collections are skipped.
    from ctranslate2.converters import transformers as converter_module

    class _NoCollect:
        def __getattr__(self, name: str) -> Any:
            import gc

            return getattr(gc, name)

        @staticmethod
        def collect(*args: Any) -> int:
            return 0

    saved = converter_module.gc
    converter_module.gc = _NoCollect()
    try:
        yield
    finally:
        converter_module.gc = saved


def convert_loaded_model(model: Any, tokenizer: Any, config_dir: str | os.PathLike[str]) -> Any:
    """CTranslate2's model spec of an already loaded transformers model, without per-layer garbage collections.

    The converter's public ``convert`` reloads the model from disk and writes it; this runs its private
    ``_load`` on the model in memory and returns the spec (to ``validate``, ``optimize`` and ``save``).

    Args:
        model: A ``PreTrainedModel`` (LoRA adapters merged). The converter takes it apart layer by layer.
        tokenizer: Its tokenizer.
        config_dir: A directory holding ``model.config.save_pretrained`` (the converter reads the config there).

    Raises:
        UntestedVersionError: If the installed CTranslate2 is outside :data:`CTRANSLATE2_TESTED`.
    """
    require_version("ctranslate2", CTRANSLATE2_TESTED, "converts an in-memory model with its converter's _load")
    import ctranslate2

    class InMemoryConverter(ctranslate2.converters.TransformersConverter):
        def load_model(self, model_class, model_name_or_path, **kwargs):
            return model

        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return tokenizer

    with _no_per_layer_gc():
        return InMemoryConverter(str(config_dir))._load()


__all__ = ["CTRANSLATE2_TESTED", "convert_loaded_model"]
