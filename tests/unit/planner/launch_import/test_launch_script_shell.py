"""A launch script's shell words read as bash passes them (planner.launch_import.shell_words):
continuations, comments, variables, arrays, arithmetic, quotes and defaults, conditions,
redirections after the command, and expansions without end refused in one line."""

from __future__ import annotations

import re

import pytest

from networks.errors import DnnplanError
from planner.launch_import import megatron
from planner.launch_import.shell_words import launch_command
from planner.launch_import.trained_network import network_ref
from tests.unit.planner.launch_import.test_launch_import import SMALL


def test_a_launch_script_with_variables_arrays_and_arithmetic():
    text = """#!/bin/bash
# Megatron-LM's examples/gpt3 style
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=2
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE   # one process a GPU
    --nnodes $NUM_NODES
)
MODEL_ARGS=(
    --num-layers 12 --hidden-size 768
    --num-attention-heads 12 --seq-length 1024
    --max-position-embeddings 1024
)
TP=${TP:-2}
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\
    ${MODEL_ARGS[@]} \\
    --tensor-model-parallel-size $TP --sequence-parallel \\
    --micro-batch-size 4 --global-batch-size "$((4 * WORLD_SIZE / TP))" \\
    --bf16 --lr 6e-4 --data-path "$DATA" --save $CHECKPOINT_PATH
"""
    config = megatron.read(text, "train.sh")
    assert config.devices == 16 and config.tensor == 2 and config.sequence_parallel
    assert config.batch == 32 and config.micro_batch == 4 and config.choices.precision == "bf16"
    assert config.shape.num_layers == 12 and config.shape.hidden_size == 768
    assert {i.option for i in config.ignored} == {"--lr", "--data-path", "--save", "--max-position-embeddings"}
    assert network_ref(config, None) == "gpt2"  # the zoo network of that shape


def test_an_unquoted_variable_is_split_into_words_and_a_quoted_one_is_not():
    """As bash splits an expansion outside double quotes (Megatron-LM's older examples write
    ``GPT_ARGS="..."`` then ``torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS``)."""
    text = (f'DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes 2"\nGPT_ARGS="{SMALL} --tensor-model-parallel-size 2"\n'
            "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS\n")
    config = megatron.read(text, "split.sh")
    assert (config.devices, config.tensor, config.shape.num_layers) == (16, 2, 2)
    quoted = launch_command(text.replace("$GPT_ARGS", '"$GPT_ARGS"'), "quoted.sh")
    assert [w.text for w in quoted.args] == [f"{SMALL} --tensor-model-parallel-size 2"]
    with pytest.raises(DnnplanError, match="quoted.sh:2: unknown option '--num-layers 2 --hidden-size.*one word"):
        megatron.read(text.replace("$GPT_ARGS", '"$GPT_ARGS"'), "quoted.sh")
    words = launch_command("A=(x 'y z')\nE=\ntorchrun \"${A[@]}\" ${A[@]} $E \"$E\" '$E' t.py", "w.sh").launcher
    assert [w.text for w in words] == ["torchrun", "x", "y z", "x", "y", "z", "", "$E"]


@pytest.mark.parametrize("head, says", [
    ("X=a\n" + "X=$X$X\n" * 22, "$X holds more than 100,000 characters"),  # doubled 22 times: 4 million
    (f"X={'a' * 90_000}\nY=" + "$X" * 20 + "\n", "expand to more than 1,000,000 characters"),
    ("TP=$(( " + "9" * 400 + " / 1 ))\n", "cannot evaluate"),  # past a float's range
    ("TP=$((" + "+".join(["1"] * 40_000) + "))\n", "cannot evaluate"),  # past the parser's recursion limit
])
def test_a_script_that_would_expand_without_end_is_refused_in_one_line(head, says):
    """A short script whose variables double at each line, or arithmetic Python cannot evaluate,
    ends in one line naming the file, not in a run that fills the memory or an internal error."""
    with pytest.raises(DnnplanError, match=re.escape(says)):
        megatron.read(head + f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --tensor-model-parallel-size $TP "
                      "--log-dir $X\n", "grow.sh")


