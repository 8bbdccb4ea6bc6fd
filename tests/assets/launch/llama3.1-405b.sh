#!/bin/bash
# Llama 3.1 405B pretraining with Megatron-LM on 256 nodes of 8 H100s, written as Megatron-LM's own
# examples write a launch (examples/gpt3/train_gpt3_175b_distributed.sh: bash arrays of arguments).
# Tensor 8 with sequence parallelism, 16 pipeline stages, the embedding and the loss counted as
# layers in the split (126 transformer layers + 2 = 8 a stage), data 16.
# `dnnplan predict --from tests/assets/launch/llama3.1-405b.sh --machine dgx-h100` predicts it.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=256
CHECKPOINT_PATH=$1
DATA_PATH=$2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --rdzv_backend c10d
    --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT"
)

MODEL_ARGS=(
    --num-layers 126
    --hidden-size 16384
    --ffn-hidden-size 53248
    --num-attention-heads 128
    --group-query-attention
    --num-query-groups 8
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type rope
    --rotary-base 500000
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 8
    --sequence-parallel
    --pipeline-model-parallel-size 16
    --account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 2048
    --train-iters 1200000
    --lr 8e-5 --min-lr 8e-7 --lr-decay-style cosine --lr-warmup-iters 8000
    --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95
    --bf16
    --recompute-activations
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model meta-llama/Llama-3.1-405B
    --split 99,1,0
)

OUTPUT_ARGS=(
    --log-interval 1
    --save-interval 1000
    --eval-interval 1000
    --eval-iters 10
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${PARALLEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${OUTPUT_ARGS[@]}
