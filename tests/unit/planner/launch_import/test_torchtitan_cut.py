"""torchtitan's own pipeline cut, against pytorch/torchtitan v0.2.2's
torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part and pipeline_llm."""

from __future__ import annotations

import pytest

from planner.launch_import.torchtitan_cut import CutError, torchtitan_cut


def test_the_docstrings_example_and_the_default_weights():
    # generate_llm_fqn_per_model_part(2, 3, input_weight=2, output_weight=2): 7 weighed layers, 4 and 3,
    # less 2 each for the embedding and the output: layers 0-1, then 2
    assert torchtitan_cut(3, 2, False, first=2, last=2) == (2, 1)
    # Llama 3 8B's 32 layers over 4 ranks, the defaults (1, 1): 34 weighed, 9 9 8 8, less 1 at each end
    assert torchtitan_cut(32, 4, False) == (8, 9, 8, 7)
    # interleaved: two parts a rank, 34 weighed over 8: 5 5 4 4 4 4 4 4, less 1 at each end
    assert torchtitan_cut(32, 4, True) == (4, 5, 4, 4, 4, 4, 4, 3)


def test_layers_per_stage_sets_the_parts():
    # ceil((32 + 1 + 1) / 5) = 7 parts: not a multiple of 4 ranks
    with pytest.raises(CutError, match="7 model parts of 5 layers do not divide over 4"):
        torchtitan_cut(32, 4, True, layers_per_stage=5)
    assert len(torchtitan_cut(30, 4, True, layers_per_stage=4)) == 8  # ceil(32 / 4)
    with pytest.raises(CutError, match="a single-stage schedule runs one"):
        torchtitan_cut(30, 4, False, layers_per_stage=4)


def test_what_torchtitan_refuses():
    with pytest.raises(CutError, match="more than the 4 weighed layers"):
        torchtitan_cut(2, 4, True)
    with pytest.raises(CutError, match="less than the first or last"):
        torchtitan_cut(2, 2, False, first=3, last=0)
