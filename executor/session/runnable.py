"""Whether the executor runs a plan as written: a plan's training choices and layers against what
its kernels and runtime do (pure, light: `dnnplan plan` asks it before it suggests a run)."""

from __future__ import annotations

from costmodel.calls.algorithms import RECOMPUTE
from costmodel.choices.moe_dispatch import DEFAULT_MOE_DISPATCH
from costmodel.choices.precision import DATASHEET_ONLY, DEFAULT_PRECISION
from networks.errors import DnnplanError
from planner.plan.plan import Plan


def cannot_run(plan: Plan, plan_path: str, array_backend: str = "numpy") -> DnnplanError | None:
    """Why the executor cannot run ``plan`` as written (its file ``plan_path``) on ``array_backend``
    (numpy: the host; cupy: GPUs, which run every precision), None if it can."""
    if plan.choices.optimizer != "momentum":
        return DnnplanError(f"the plan is for {plan.choices.sharded_optimizer.label}; the executor runs SGD with "
                            f"momentum (ZeRO stages 0 to 3)", file=plan_path, field="optimizer",
                            hint="predict it with `dnnplan predict`, or plan again with --optimizer momentum to run it")
    if plan.pipeline is not None and plan.pipeline.chunks > 1:
        return DnnplanError(f"the plan interleaves {plan.pipeline.chunks} model chunks a device; the executor runs "
                            "1f1b and gpipe pipelines", file=plan_path, field="pipeline",
                            hint="plan it with --schedule 1f1b (`dnnplan predict` prices the interleaved plan)")
    if plan.pipeline is not None and plan.choices.zero:
        return DnnplanError(f"the plan pipelines {plan.pipeline.stages} stages under ZeRO stage "
                            f"{plan.choices.zero}; the "
                            "executor runs pipelined plans without ZeRO", file=plan_path, field="zero",
                            hint="predict it with `dnnplan predict`, or plan again with --zero 0 to run it")
    if plan.choices.moe_dispatch != DEFAULT_MOE_DISPATCH:
        return DnnplanError(f"the plan prices the {plan.choices.moe_dispatch} token dispatcher (DeepEP or HybridEP); "
                            "the "
                            "executor exchanges the experts' capacity buffers by all-to-all", file=plan_path,
                            field="moe_dispatch",
                            hint="predict it with `dnnplan predict`, or plan again with --moe-dispatch alltoall to run it")
    again = [lp.name for lp in plan.layers if lp.algorithm == RECOMPUTE]
    if again:
        return DnnplanError(f"the plan recomputes {len(again)} layer(s) in backward; the executor keeps every "
                            f"activation instead", file=plan_path, layer=again[0], field="algorithm",
                            hint="plan again with --no-recompute (`dnnplan predict`: --recompute none) to run it")
    if plan.choices.precision in DATASHEET_ONLY:
        return DnnplanError(f"the plan is for {plan.choices.precision} training; the executor's kernels run fp32, "
                            "tf32, fp16 "
                            "and bf16 (no FP8 GEMMs)", file=plan_path, field="precision",
                            hint="predict it with `dnnplan predict`, or plan again with --precision bf16 to run it")
    if plan.choices.precision != DEFAULT_PRECISION and array_backend == "numpy":
        return DnnplanError(f"the plan is for {plan.choices.precision} training; the host runs float32 kernels",
                            file=plan_path, field="precision",
                            hint="run it on GPUs (--device cuda, or a profile timed with --backend cupy), predict it "
                                 "with `dnnplan predict`, or plan again with --precision fp32")
    return None
