"""Costs of Einsum and of fused attention ops.

Attention exported as separate ops (Q/K/V MatMuls, MatMul, Softmax, MatMul) is costed op
by op; these are the fused forms:

- ``Attention`` (ONNX opset 23+): Q, K, V as [B, heads, S, head] or [B, S, hidden] with
  ``q_num_heads``/``kv_num_heads``; past keys/values lengthen the key sequence.
- ``com.microsoft.Attention`` (onnxruntime): the input projection to Q, K, V
  (``weights`` [in, q+k+v hidden], ``bias``) and self-attention with ``num_heads``.

MACs are ``B*heads*Sq*Skv*(dk + dv)`` for scores and context (plus the projection for
the contrib op); FLOPs add one per score for scaling, one for a mask, 5 per score for
the softmax (as ``Softmax`` elsewhere) and one per projected element for the bias.

Einsum is costed as a naive evaluation over its full iteration space: with n operands,
``(n - 1)`` multiply-accumulates per point (an optimized contraction order may do
fewer); a single operand costs one add per input element when an index is summed away,
nothing when it only permutes or takes a diagonal.
"""

from __future__ import annotations

import math

from engine.graph.costs import OpShapes, Shape, Work, register

_SOFTMAX_FLOPS = 5


def _scores_work(scores: int, dk: int, dv: int, masked: bool) -> Work:
    macs = scores * (dk + dv)
    return macs, 2 * macs + scores * (1 + _SOFTMAX_FLOPS + (1 if masked else 0))


@register("Attention")
def _attention(s: OpShapes) -> Work | None:
    q, k, v = s.input(0), s.input(1), s.input(2)
    if q is None or k is None or v is None or len(q) != len(k) or len(q) not in (3, 4):
        return None
    past = s.input(4)
    if len(q) == 4:
        batch, heads, sq, dk = q
        skv, dv = k[2], v[3]
    else:
        heads = int(s.attributes.get("q_num_heads", 0))
        kv_heads = int(s.attributes.get("kv_num_heads", 0))
        if not heads or not kv_heads:
            return None
        batch, sq, dk, skv, dv = q[0], q[1], q[2] // heads, k[1], v[2] // kv_heads
    if past is not None:
        skv += past[2]
    return _scores_work(batch * heads * sq * skv, dk, dv, s.input(3) is not None)


@register("Attention", domain="com.microsoft")
def _contrib_attention(s: OpShapes) -> Work | None:
    x, weights = s.input(0), s.input(1)
    heads = int(s.attributes.get("num_heads", 0))
    if x is None or weights is None or len(x) != 3 or len(weights) != 2 or not heads:
        return None
    batch, seq, _ = x
    sizes = s.attributes.get("qkv_hidden_sizes") or [weights[1] // 3] * 3
    q_hidden, _, v_hidden = (int(n) for n in sizes)
    past = s.input(4)  # [2, B, heads, past_seq, head]
    skv = seq + (past[3] if past is not None and len(past) == 5 else 0)
    projection = batch * seq * weights[0] * weights[1]
    macs, flops = _scores_work(
        batch * heads * seq * skv, q_hidden // heads, v_hidden // heads, s.input(3) is not None
    )
    bias = batch * seq * weights[1] if s.input(2) is not None else 0
    return macs + projection, flops + 2 * projection + bias


@register("Einsum")
def _einsum(s: OpShapes) -> Work | None:
    equation = str(s.attributes.get("equation", "")).replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(s.inputs) or any(shape is None for shape in s.inputs):
        return None
    sizes: dict[str, int] = {}
    batch: Shape = ()
    for term, shape in zip(terms, s.inputs, strict=True):
        parsed = _bind(term, shape)
        if parsed is None:
            return None
        letters, dims, ellipsis = parsed
        batch = _broadcast(batch, ellipsis)
        for letter, dim in zip(letters, dims, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), dim)
    space = math.prod(sizes.values()) * math.prod(batch)
    if len(terms) > 1:
        macs = (len(terms) - 1) * space
        return macs, 2 * macs
    if "->" not in equation:
        rhs = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    summed = {c for c in lhs if c.isalpha()} - set(rhs)
    return 0, (math.prod(s.inputs[0]) if summed else 0)


def _bind(term: str, shape: Shape | None) -> tuple[str, Shape, Shape] | None:
    """Split ``term`` against ``shape``: (letters, their dims, the dims under '...')."""
    if shape is None:
        return None
    before, dots, after = term.partition("...")
    covered = len(shape) - len(before) - len(after) if dots else 0
    if covered < 0 or (not dots and len(term) != len(shape)):
        return None
    ellipsis = shape[len(before) : len(before) + covered]
    return before + after, shape[: len(before)] + shape[len(before) + covered :], ellipsis


def _broadcast(a: Shape, b: Shape) -> Shape:
    width = max(len(a), len(b))
    a, b = (1,) * (width - len(a)) + a, (1,) * (width - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))
