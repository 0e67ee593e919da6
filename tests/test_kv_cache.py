"""GrowingCache: the same keys and values as transformers' DynamicCache, without a copy per step."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from dynaweb_env.llm import kv_cache
from dynaweb_env.llm.kv_cache import GrowingCache, GrowingLayer


def test_growing_layer_matches_dynamic_layer_through_growth_and_batch_edits(monkeypatch):
    monkeypatch.setattr(kv_cache, "GROWTH_MARGIN", 2)  # so that a few steps outgrow the buffer
    torch.manual_seed(0)
    growing, dynamic = GrowingLayer(), DynamicLayer()

    def step(length: int, batch: int) -> None:
        keys, values = torch.randn(batch, 3, length, 4), torch.randn(batch, 3, length, 4)
        for got, want in zip(growing.update(keys, values), dynamic.update(keys, values), strict=True):
            assert torch.equal(got, want)
        assert growing.get_seq_length() == dynamic.get_seq_length()

    step(5, 1)  # a shared prefix, prefilled for one row ...
    growing.batch_repeat_interleave(4), dynamic.batch_repeat_interleave(4)  # ... repeated over the batch
    for length in (3, 1, 1, 1, 1, 1, 1, 1):
        step(length, 4)
    buffer = growing._key_buffer
    step(1, 4)
    assert growing._key_buffer is buffer  # no reallocation while there is room
    growing.batch_select_indices(torch.tensor([0, 2])), dynamic.batch_select_indices(torch.tensor([0, 2]))
    step(1, 2)
    growing.crop(-2), dynamic.crop(-2)
    step(1, 2)
    assert torch.equal(growing.keys, dynamic.keys) and growing.keys.shape[-2] == 5 + 3 + 7 + 1 + 1 - 2 + 1


def test_growing_cache_replicates_growing_layers():
    cache = GrowingCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), layer_idx=0)
    assert isinstance(cache.layers[0], GrowingLayer) and cache.get_seq_length() == 3
