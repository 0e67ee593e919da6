"""The LM head on the positions that count only: the CPU shortcut of both the GSPO and the SFT trainers.

A web episode is ~1k tokens of system prompt and pages for a few dozen policy tokens. TRL 1.16's fused LM head
scores every position (without Triton, i.e. on CPU, in chunks over the whole vocabulary), so >90% of the head's
work and memory goes to positions without a loss. Both trainers run the backbone once and hand the hidden states
of the positions that count (GSPO: the completion; SFT: the labelled tokens) to :func:`score_positions`, which
runs the head on them a chunk at a time, under activation checkpointing when gradients flow, so the
``(positions, vocab)`` logits never exist at once.
"""

from __future__ import annotations

from typing import Any

import torch


def score_positions(
    head: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 128,
    compute_entropy: bool = True,
    compute_top1: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of ``targets`` under ``log_softmax(head(hidden) / temperature)``, chunk by chunk.

    Args:
        head: The LM head (``model.get_output_embeddings()``); it runs in its own dtype (fp32 on CPU) on the few
            positions scored: bf16 logits over the whole vocabulary would cost log-probability precision for
            almost no time.
        hidden: Hidden states ``(..., positions, hidden_size)``.
        targets: Token ids ``(..., positions)``.
        temperature: Divides the logits (the sampling temperature of the log-probs).
        chunk_tokens: Positions scored per head call.
        compute_entropy: Also the entropy of each position's distribution (zeros otherwise).
        compute_top1: Also whether each target is the head's top token.

    Returns:
        ``(logps, entropies, is_top1)`` shaped like ``targets`` (``is_top1`` is ``None`` unless asked for).
    """

    def score(hidden_chunk: torch.Tensor, target_chunk: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logps = torch.log_softmax(head(hidden_chunk.to(head.weight.dtype)).float() / temperature, dim=-1)
        entropy = -(logps.exp() * logps).sum(-1) if compute_entropy else logps.new_zeros(target_chunk.shape)
        chosen = logps.gather(-1, target_chunk.unsqueeze(-1)).squeeze(-1)
        return (chosen, entropy, logps.argmax(-1) == target_chunk) if compute_top1 else (chosen, entropy)

    positions = targets.shape[-1]
    if positions == 0:
        empty = hidden.new_zeros(targets.shape, dtype=torch.float32)
        return empty, empty.clone(), (torch.zeros_like(targets, dtype=torch.bool) if compute_top1 else None)
    pieces = []
    for start in range(0, positions, chunk_tokens):
        chunk = (hidden[..., start : start + chunk_tokens, :], targets[..., start : start + chunk_tokens])
        if torch.is_grad_enabled():
            pieces.append(torch.utils.checkpoint.checkpoint(score, *chunk, use_reentrant=False))
        else:
            pieces.append(score(*chunk))
    logps = torch.cat([piece[0] for piece in pieces], dim=-1)
    entropies = torch.cat([piece[1] for piece in pieces], dim=-1)
    is_top1 = torch.cat([piece[2] for piece in pieces], dim=-1) if compute_top1 else None
    return logps, entropies, is_top1


def completion_logps_and_entropies(
    causal_lm: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float,
    batch_size: int | None = None,
    compute_entropy: bool = False,
    chunk_tokens: int = 128,
) -> tuple[torch.Tensor, torch.Tensor | None, None]:
    """``log softmax(head(h) / T)`` at the last ``logits_to_keep`` tokens (0 where ``attention_mask`` is 0).

    The backbone (``causal_lm.base_model``) runs over the whole sequence; the LM head only over the
    completion positions (:func:`score_positions`). Returns TRL's ``(logps, entropies, aux_loss)``.
    """
    backbone, head = causal_lm.base_model, causal_lm.get_output_embeddings()
    batch_size = batch_size or input_ids.size(0)
    all_logps, all_entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        logps, entropies, _ = score_positions(
            head, hidden[:, -logits_to_keep - 1 : -1], ids[:, -logits_to_keep:], temperature=temperature,
            chunk_tokens=chunk_tokens, compute_entropy=compute_entropy,
        )  # fmt: skip
        keep = mask[:, -logits_to_keep:].to(torch.float32)
        all_logps.append(logps * keep)
        all_entropies.append(entropies * keep)
    entropies = torch.cat(all_entropies) if compute_entropy else None
    return torch.cat(all_logps), entropies, None


__all__ = ["completion_logps_and_entropies", "score_positions"]
