"""Costs of the recurrent ops LSTM, GRU and RNN (ONNX layout, any direction).

MACs per time step, batch element and direction are ``gates*H * (input + H)``: every
gate row multiplies the input ``x_t`` (W) and the previous hidden state (R). The count
runs over the full sequence length of ``X`` (``sequence_lens`` may stop some batch
entries early: this is the upper bound). FLOPs are ``2 * MACs`` plus, per step, batch
element and direction, the elementwise work in units of H:

- LSTM: 4 gate activations + 5 for the cell (f*c, i*g, add, tanh(c), o*tanh(c)) = 9;
  bias 8 (Wb and Rb added to 4 gates); peepholes 6 (3 multiplies, 3 adds).
- GRU: 3 gate activations + 1 (r * (R h)) + 4 ((1-z)*h~ + z*h) = 8; bias 6.
- RNN: 1 activation; bias 2.
"""

from __future__ import annotations

from engine.graph.costs import CostFn, OpShapes, Work, register

_BIAS_INPUT, _PEEPHOLE_INPUT = 3, 7


def _recurrent(elementwise: int, bias: int, peephole: int = 0) -> CostFn:
    def cost(s: OpShapes) -> Work | None:
        x, w, r = s.input(0), s.input(1), s.input(2)
        if x is None or w is None or r is None or len(x) != 3 or len(w) != 3 or len(r) != 3:
            return None
        steps, batch = (x[1], x[0]) if s.attributes.get("layout", 0) else (x[0], x[1])
        directions, gate_rows, features = w
        hidden = r[2]
        runs = steps * batch * directions
        macs = runs * gate_rows * (features + hidden)
        per_hidden = elementwise
        if s.input(_BIAS_INPUT) is not None:
            per_hidden += bias
        if peephole and s.input(_PEEPHOLE_INPUT) is not None:
            per_hidden += peephole
        return macs, 2 * macs + runs * per_hidden * hidden

    return cost


register("LSTM")(_recurrent(elementwise=9, bias=8, peephole=6))
register("GRU")(_recurrent(elementwise=8, bias=6))
register("RNN")(_recurrent(elementwise=1, bias=2))
