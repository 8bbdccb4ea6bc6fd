"""When no plan fits (planner.refusal): the memory a refusal names counts gradient accumulation (a
stack's micro-batches of one sample need far less than the whole batch at once), where the search
finds a plan."""

from __future__ import annotations

import re

import pytest

from costmodel.choices.training import TrainingChoices
from networks.errors import DnnplanError
from planner.first_plan import first_plan
from planner.problem.solve import Settings
from planner.refusal import accumulation_memory, least_memory, refusal
from profiler import context

GIB = 2.0 ** 30
CHOICES = TrainingChoices(precision="bf16", optimizer="adam")


@pytest.fixture(scope="module")
def tiny():
    ctx = context.resolve("gpt2", 8, 128, "dgx-a100", None, False, CHOICES)
    settings = Settings(choices=CHOICES)
    need = least_memory(ctx.network, 128, 8, ctx.machine, ctx.compute, settings)
    accumulated = accumulation_memory(ctx.network, 8, ctx.machine, ctx.compute, settings)
    return ctx, settings, need, accumulated


def _plan(ctx, settings, limit: float):
    return first_plan(ctx.network, "gpt2", 128, 8, ctx.machine, ctx.compute, limit, settings,
                      machine_ref="dgx-a100", fingerprint=None)


def test_accumulation_needs_less_than_the_whole_batch_and_a_plan_fits_between(tiny):
    ctx, settings, need, accumulated = tiny
    assert accumulated < need / 4  # 128 samples at once against one at a time
    answer = _plan(ctx, settings, (accumulated + need) / 2)  # the whole batch at once fits nothing here
    assert answer.pipeline is not None and answer.pipeline.micro_batches > 1


def test_the_memory_named_is_the_least_of_at_once_and_accumulated(tiny):
    ctx, settings, need, accumulated = tiny
    err = refusal(ctx.network, 128, 8, ctx.machine, ctx.compute, accumulated / 2, settings, pipelined=True)
    text = str(err)
    # a floor of one stage over every device, said as that: a pipeline's stages may hold less
    assert f"the least a plan of one stage needs is {need / GIB:.3f} GiB per device at once" in text
    assert f"{accumulated / GIB:.3f} GiB accumulating micro-batches of one sample" in text
    named = float(re.search(r"--memory ([0-9.]+) \(GiB a device, a pipeline perhaps less\)", err.hint).group(1)) * GIB
    assert accumulated <= named < need / 4  # not the whole batch's, many times more than needed
    with pytest.raises(DnnplanError):  # and what was refused is refused by the search too
        _plan(ctx, settings, accumulated / 2)


def test_a_network_that_is_no_stack_names_the_whole_batch_alone():
    ctx = context.resolve("lenet5", 2, 64, "dgx-h100", None, False, TrainingChoices())
    settings = Settings(choices=TrainingChoices())
    assert accumulation_memory(ctx.network, 2, ctx.machine, ctx.compute, settings) is None
    err = refusal(ctx.network, 64, 2, ctx.machine, ctx.compute, 1e3, settings, pipelined=False)
    assert "the least a plan of one stage needs is" in str(err) and "accumulating" not in str(err)


def test_with_pipelines_off_every_alternative_named_is_one_the_whole_batch_at_once_fits(tiny):
    """`--pipeline off` plans the whole batch at once: an alternative that fits only accumulated or
    pipelined is not named "checked" (it was: --devices 2x with half the need still over the limit),
    and each one named is a plan `--pipeline off` then finds."""
    ctx, settings, need, accumulated = tiny
    limit = need / 3  # accumulation fits (need/4 > accumulated), the batch at once does not
    both = refusal(ctx.network, 128, 8, ctx.machine, ctx.compute, limit, settings, pipelined=True)
    alone = refusal(ctx.network, 128, 8, ctx.machine, ctx.compute, limit, settings, pipelined=False, pipelines=False)
    assert "--devices 16" in both.hint  # accumulation at 16 devices fits
    devices = int(re.search(r"--devices (\d+)", alone.hint).group(1))
    batch = int(re.search(r"--batch (\d+)", alone.hint).group(1))
    assert least_memory(ctx.network, 128, devices, ctx.machine, ctx.compute, settings) <= limit
    assert least_memory(ctx.network, batch, 8, ctx.machine, ctx.compute, settings) <= limit
    assert devices > 16 and batch < 64
