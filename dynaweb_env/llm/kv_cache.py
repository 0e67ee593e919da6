"""A KV cache that grows in place, for :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`.

transformers' ``DynamicCache`` appends each decoding step's keys and values with ``torch.cat``, which
copies the whole cache of every layer at every step: on a CPU, with a ~1,300-token prompt, that copy is
about a sixth of a batched decoding step. :class:`GrowingCache` keeps spare capacity instead and writes
new positions in place; the model sees views of the filled part, so its outputs are the same.

:class:`PrefixStates` keeps the keys and values of a few prompt prefixes between calls (a frozen model's
system prompt), so that a call starting with one prefills only the rest; :class:`PromptStates` keeps whole
prompts, so that a multi-turn agent's next prompt, which extends its last one, prefills only its new tail.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from ..compat.transformers import require_cache_layer_api

#: Positions added beyond what is needed whenever a layer's buffer must grow (at least doubling it).
GROWTH_MARGIN = 256


class GrowingLayer(DynamicLayer):
    """A :class:`~transformers.cache_utils.DynamicLayer` that writes new keys and values into spare capacity.

    ``keys`` and ``values`` are views of the first ``get_seq_length()`` positions of larger buffers; the
    buffers are reallocated (at least doubled) only when full.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0

    def _expose(self) -> None:
        self.keys = self._key_buffer[..., : self._length, :]
        self.values = self._value_buffer[..., : self._length, :]

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        if self._key_buffer is not None and end <= self._key_buffer.shape[-2]:
            return
        capacity = max(end + GROWTH_MARGIN, 2 * self._length)
        batch, heads = key_states.shape[:2]
        keys = key_states.new_empty((batch, heads, capacity, key_states.shape[-1]))
        values = value_states.new_empty((batch, heads, capacity, value_states.shape[-1]))
        if self._length:
            keys[..., : self._length, :] = self.keys
            values[..., : self._length, :] = self.values
        self._key_buffer, self._value_buffer = keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._length + key_states.shape[-2]
        self._reserve(key_states, value_states, end)
        self._key_buffer[..., self._length : end, :] = key_states
        self._value_buffer[..., self._length : end, :] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._length if self.is_initialized else 0

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        self._length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes the number of tokens to remove as a negative integer, got {tokens_to_remove}")
        if tokens_to_remove and self.is_initialized:
            self._length = max(0, self._length + tokens_to_remove)
            self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._expose()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._key_buffer = self._key_buffer[indices, ...]
            self._value_buffer = self._value_buffer[indices, ...]
            self._expose()


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` whose layers are :class:`GrowingLayer` (no per-step copy of the cache)."""

    def __init__(self) -> None:
        require_cache_layer_api()  # the layers override DynamicLayer's internals: a tested transformers only
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)

    @classmethod
    def zeros_like(cls, template: Cache, batch_size: int, length: int) -> GrowingCache:
        """A cache of ``batch_size`` rows and ``length`` zero positions, with ``template``'s layers' heads and dims.

        Rows are then filled in place through each layer's ``keys`` and ``values`` (views of the buffers).
        """
        cache = cls()
        for source in template.layers:
            keys = source.keys.new_zeros((batch_size, source.keys.shape[1], length, source.keys.shape[-1]))
            values = source.values.new_zeros((batch_size, source.values.shape[1], length, source.values.shape[-1]))
            layer = GrowingLayer()
            layer.update(keys, values)
            cache.layers.append(layer)
        return cache


class PrefixStates:
    """The KV caches of the last few prompt prefixes a frozen model computed, reused by later calls.

    A world model's or judge's prompts all start with the same system prompt (~820 tokens); prefilling it
    costs about as much as a third of a dream page's whole call on a CPU. Each kept prefix holds
    ``2 * layers * kv_heads * head_dim * 4`` bytes a token (~38 MB for SmolLM2-135M's 820-token system prompt).

    Args:
        max_prefixes: Most prefixes kept; the least recently used goes first.
    """

    def __init__(self, max_prefixes: int = 2) -> None:
        self.max_prefixes = max_prefixes
        self._states: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        #: Calls served from a kept prefix, and prefixes computed.
        self.hits = self.misses = 0

    def cache_for(self, prefix: Sequence[int], compute: Callable[[GrowingCache], None]) -> GrowingCache:
        """A one-row cache holding ``prefix``'s keys and values: copied from a kept state, or filled by
        ``compute(cache)`` (which runs the prefix through the model into ``cache``) and then kept."""
        key = tuple(prefix)
        state = self._states.get(key)
        if state is None:
            self.misses += 1
            cache = GrowingCache()
            compute(cache)
            self._states[key] = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
            while len(self._states) > self.max_prefixes:
                self._states.popitem(last=False)
            return cache
        self.hits += 1
        self._states.move_to_end(key)
        return one_row_cache(state)


def one_row_cache(state: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> GrowingCache:
    """A one-row :class:`GrowingCache` holding copies of ``state``'s keys and values (layer by layer)."""
    cache = GrowingCache()
    for keys, values in state:
        layer = GrowingLayer()
        layer.update(keys, values)  # copies into the layer's own buffers: the kept state stays untouched
        cache.layers.append(layer)
    return cache


class PromptStates:
    """The KV caches of the last whole prompts a frozen model prefilled, for later prompts that extend one.

    An agent's next prompt is its last one plus the answer it gave and the new page (one growing conversation), so
    after a hit only that tail is prefilled. On a CPU, a long task's turn otherwise prefills its whole history
    again: 81% of an evaluation's time on the long tasks. A kept prompt of ``n`` tokens holds
    ``2 * layers * kv_heads * head_dim * 4 * n`` bytes (~46 kB a token for SmolLM2-135M).

    Args:
        max_bytes: Most bytes kept over all prompts; the least recently used goes first.
    """

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = max_bytes
        self._states: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self._bytes = 0
        #: Prompts that extended a kept one, and prompts that did not.
        self.hits = self.misses = 0

    def longest(self, ids: Sequence[int], longer_than: int) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The longest kept prompt that ``ids`` extends (strictly: a token must be left to prefill) and is longer
        than ``longer_than`` tokens, as ``(length, state)``; ``(0, [])`` when none is."""
        best: tuple[int, ...] = ()
        for key in self._states:
            if longer_than < len(key) < len(ids) and len(key) > len(best) and tuple(ids[: len(key)]) == key:
                best = key
        if not best:
            self.misses += 1
            return 0, []
        self.hits += 1  # left where it was: its extension, kept next, is the likelier one to be extended again
        return len(best), self._states[best]

    def keep(self, ids: Sequence[int], cache: Cache) -> None:
        """Keep the keys and values of ``ids`` (row 0 of ``cache``'s first ``len(ids)`` positions)."""
        key = tuple(ids)
        if key in self._states:
            self._states.move_to_end(key)
            return
        state = [
            (layer.keys[:1, :, : len(key)].clone(), layer.values[:1, :, : len(key)].clone()) for layer in cache.layers
        ]
        size = sum(keys.nbytes + values.nbytes for keys, values in state)
        if size > self.max_bytes:
            return
        self._states[key] = state
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, dropped = self._states.popitem(last=False)
            self._bytes -= sum(keys.nbytes + values.nbytes for keys, values in dropped)


__all__ = ["GrowingCache", "GrowingLayer", "PrefixStates", "PromptStates", "one_row_cache"]
