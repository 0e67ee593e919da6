"""Tests of :class:`~dynaweb_env.llm.routed_backend.RoutedBackend`: the engine per call shape, on the tiny model."""

from __future__ import annotations

import pytest
import torch

from dynaweb_env.llm import GenerationBackend, SamplingParams, base, make_backend, parse_backend_spec
from dynaweb_env.llm.routed_backend import RoutedBackend, batch_dtype

pytest.importorskip("ctranslate2", reason="needs the engine extra: pip install 'dynaweb[engine]'")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Tell me a long story about a cat and a dog who meet in a park."}],
]
GREEDY = SamplingParams(max_new_tokens=12, temperature=0)


def test_single_prompts_use_the_engine_and_the_first_batch_switches_to_transformers_for_good():
    reference = make_backend("tiny-random").generate(CONVERSATIONS, GREEDY)
    backend = make_backend("auto:tiny-random?dtype=float32", cache=False)
    assert isinstance(backend, RoutedBackend) and isinstance(backend, GenerationBackend)
    assert backend.engine is None  # nothing loads before the first call
    alone = [backend.generate([conversation], GREEDY)[0] for conversation in CONVERSATIONS]
    assert backend.engine == "ct2"
    batched = backend.generate(CONVERSATIONS, GREEDY)
    assert backend.engine == "transformers"
    again = backend.generate(CONVERSATIONS[:1], GREEDY)  # one prompt, but the engine copy is gone
    assert backend.engine == "transformers"
    # float32 weights on both engines: the same greedy tokens whichever served the call
    expected = [generation.completion_ids for generation in reference]
    assert [generation.completion_ids for generation in alone] == expected
    assert [generation.completion_ids for generation in batched] == expected
    assert again[0].completion_ids == expected[0]
    assert backend.chat_prompt_ids(CONVERSATIONS[0]) == reference[0].prompt_ids


def test_a_batch_first_never_loads_the_engine_and_options_reach_only_the_engine_that_takes_them():
    backend = RoutedBackend("tiny-random", max_batch_size=1, quantization="float32", dtype="float32")
    assert len(backend.generate_from_ids([[1, 2, 3], [4, 5]], GREEDY)) == 2
    assert backend.engine == "transformers" and backend.tokenizer is not None
    with pytest.raises(ValueError, match="batch_rows"):
        RoutedBackend("tiny-random", batch_rows=1)


@pytest.mark.parametrize("native_bf16", [True, False])
def test_batches_run_in_bfloat16_where_the_cpu_multiplies_it_natively(monkeypatch, native_bf16):
    monkeypatch.setattr(base, "cpu_supports_bf16", lambda: native_bf16)
    assert batch_dtype("cpu") == ("bfloat16" if native_bf16 else None) and batch_dtype("cuda") is None
    backend = RoutedBackend("tiny-random")
    backend.generate(CONVERSATIONS, GREEDY)
    weights = next(backend._backend.model.parameters()).dtype
    assert backend.engine == "transformers" and weights == (torch.bfloat16 if native_bf16 else torch.float32)
    pinned = RoutedBackend("tiny-random", dtype="float32")  # a spec's ?dtype=float32
    pinned.generate(CONVERSATIONS, GREEDY)
    assert next(pinned._backend.model.parameters()).dtype == torch.float32


def test_shipped_names_resolve_to_the_engine_per_call_shape(monkeypatch):
    monkeypatch.delenv("DYNAWEB_ENGINE", raising=False)
    assert parse_backend_spec("smollm2-135m-wm-patch") == {"backend": "auto", "model": "smollm2-135m-wm-patch"}
    assert parse_backend_spec("auto:tiny-random") == {"backend": "auto", "model": "tiny-random"}
    monkeypatch.setenv("DYNAWEB_ENGINE", "ct2")
    assert parse_backend_spec("smollm2-135m-wm-patch")["backend"] == "ct2"