def test_a_defaults_quotes_are_removed_as_bash_removes_them():
    """``${NAME:-"1"}`` is ``1`` (Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh
    writes ``NNODES=${SLURM_NNODES:-"1"}``); outside double quotes a default's blanks split it,
    inside them its double quotes go and its single quotes stay, as bash expands each."""
    text = ('NNODES=${SLURM_NNODES:-"2"}\nTP=${TP:-"2"}\n'
            f"torchrun --nnodes $NNODES --nproc-per-node 8 pretrain_gpt.py {SMALL} --tensor-model-parallel-size $TP\n")
    config = megatron.read(text, "defaults.sh")
    assert (config.devices, config.tensor) == (16, 2)
    words = launch_command("torchrun ${A:-'x y'} ${A:-x y} \"${A:-\"q\"}\" \"${A:-'q'}\" ${A:-\\\"q} t.py", "d.sh")
    assert [w.text for w in words.launcher] == ["torchrun", "x y", "x", "y", "q", "'q'", '"q']
    # as bash prints them (printf '<%s>'): escapes inside double quotes, ; and > mere characters
    words = launch_command('torchrun "${A:-\\"1\\"}" "${A:-a\\\\b}" "${A:-\\$x}" ${A:-"x";y} ${A:-"a">b} t.py', "d.sh")
    assert [w.text for w in words.launcher] == ["torchrun", '"1"', "a\\b", "$x", "x;y", "a>b"]
    assert not any(w.unresolved for w in words.launcher)
    # a default with an expansion of its own, cut at its first } (Megatron-LM's examples/mimo scripts
    # write ${TORCHRUN_LOG_DIR:-"${PWD}/logs/..."}): the script is still read, the variable unused here
    config = megatron.read('BASE=v\nCKPT=${CKPT:-"${BASE}/ckpt"}\n'
                           f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL}\n", "base.sh")
    assert config.devices == 8


def test_a_quoted_assignment_over_several_lines():
    """``GPT_ARGS="`` newline, lines ending in `` \\``, ``"``: bash takes it (the backslash and the
    newline dropped inside double quotes), and an option keeps the line it was written on."""
    text = ('#!/bin/bash\nGPT_ARGS="\n    --num-layers 2 \\\n    --hidden-size 64 \\\n    --num-attention-heads 4 \\\n'
            '    --seq-length 32 --micro-batch-size 1\n    --tensor-model-parallel-size 3\n"\n'
            "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n    $GPT_ARGS \\\n    --save $CHECKPOINT_PATH\n")
    with pytest.raises(DnnplanError) as err:
        megatron.read(text, "multi.sh")
    assert str(err.value).startswith("multi.sh:7: --tensor-model-parallel-size: 3 does not divide"), str(err.value)
    config = megatron.read(text.replace("--tensor-model-parallel-size 3", "--tensor-model-parallel-size 2"), "multi.sh")
    assert (config.devices, config.tensor, config.shape.hidden_size) == (8, 2, 64)
    with pytest.raises(DnnplanError, match="unclosed.sh:2: a quote \\(\"\\) opened here is not closed"):
        launch_command('A=1\nGPT_ARGS="--num-layers 2\ntorchrun pretrain_gpt.py $GPT_ARGS\n', "unclosed.sh")


@pytest.mark.parametrize("tail", ["2>&1 | tee log.txt", "> log 2>&1", "|& tee log.txt", "&> log", ">>log 2>err &",
                                  "2> /dev/null; echo done", "&& echo done"])
def test_redirections_and_a_pipeline_after_the_command_are_no_arguments(tail):
    config = megatron.read(f"torchrun --nproc-per-node 4 pretrain_gpt.py {SMALL} --tensor-model-parallel-size 2 "
                           f"{tail}\n", "log.sh")
    assert (config.devices, config.tensor, config.micro_batch) == (4, 2, 1)


@pytest.mark.parametrize("head, says", [
    ('if [ -z "$X" ]; then TP=4; else TP=2; fi\n', "$TP, which the file sets to '4' or '2' by a condition (line 1)"),
    ('TP=2\n[ -n "$BIG" ] && TP=4\n', "$TP, which the file sets to '2' or '4' by a condition (line 2)"),
    ('case $SIZE in\n big) TP=4 ;;\n *) TP=2 ;;\nesac\n', "$TP, which the file sets to '4' or '2' by a condition"),
    ("for TP in 1 2 4; do\n", "$TP, a for loop's variable (line 1), one value a pass"),
])
def test_a_variable_set_one_way_or_another_by_a_condition_is_refused_where_it_matters(head, says):
    """bash runs the branch its condition picks; the file alone does not settle it, so the option
    that uses it is refused, naming the variable and the condition's line (not the last value written)."""
    text = head + f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --tensor-model-parallel-size $TP\n" + \
        ("done\n" if head.startswith("for") else "")
    with pytest.raises(DnnplanError) as err:
        megatron.read(text, "run.sh")
    assert "--tensor-model-parallel-size" in str(err.value) and says in str(err.value), str(err.value)


@pytest.mark.parametrize("head", ['if [ -z "$TP" ]; then TP=2; fi\n', '[ -z "$TP" ] && TP=2\n',
                                  "if true; then\n  echo hi\nfi\nTP=2\n", "for N in 1; do :; done\nTP=2\n",
                                  'TP=2\nif [ -n "$X" ]; then TP=2; fi\n'])
def test_a_variable_the_file_settles_is_read_however_it_is_written(head):
    """Set under a condition where it had no value (the environment's default, as ``${TP:-2}``),
    the same value again, or after the compound command closed: its value."""
    got = megatron.read(head + f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --tensor-model-parallel-size $TP\n",
                        "run.sh")
    assert got.tensor == 2
