"""Megatron-LM's options as :mod:`planner.launch_import.megatron_args` parses them (pure facts): those read
and the kind of value each takes, the values a text option takes, and those ignored with the reason.

Every name is Megatron-LM's at NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553
(Megatron-Core 0.20.0): added by hand in ``megatron/training/arguments.py`` or from the dataclass
fields ``ArgumentGroupFactory`` turns into flags (``megatron/training/argument_utils.py``: ``--`` and
the field's name with ``-`` for ``_``; a bool defaulting to True as ``--no-``/``--disable-``) of
``ModelParallelConfig`` (megatron/core/model_parallel_config.py), ``TransformerConfig``
(megatron/core/transformer/transformer_config.py; ``fp8`` renamed ``--fp8-format``,
``attention_backend`` an ``AttnBackend`` of megatron/core/transformer/enums.py), ``TrainingConfig``,
``CheckpointConfig``, ``LoggerConfig``, ``SchedulerConfig`` (megatron/training/config/training_config.py)
and ``DistributedInitConfig``, ``RNGConfig`` (megatron/training/config/common_config.py). The choices
are those the parser or the field's ``Literal`` type lists there.
"""

from __future__ import annotations

FLAG, INT, FLOAT, TEXT, WORDS = "flag", "integer", "number", "text", "words"

