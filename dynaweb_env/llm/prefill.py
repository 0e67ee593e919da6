"""Prefill for :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`'s own decoding loop.

A prompt batch is prefilled as ``[shared prefix | left padding | rest of the prompt]`` rows: the prefix the prompts
share is computed once; a frozen model's first chat turn (the system prompt) comes from
:class:`~dynaweb_env.llm.kv_cache.PrefixStates`; on a CPU each rest is prefilled alone (no padding computed), a rest
identical to an earlier row's once, and a prompt that extends a kept one
(:class:`~dynaweb_env.llm.kv_cache.PromptStates`) from where that one ended.
"""

from __future__ import annotations

from typing import Any

import torch

from .call_plan import MIN_SHARED_PREFIX, first_turn_length, shared_prefix_length


class PrefillMixin:
    """The prefill half of :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`.

    It reads the backend's ``model``, ``device``, ``pad_token_id``, ``share_prefix``, ``prefix_states``,
    ``prompt_states``, ``prefill_rows_alone``, ``_logits_to_keep`` and ``_cache_keyword``, and counts the rests it
    prefills alone in ``prefilled_rows``.
    """

    model: Any
    device: torch.device
    pad_token_id: int
    share_prefix: bool
    prefix_states: Any
    prompt_states: Any
    prefill_rows_alone: bool
    prefilled_rows: int
    _logits_to_keep: bool
    _cache_keyword: str

    def last_logits(self, input_ids: torch.Tensor, cache: Any, **kwargs: Any) -> torch.Tensor:
        """Logits of the last position of each row, extending ``cache``."""
        extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
        extra[self._cache_keyword] = cache
        out = self.model(input_ids=input_ids, use_cache=True, **kwargs, **extra)
        return out.logits[:, -1, :]

    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Run the prompts through the model: next-token logits per row, the KV cache and its attention mask.

        Rows are laid out as ``[shared prefix | left padding | rest of the prompt]``; the padding is masked
        out and position ids count real tokens only, so each row sees exactly its own prompt. The shared
        prefix (see the class docstring) is computed once. On a CPU, where prefill is compute-bound and a
        row costs the same alone as in a batch, the rests are prefilled one row at a time so that no
        padding is computed; on an accelerator they go through in one padded batch.
        """
        from .kv_cache import GrowingCache

        device = self.device
        shared = shared_prefix_length(prompts) if self.share_prefix and len(prompts) > 1 else 0
        shared = shared if shared >= MIN_SHARED_PREFIX else 0
        kept = self._kept_prefix_length(prompts, shared)
        shared = max(shared, kept)
        suffixes = [ids[shared:] for ids in prompts]
        width = max(len(ids) for ids in suffixes)
        attention_mask = torch.zeros((len(prompts), shared + width), dtype=torch.long)
        attention_mask[:, :shared] = 1
        for row, ids in enumerate(suffixes):
            attention_mask[row, shared + width - len(ids) :] = 1
        attention_mask = attention_mask.to(device)
        cache = GrowingCache()
        if kept:
            prefix = prompts[0][:kept]
            cache = self.prefix_states.cache_for(
                prefix, lambda fresh: self.last_logits(torch.tensor([prefix], device=device), fresh)
            )
        if shared > kept:
            positions = torch.arange(kept, shared, device=device)[None]
            self.last_logits(torch.tensor([prompts[0][kept:shared]], device=device), cache, position_ids=positions)
        if self.prefill_rows_alone and (len(prompts) > 1 or self.prompt_states is not None):
            logits, cache = self._prefill_rows(prompts[0][:shared], suffixes, width, cache)
            return logits, cache, attention_mask
        if shared:
            cache.batch_repeat_interleave(len(prompts))
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        for row, ids in enumerate(suffixes):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        logits = self.last_logits(input_ids.to(device), cache, attention_mask=attention_mask, position_ids=position_ids)
        return logits, cache, attention_mask

    def _kept_prefix_length(self, prompts: list[list[int]], shared: int) -> int:
        """Tokens of the prompts' common first chat turn (the system prompt), whose KV cache :attr:`prefix_states`
        keeps between calls; 0 where nothing is kept (a live model, or no common first turn)."""
        if self.prefix_states is None or not self.share_prefix:
            return 0
        turn = first_turn_length(prompts[0])
        limit = shared if len(prompts) > 1 else len(prompts[0]) - 1
        return turn if MIN_SHARED_PREFIX <= turn <= limit else 0

    def _prefill_rows(
        self, head: list[int], suffixes: list[list[int]], width: int, prefix: Any
    ) -> tuple[torch.Tensor, Any]:
        """Prefill each row's rest alone after the ``prefix`` cache of the shared ``head``, into one left-padded cache.

        A rest identical to an earlier row's (the copies of one prompt: a planner's samples, several GRPO groups in
        one batch) is computed once; its copies take that row's cache and logits. A prompt that extends one kept in
        :attr:`prompt_states` (the last turn of the same conversation) prefills only what follows it."""
        from .kv_cache import GrowingCache, one_row_cache

        device, shared = self.device, len(head)
        rows: list[torch.Tensor] = []
        batched = None
        first_of: dict[tuple[int, ...], int] = {}
        for row, ids in enumerate(suffixes):
            start = shared + width - len(ids)
            same = first_of.setdefault(tuple(ids), row) if self.share_prefix else row
            if same != row:
                rows.append(rows[same])
                for layer in batched.layers:
                    layer.keys[row, :, start:] = layer.keys[same, :, start:]
                    layer.values[row, :, start:] = layer.values[same, :, start:]
                continue
            self.prefilled_rows += 1
            whole = head + ids
            states = self.prompt_states if self.share_prefix else None
            done, state = states.longest(whole, shared) if states is not None else (0, [])
            cache = one_row_cache(state) if done else prefix
            done = done or shared
            positions = torch.arange(done, len(whole), device=device)[None]
            rows.append(self.last_logits(torch.tensor([whole[done:]], device=device), cache, position_ids=positions))
            if states is not None:
                states.keep(whole, cache)
            if batched is None:  # shaped after the first row's layers; the padding stays zero (and masked)
                batched = GrowingCache.zeros_like(cache, len(suffixes), shared + width)
                for source, target in zip(cache.layers, batched.layers, strict=True):
                    target.keys[:, :, :shared] = source.keys[:, :, :shared]
                    target.values[:, :, :shared] = source.values[:, :, :shared]
            for source, target in zip(cache.layers, batched.layers, strict=True):
                target.keys[row, :, start:] = source.keys[0, :, shared:]
                target.values[row, :, start:] = source.values[0, :, shared:]
                if cache is prefix:
                    source.crop(-len(ids))  # back to the shared prefix for the next row
        return torch.cat(rows), batched
