"""torchtitan's job TOML as :mod:`planner.launch_import.torchtitan` reads it (pure facts): the keys
read and the kind of value each takes, those ignored with the reason, torchtitan's defaults, and the
keys an earlier release read elsewhere. Every section and key is named as torchtitan's 0.2 releases
read them (``torchtitan/config/job_config.py`` at pytorch/torchtitan v0.2.2) unless a fact names
another source.
"""

from __future__ import annotations

from planner.launch_import.value_kinds import BOOL, INT, PARTS, STR, STRS

#: the keys read, by section, with the kind of value each takes
READ = {
    "model": {"name": STR, "flavor": STR, "converters": STRS},
    "optimizer": {"name": STR},
    "training": {"local_batch_size": INT, "global_batch_size": INT, "seq_len": INT, "mixed_precision_param": STR,
                 "dtype": STR, "enable_cpu_offload": BOOL},
    "parallelism": {"data_parallel_replicate_degree": INT, "data_parallel_shard_degree": INT,
                    "fsdp_reshard_after_forward": STR, "tensor_parallel_degree": INT,
                    "enable_async_tensor_parallel": BOOL, "pipeline_parallel_degree": INT,
                    "module_fqns_per_model_part": PARTS, "pipeline_parallel_first_stage_less_layers": INT,
                    "pipeline_parallel_last_stage_less_layers": INT, "pipeline_parallel_layers_per_stage": INT,
                    "pipeline_parallel_schedule": STR, "pipeline_parallel_microbatch_size": INT,
                    "context_parallel_degree": INT, "expert_parallel_degree": INT,
                    "expert_tensor_parallel_degree": INT, "expert_parallel_comm_backend": STR,
                    "context_parallel_rotate_method": STR},
    "activation_checkpoint": {"mode": STR},
    "compile": {"enable": BOOL, "components": STRS},
    "quantize.linear.float8": {"filter_fqns": STRS},
}
#: keys (a whole section: "*") that do not change the step dnnplan prices, by the reason
IGNORED = {
    "the run's bookkeeping (folders, logging, profiling, checkpoints, validation, fault tolerance)": {
        "job": "*", "profiling": "*", "metrics": "*", "checkpoint": "*", "validation": "*", "comm": "*",
        "memory_estimation": "*", "fault_tolerance": "*", "experimental": "*", "debug": "*"},
    "the data and tokenizer: the network's own vocabulary is priced": {
        "model": {"hf_assets_path", "tokenizer_path", "print_after_conversion"},
        "training": {"dataset", "dataset_path", "dataloader", "gc_freq", "gc_debug"},
        "training.dataloader": "*"},
    "how long to train: one step is predicted (--tokens gives the time to train)": {
        "training": {"steps"}},
    "the learning rate and the optimiser's settings: a step's work does not depend on them": {
        "optimizer": {"lr", "beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"},
        "lr_scheduler": "*", "training": {"max_norm", "mixed_precision_reduce"}},
    "an implementation switch (compilation, loss parallelism, load balancing, the checkpointing's "
    "bookkeeping, the FP8 recipe): dnnplan prices the layers' work alike": {
        "compile": {"backend"},
        "parallelism": {"disable_loss_parallel", "context_parallel_load_balancer",
                        "pipeline_parallel_schedule_csv", "pipeline_parallel_expert_parallel_overlap"},
        "activation_checkpoint": {"selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                                  "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
                                  "determinism_check", "debug"},
        "quantize.linear.float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                                   "recipe_name", "emulate"}},
}
IGNORED_SUBSECTION = "a part of a section that does not change the step"
#: torchtitan 0.1's keys that 0.2 reads elsewhere (v0.1.0 torchtitan/config_manager.py ``Training.compile``)
MOVED = {("training", "compile"): "[compile] enable"}
#: why ``[compile]`` is listed as ignored (read only for what async tensor parallelism needs)
COMPILED = ("torch.compile's fusions: the step is priced with the cost model's fused kernels either way "
            "(`dnnplan predict NETWORK --framework pytorch-compile` prices inductor's)")
#: torchtitan's defaults (job_config.py) for the keys read
DEFAULTS = {"local_batch_size": 8, "global_batch_size": -1, "seq_len": 2048, "mixed_precision_param": "bfloat16",
            "dtype": "float32", "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
            "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": 1, "pipeline_parallel_degree": 1,
            "pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1,
            "pipeline_parallel_schedule": "1F1B", "pipeline_parallel_microbatch_size": 1,
            "context_parallel_degree": 1, "expert_parallel_degree": 1, "expert_tensor_parallel_degree": 1,
            "expert_parallel_comm_backend": "standard", "context_parallel_rotate_method": "allgather",
            "mode": "selective", "name": None, "filter_fqns": []}
#: the [parallelism] keys that cut and schedule a pipeline (listed as ignored without one)
PIPELINE_KEYS = ("module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                 "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
                 "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size")
#: the float8 converter's filter_fqns that dnnplan's fp8 prices: the transformer blocks' linear layers
#: in FP8, the output layer (torchtitan's module ``output``) in bf16 (costmodel.choices.precision)
FP8_FILTER = ["output"]
#: dnnplan's precisions by mixed_precision_param
PRECISIONS = {"bfloat16": "bf16", "float32": "fp32"}
RESHARD_POLICIES = ("default", "always", "never")
HINT = "see docs/export.md, \"Importing a launch configuration\", for the keys dnnplan reads"