#: the options read, and the kind of value each takes
READ = {
    # the layout (ModelParallelConfig; arguments.py)
    "--tensor-model-parallel-size": INT, "--pipeline-model-parallel-size": INT, "--context-parallel-size": INT,
    "--expert-model-parallel-size": INT, "--expert-tensor-parallel-size": INT, "--sequence-parallel": FLAG,
    "--pipeline-model-parallel-layout": TEXT, "--num-layers-per-virtual-pipeline-stage": INT,
    "--num-virtual-stages-per-pipeline-rank": INT, "--decoder-first-pipeline-num-layers": INT,
    "--decoder-last-pipeline-num-layers": INT, "--account-for-embedding-in-pipeline-split": FLAG,
    "--account-for-loss-in-pipeline-split": FLAG,
    # the batch and the sequence
    "--micro-batch-size": INT, "--global-batch-size": INT, "--seq-length": INT,
    # the model's shape (TransformerConfig; arguments.py's network-size group)
    "--num-layers": INT, "--hidden-size": INT, "--num-attention-heads": INT, "--group-query-attention": FLAG,
    "--num-query-groups": INT, "--kv-channels": INT, "--ffn-hidden-size": INT, "--swiglu": FLAG,
    "--num-experts": INT, "--moe-router-topk": INT, "--moe-ffn-hidden-size": INT, "--normalization": TEXT,
    "--position-embedding-type": TEXT, "--use-rotary-position-embeddings": FLAG,
    "--untie-embeddings-and-output-weights": FLAG,
    # recomputation
    "--recompute-granularity": TEXT, "--recompute-method": TEXT, "--recompute-num-layers": INT,
    "--recompute-activations": FLAG, "--recompute-modules": WORDS, "--distribute-saved-activations": FLAG,
    # precision, optimiser and its sharding
    "--fp16": FLAG, "--bf16": FLAG, "--fp8-format": TEXT, "--fp8-param-gather": FLAG, "--optimizer": TEXT,
    "--sgd-momentum": FLOAT, "--grad-reduce-in-bf16": FLAG, "--accumulate-allreduce-grads-in-fp32": FLAG,
    "--use-distributed-optimizer": FLAG, "--use-megatron-fsdp": FLAG, "--data-parallel-sharding-strategy": TEXT,
    "--use-torch-fsdp2": FLAG, "--megatron-fsdp-version": INT,
    # overlap, the MoE dispatcher, attention's kernels
    "--overlap-grad-reduce": FLAG, "--overlap-param-gather": FLAG, "--tp-comm-overlap": FLAG,
    "--overlap-moe-expert-parallel-comm": FLAG, "--moe-token-dispatcher-type": TEXT, "--attention-backend": TEXT,
    "--use-flash-attn": FLAG, "--cp-comm-type": WORDS, "--transformer-impl": TEXT,
}
#: the values a text option takes (Megatron-LM's choices)
CHOICES = {
    "--normalization": ("LayerNorm", "RMSNorm"),
    "--position-embedding-type": ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"),
    "--recompute-granularity": ("full", "selective"), "--recompute-method": ("uniform", "block"),
    "--fp8-format": ("e4m3", "hybrid"),
    "--optimizer": ("adam", "sgd", "muon", "dist_muon", "lion", "soap", "adaptive_muon"),
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "--attention-backend": ("flash", "fused", "unfused", "local", "auto"),
    "--transformer-impl": ("local", "transformer_engine", "inference_optimized"),
}
#: options that do not change the step dnnplan prices, by the reason (each takes the words after
#: it up to the next option, if any)
IGNORED = {
    "the data and tokenizer: the network's own vocabulary is priced": (
        "--data-path", "--split", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path",
        "--mock-data", "--num-workers", "--dataloader-type", "--tokenizer-type", "--tokenizer-model", "--vocab-file",
        "--merge-file", "--vocab-size", "--make-vocab-size-divisible-by", "--eod-mask-loss",
        "--no-create-attention-mask-in-dataloader", "--tiktoken-pattern", "--tiktoken-num-special-tokens",
        "--no-mmap-bin-files"),
    "the learning-rate schedule and the optimiser's settings: a step's work does not depend on them": (
        "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters", "--lr-warmup-fraction", "--lr-warmup-samples",
        "--lr-decay-iters", "--lr-decay-samples", "--weight-decay", "--clip-grad", "--adam-beta1", "--adam-beta2",
        "--adam-eps", "--init-method-std", "--seed", "--decoupled-lr", "--decoupled-min-lr", "--lr-warmup-init",
        "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style"),
    "how long to train: one step is predicted (--tokens gives the time to train)": (
        "--train-iters", "--train-samples", "--exit-interval", "--exit-duration-in-mins"),
    "logging, evaluation and checkpoints: outside the training step": (
        "--log-interval", "--log-throughput", "--log-params-norm", "--log-num-zeros-in-grad",
        "--log-timers-to-tensorboard",
        "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--tensorboard-dir",
        "--tensorboard-log-interval", "--timing-log-level", "--wandb-project", "--wandb-exp-name", "--wandb-save-dir",
        "--eval-interval", "--eval-iters", "--save", "--load", "--save-interval", "--ckpt-format", "--use-dist-ckpt",
        "--async-save", "--no-load-optim", "--no-load-rng", "--profile", "--profile-step-start", "--profile-step-end",
        "--profile-ranks", "--use-pytorch-profiler", "--record-memory-history", "--memory-snapshot-path",
        "--pretrained-checkpoint", "--finetune", "--auto-detect-ckpt-format", "--ckpt-fully-parallel-save",
        "--dist-ckpt-strictness", "--use-checkpoint-args",
        # the rest of LoggerConfig's fields (megatron/training/config/training_config.py): a bool that
        # defaults to True as --no- and --disable-
        "--log-throughput-to-tensorboard", "--throughput-window-size", "--log-progress", "--timing-log-option",
        "--tensorboard-queue-size", "--no-log-loss-scale-to-tensorboard", "--disable-log-loss-scale-to-tensorboard",
        "--memory-keys", "--log-memory-interval", "--log-device-memory-used", "--log-l2-norm-grad-to-tensorboard",
        "--log-max-attention-logit", "--log-runtime-to-tensorboard", "--runtime-time-unit",
        "--log-world-size-to-tensorboard", "--wandb-entity", "--logging-level", "--no-filter-warnings",
        "--disable-filter-warnings", "--modules-to-filter", "--set-level-for-all-loggers", "--log-energy",
        "--save-config-filepath", "--moe-routing-trace-path", "--moe-routing-trace-max-training-iters",
        "--moe-routing-trace-capture-logits", "--moe-routing-trace-capture-hidden-states",
        "--moe-routing-trace-dump-weights"),
    "an implementation switch (kernel fusion, initialisation, process group set-up): dnnplan prices the "
    "layers' work and memory traffic alike": (
        "--use-mcore-models", "--no-masked-softmax-fusion", "--no-gradient-accumulation-fusion",
        "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-bias-swiglu-fusion", "--no-rope-fusion",
        "--cross-entropy-loss-fusion", "--moe-grouped-gemm", "--moe-permute-fusion", "--manual-gc",
        "--use-cpu-initialization", "--distributed-backend", "--distributed-timeout-minutes",
        "--empty-unused-memory-level", "--tp-comm-overlap-cfg", "--no-check-for-nan-in-loss-and-grad",
        "--calculate-per-token-loss", "--attention-softmax-in-fp32", "--cross-entropy-fusion-impl",
        "--init-model-with-meta-device"),
    "a model setting that does not change a step's work: dropout rates, biases, norm epsilon, rotary settings, "
    "positions (the network's own are priced)": (
        "--hidden-dropout", "--attention-dropout", "--disable-bias-linear", "--add-qkv-bias", "--norm-epsilon",
        "--rotary-base",
        "--rotary-percent", "--use-rope-scaling", "--rope-scaling-factor", "--apply-layernorm-1p", "--qk-layernorm",
        "--max-position-embeddings", "--no-position-embedding", "--apply-query-key-layer-scaling"),
    "routing's losses and the router's settings: dnnplan prices dropless top-k routing": (
        "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-dtype",
        "--moe-router-score-function", "--moe-router-pre-softmax"),
    "the FP8 recipe: dnnplan prices FP8 GEMMs with BF16 mixed precision alike": (
        "--fp8-recipe", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin"),
    "the gradient buckets' size: dnnplan prices PyTorch DDP's 25 MiB buckets": ("--ddp-bucket-size",),
}
REASON_OF = {name: reason for reason, names in IGNORED.items() for name in names}

#: the GPT-style decoder's entry point, the one whose arguments are read
GPT_SCRIPT = "pretrain_gpt.py"
#: Megatron-LM's entry points that train another model than a GPT-style decoder, by what they train:
#: in the repository's root at d98e8a64ddf34856e74b24714e3bedb2f5a39553 pretrain_hybrid.py
#: (HybridModel, megatron/core/models/hybrid), pretrain_mamba.py (its wrapper), pretrain_vlm.py
#: (LLaVAModel) and train_rl.py (GRPO); up to tag core_v0.17.0 also pretrain_bert.py and
#: pretrain_t5.py, up to core_v0.16.0 pretrain_ict.py and pretrain_vision_{classify,dino,inpaint}.py,
#: up to core_v0.15.0 pretrain_retro.py (each file's docstring says what it pretrains)
OTHER_MODELS = {
    "pretrain_bert.py": "BERT, a bidirectional encoder", "pretrain_t5.py": "T5, an encoder-decoder",
    "pretrain_retro.py": "RETRO, a decoder with retrieval cross-attention",
    "pretrain_ict.py": "ICT, a pair of BERT encoders for retrieval",
    "pretrain_vision_classify.py": "a vision transformer classifier", "pretrain_vision_dino.py": "DINO, a vision "
    "transformer", "pretrain_vision_inpaint.py": "a vision transformer for inpainting",
    "pretrain_mamba.py": "a Mamba hybrid (state-space layers)", "pretrain_hybrid.py": "a Mamba hybrid "
    "(state-space layers)", "pretrain_vlm.py": "a vision-language model (LLaVA)",
    "train_rl.py": "a GPT by reinforcement learning (rollouts generated between steps)"}
