"""Reading an attention mask of an ONNX graph: causal, none, or something the spec cannot say.

Exporters compute the mask from constants and the inputs' shapes (GPT-2's is a few dozen nodes of
``Range``, ``CumSum``, comparisons and ``Where``); it is evaluated here with ONNX's reference
evaluator (:meth:`networks.importers.onnx.model_graph.Graph.const`) at the graph's sequence length and
compared with the lower-triangular pattern of a causal mask. A mask that depends on the input data
(a padding mask from an ``attention_mask`` input) is refused.
"""

from __future__ import annotations

from networks.importers.onnx.model_graph import Graph

#: An additive mask entry at or below this hides its score (exporters use -inf or the dtype's minimum).
HIDDEN = -1e4


def _kept(g: Graph, k: int):
    """Which scores mask node ``k`` keeps, as a boolean array (its last two axes: queries, keys)."""
    import numpy as np  # noqa: PLC0415 - numpy only when an ONNX import reads a mask

    node = g.nodes[k]
    inputs = [n for n in node.input if n]
    if node.op_type == "Where":
        cond, keep_if_true = node.input[0], g.is_data(node.input[1])
        if g.is_data(cond):
            raise g.fail(k, "the attention mask depends on the input data (a padding mask)",
                         hint="export the model without an attention_mask input")
        mask = np.asarray(g.const(cond, k)).astype(bool)
        return mask if keep_if_true else ~mask
    const = [n for n in inputs if not g.is_data(n)]
    if len(const) != 1:
        raise g.fail(k, "the attention mask depends on the input data (a padding mask)",
                     hint="export the model without an attention_mask input")
    values = np.asarray(g.const(const[0], k)).astype(np.float64)
    sign = -1.0 if node.op_type == "Sub" else 1.0
    return sign * values > HIDDEN


def mask_causal(g: Graph, masks: list[int], seq: int) -> bool:
    """True for a causal mask, False for none (or one hiding nothing); a refusal for any other."""
    import numpy as np  # noqa: PLC0415 - numpy only when an ONNX import reads a mask

    if not masks:
        return False
    kept = np.ones((seq, seq), dtype=bool)
    for k in masks:
        got = _kept(g, k)
        if got.ndim < 2 or got.shape[-2:] not in ((seq, seq), (1, seq), (seq, 1), (1, 1)):
            raise g.fail(k, f"its attention mask is shaped {tuple(got.shape)}, not (..., {seq}, {seq})")
        flat = np.broadcast_to(got, got.shape[:-2] + (seq, seq)).reshape(-1, seq, seq)
        if not (flat == flat[:1]).all():
            raise g.fail(k, "its attention mask differs between samples or heads")
        kept &= flat[0]
    if kept.all():
        return False
    if (kept == np.tril(np.ones((seq, seq), dtype=bool))).all():
        return True
    raise g.fail(masks[0], "its attention mask is neither causal nor empty (a sliding window, padding or "
                 "other pattern the catalogue's attention cannot take)")
