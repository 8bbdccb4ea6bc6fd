"""The attention kernel a framework whose configuration cannot name one runs (pure): the machine's
own (FlashAttention on GPUs from Ampere on, :func:`costmodel.calls.algorithms.attention_default`).

torchtitan's models run attention by PyTorch's SDPA, which picks its fused kernels itself, and a
DeepSpeed script's attention is the script's: neither file says which kernel runs, and a file read
back is priced at the machine's default. So a plan is exported to them only when every attention
layer runs that default; otherwise one line names the first layer that does not.

No framework's file names a convolution's algorithm either (cuDNN's choice is the script's,
``torch.backends.cudnn``), and a file read back runs each at
:data:`costmodel.calls.layer_calls.DEFAULT_CONV_ALGORITHM` (``default_algorithms``, as the import
takes it): :func:`check_default_convolutions` names the first convolution planned otherwise.
"""

from __future__ import annotations

from costmodel.calls.algorithms import attention_default, default_algorithms, kernel_algorithm
from costmodel.machine.loading import load_machine
from networks.errors import DnnplanError
from networks.ir import Network
from planner.plan.plan import Plan


def check_default_attention(plan: Plan, net: Network, why: str) -> None:
    """One line naming the first attention layer of ``plan`` whose kernel is not its machine's
    default; ``why``: the framework's reason it cannot say another."""
    algorithms = plan.algorithms()
    default = None
    for layer in net.layers:
        if layer.op != "attention":
            continue
        default = default or attention_default(load_machine(plan.machine))
        kernel = kernel_algorithm(algorithms.get(layer.name, "")) or default
        if kernel != default:
            raise DnnplanError(f"attention by {kernel} kernels, where {plan.machine} runs {default}: {why}",
                               layer=layer.name, hint=f"make the plan with `dnnplan predict NET --attention "
                                                      f"{default} --out FILE`, or export it to Megatron-LM")


def other_convolutions(plan: Plan, net: Network) -> list[str]:
    """The convolutions of ``plan`` whose algorithm is not the default a file read back runs."""
    algorithms, default = plan.algorithms(), default_algorithms(net)
    return [name for name, want in default.items() if (kernel_algorithm(algorithms.get(name, "")) or want) != want]


def check_default_convolutions(plan: Plan, net: Network, framework: str) -> None:
    """One line naming the first convolution of ``plan`` not at the default algorithm (module docstring)."""
    other = other_convolutions(plan, net)
    if other:
        default = default_algorithms(net)[other[0]]
        got = kernel_algorithm(plan.algorithms()[other[0]])
        raise DnnplanError(f"convolution by {got}, where {framework}'s file names no algorithm and is read back "
                           f"with each convolution by {default}", layer=other[0],
                           hint=f"export with --nearest (every convolution by {default}), or make the plan with "
                                "`dnnplan predict NET --out FILE`")
