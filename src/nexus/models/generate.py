"""Sampling with a KV cache (temperature, top-k, top-p) for any nexus model with `new_cache()`."""

from __future__ import annotations

import torch

from .bitlinear import hold_quantized_weights
from .cache import LayerCache


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits (B, V) -> next ids (B, 1). temperature 0 means greedy."""
    if temperature <= 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # drop tokens whose preceding cumulative mass already reaches top_p (keeps at least one)
        drop = probs.cumsum(-1) - probs >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator)


@torch.no_grad()
def generate(
    model,
    input_ids: torch.Tensor,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Append up to max_new_tokens to input_ids (B, T). Prefill once, then one token per step. Ids of any
    integer dtype are accepted (uint8 ids from a byte buffer too) and returned as int64."""
    check_generate_args(model, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, use_cache)
    input_ids = input_ids.long()  # embedding lookups take int64 (int32 on some kernels, never uint8/int16)
    was_training = model.training
    model.eval()
    try:
        # The weights cannot change during one call: quantize ternary (BitLinear) layers once for it.
        with hold_quantized_weights(model):
            return _decode(model, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, generator, use_cache)
    finally:
        model.train(was_training)


def check_generate_args(
    model, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, use_cache: bool = True
) -> None:
    """What `nexus generate` checks on its flags, for the Python API: a ValueError/TypeError naming the argument.
    A prompt longer than the context is refused with the cache (which cannot slide: nothing would be
    generated); a generation the context cuts short is said with a warning (the CLI prints a note)."""
    import math
    import numbers
    import warnings

    def bad(name, value, valid, kind=ValueError):
        raise kind(f"generate: {name}={value!r} (valid: {valid})")

    if not torch.is_tensor(input_ids):
        bad("input_ids", type(input_ids).__name__, "a tensor of token ids, shape (batch, length)", TypeError)
    if input_ids.dim() != 2:
        bad("input_ids", f"a {input_ids.dim()}-D tensor", "a 2-D tensor (batch, length); a single prompt is ids[None]")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        bad("input_ids", f"dtype {input_ids.dtype}", "an integer tensor of token ids")
    if input_ids.numel() == 0:
        bad("input_ids", f"shape {tuple(input_ids.shape)}", "a non-empty prompt (at least one token per row)")
    vocab = getattr(getattr(model, "cfg", None), "vocab_size", None)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or (vocab is not None and hi >= vocab):
        bad("input_ids", f"ids in [{lo}, {hi}]", f"ids in the vocabulary [0, {vocab})")
    if not isinstance(max_new_tokens, numbers.Integral) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        bad("max_new_tokens", max_new_tokens, "an integer >= 0")
    if not isinstance(temperature, numbers.Real) or not math.isfinite(temperature) or temperature < 0:
        bad("temperature", temperature, "a finite number >= 0 (0 = greedy)")
    if not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool) or top_k < 0:
        bad("top_k", top_k, "an integer >= 0 (0 = off)")
    # numbers.Real declares only < and <= (as the ABC does); every Real that reaches here (int, float, numpy) has >
    if not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:  # type: ignore[operator]
        bad("top_p", top_p, "a number in (0, 1]")
    if eos_id is not None and (
        not isinstance(eos_id, numbers.Integral)
        or isinstance(eos_id, bool)
        or eos_id < 0
        or (vocab is not None and eos_id >= vocab)
    ):
        bad("eos_id", eos_id, f"None or a token id in [0, {vocab})" if vocab is not None else "None or a token id >= 0")
    context = getattr(getattr(model, "cfg", None), "max_seq_len", None)
    if use_cache and context is not None:
        if input_ids.shape[1] > context:
            bad(
                "input_ids",
                f"a prompt of {input_ids.shape[1]} tokens",
                f"at most the model's context of {context} tokens (keep its last {context}: input_ids[:, -{context}:])",
            )
        room = context - input_ids.shape[1] + 1  # the last new token is never fed back
        if max_new_tokens > room:
            warnings.warn(
                f"generate: the model's context is {context} tokens; generation stops after {room} new "
                f"tokens, not max_new_tokens={max_new_tokens}",
                stacklevel=3,
            )


def _decode(model, input_ids, max_new_tokens, temperature, top_k, top_p, eos_id, generator, use_cache):
    ids = input_ids
    cache = None
    if use_cache:
        cache = model.new_cache()
        capacity = input_ids.shape[1] + max_new_tokens
        max_len = getattr(model.cfg, "max_seq_len", None)
        capacity = min(capacity, max_len) if max_len else capacity
        for layer in getattr(cache, "layers", []):  # one allocation per history for the whole call
            if isinstance(layer, LayerCache):
                layer.capacity = capacity
    step_input = ids
    finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    max_len = getattr(model.cfg, "max_seq_len", None)
    fast_step = None  # the model's one-token decoder (models/decode.py), set up after the prefill
    for step in range(max_new_tokens):
        if cache is None:
            ctx_ids = ids if max_len is None else ids[:, -max_len:]
            logits = model(ctx_ids).logits[:, -1]
        else:
            if max_len is not None and cache.pos + step_input.shape[1] > max_len:
                break  # the cache cannot slide past the trained context; stop rather than extrapolate
            if fast_step is not None:
                logits = fast_step(step_input)
            else:
                logits = model(step_input, cache=cache).logits[:, -1]
                if step == 0 and max_new_tokens > 1 and hasattr(model, "fast_decoder"):
                    fast_step = model.fast_decoder(cache)
        nxt = sample_next(logits, temperature, top_k, top_p, generator)
        if eos_id is not None:
            nxt = torch.where(finished[:, None], torch.full_like(nxt, eos_id), nxt)
            finished |= nxt[:, 0] == eos_id
        ids = torch.cat([ids, nxt], dim=1)
        step_input = nxt
        if eos_id is not None and bool(finished.all()):
            break
    return ids
