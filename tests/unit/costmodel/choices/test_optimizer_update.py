"""The optimiser update as a framework runs it (costmodel.choices.optimizer): bytes an unfused AdamW
moves per element against a hand count, and the step's update priced by them."""

from __future__ import annotations

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.compute.model import update_bytes
from costmodel.machine.loading import load_machine
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer, unfused_adamw_bytes
from costmodel.choices.precision import with_precision
from costmodel.step.prediction import predict_step
from networks.loader import load_network

H100 = load_machine("dgx-h100")
ROOF = Roofline(H100)
GPT2 = with_precision(load_network("gpt2"), "bf16")


def test_an_unfused_adamw_update_moves_its_ops_bytes():
    """Composer's DecoupledAdamW on float32 shards, by hand per element: decay (read and write the
    weight, 8), exp_avg.mul_ (8) and .add_(grad) (12), exp_avg_sq.mul_ (8) and .addcmul_ (12),
    sqrt, division and + eps (8 each), addcdiv_ (read weight, exp_avg, denom, write weight: 16):
    88; clipping by norm (the norm reads the gradient, the scaling reads and writes it): 12 more.
    The step prices each layer's update at that over the fused step's 28 (memory-bound)."""
    assert unfused_adamw_bytes(4, 4, clip=False) == 88 and unfused_adamw_bytes(4, 4) == 100
    assert update_bytes(2, 2) == 28
    strategies, _ = megatron_strategies(GPT2, 16, 2, 1, False)

    def run(opt):
        return predict_step(GPT2, 32, strategies, default_algorithms(GPT2), H100, ROOF, opt)

    fused, unfused = run(Optimizer("adam", 3)), run(Optimizer("adam", 3, update_bytes=100))
    assert unfused.update_s == pytest.approx(fused.update_s * 100 / 28, rel=1e-9) and fused.update_s > 0
    assert unfused.fwd_s == fused.fwd_s and unfused.bwd_s == fused.bwd_s


def test_a_float32_gradient_buffer_is_read_by_the_update():
    """Megatron-LM's float32 main_grad under bf16 weights: the fused Adam step reads 4 gradient bytes
    an element instead of 2 (28 + 2 = 30 bytes), so its memory-bound update takes 30/28 as long."""
    strategies, _ = megatron_strategies(GPT2, 16, 2, 1, False)

    def run(opt):
        return predict_step(GPT2, 32, strategies, default_algorithms(GPT2), H100, ROOF, opt)

    plain, wide = run(Optimizer("adam", 1)), run(Optimizer("adam", 1, reduce_bytes=4, grad_bytes=4))
    assert wide.update_s == pytest.approx(plain.update_s * 30 / 28, rel=1e-9) and plain.update_s > 0
    assert wide.fwd_s == plain.fwd_s and wide.bwd_s == plain.bwd_s
