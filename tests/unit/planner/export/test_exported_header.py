"""The two comment lines `dnnplan export` writes at a launch file's top, read back
(planner.export.exported_header): the devices, machine, step and framework of the first, the plan
and network of the second, whatever the plan's path holds."""

from __future__ import annotations

import pytest

from planner.export.exported_header import from_line, header_line, written_for


@pytest.mark.parametrize("plan", ["plan.yaml", "runs/my plan (v2).yaml", "/abs/p.json"])
@pytest.mark.parametrize("network", ["Qwen2-7B", "Llama-3.2-1B (copy)"])
def test_the_plan_and_network_of_the_second_line_read_back(plan, network):
    text = "\n".join([header_line(4.17, 64, "dgx-h100", "pytorch"),
                      from_line(plan, network, "option names", "NVIDIA/Megatron-LM d98e8a6 (Megatron-Core 0.20.0)"),
                      "torchrun pretrain_gpt.py --num-layers 2"])
    got = written_for(text)
    assert (got.devices, got.machine, got.step_s, got.framework) == (64, "dgx-h100", 4.17, "pytorch")
    assert (plan, network) in got.origins()  # one of the splits at " (": the caller keeps the plan found


def test_a_file_without_the_second_line_names_no_plan():
    got = written_for(header_line(1.5, 8, "dgx-a100") + "\n# edited by hand\n--num-layers 2\n")
    assert got.devices == 8 and got.origin is None and got.origins() == []
    assert written_for("# from plan.yaml (gpt2); option names as in x\n") is None  # no dnnplan line above it
