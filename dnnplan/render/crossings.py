"""The warning that some communicator groups of a predicted layout lie across a link domain's edge.

The cost model prices every collective on the slowest of its groups (``costmodel.comm.spans``):
on a machine whose NVLink domain (a DGX node, a GB200 NVL72 rack) is not a multiple of a group's
ranks, groups that start inside one domain and end in the next wait on the link between domains,
where rank 0's group does not. `dnnplan predict` says so, for a layout given by flags, a plan file
or a framework's launch configuration, in one line per axis (tensor, expert, context or spatial),
naming the size that would keep every group inside a domain where one would.
"""

from __future__ import annotations

from costmodel.comm.spans import crossings, pipeline_view
from costmodel.step.pipeline import PipelinePrediction


def crossing_lines(prediction, machine, devices: int, net) -> list[str]:
    """The warning lines for ``prediction`` (a step or a pipeline's) of ``net`` on ``devices`` of
    ``machine`` (module docstring); none where one domain holds every device."""
    domain = machine.domain_size
    if domain >= devices:
        return []
    if isinstance(prediction, PipelinePrediction):
        view = pipeline_view(machine, devices, len(prediction.stages))
        strategies = [lp.layer.strategy for stage in prediction.stages for lp in stage.micro.layers]
    else:
        view, strategies = machine, [lp.layer.strategy for lp in prediction.layers]
    sequence = any(layer.op == "attention" for layer in net.layers)
    lines = []
    for c in crossings(strategies, view, sequence):
        a = "an" if c.axis[0] in "aeiou" else "a"
        if domain % c.size:
            lines.append(f"{c.axis} groups of {c.size} ranks do not divide {machine.name}'s {domain}-device link "
                         f"domain: some groups cross {c.slowest} domains where rank 0's lies in {c.first}, and the "
                         f"step waits for them (priced over the link between domains); {a} {c.axis} size dividing "
                         f"{domain} keeps every group inside a domain")
        else:
            lines.append(f"some {c.axis} groups of {c.size} ranks cross {c.slowest} of {machine.name}'s "
                         f"{domain}-device link domains where rank 0's lies in {c.first} (the other splits' degrees "
                         "place them so), and the step waits for them (priced over the link between domains)")
    return lines
