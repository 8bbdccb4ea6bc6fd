"""torchtitan's own pipeline cut of a model's transformer layers (pure): what it builds when a job
TOML gives no ``module_fqns_per_model_part``.

Facts read in pytorch/torchtitan at tag v0.2.2, ``torchtitan/distributed/pipeline_parallel.py``
(``pipeline_llm`` and ``generate_llm_fqn_per_model_part``):

- the model parts: with ``pipeline_parallel_layers_per_stage`` set, ``ceil((layers + first + last) /
  layers_per_stage)``, which the pipeline degree must divide; else one a rank under GPipe and 1F1B
  and two under an interleaved schedule (``first``, ``last``: ``pipeline_parallel_first_stage_less_layers``
  and ``..._last_stage_less_layers``, default 1 each: the embedding and the output layer weigh as
  that many layers); a single-stage schedule takes exactly one part a rank, a multi-stage one two or more;
- the cut: the ``layers + first + last`` weighed layers over the parts, ``//`` each and the
  remainder one more to the first parts; the first part's share less ``first``, the last's less
  ``last``, each taking the next transformer layers while any are left; refused where there are
  more parts than weighed layers, where a share is 0, or where ``first`` or ``last`` exceeds a share.
"""

from __future__ import annotations

import math


class CutError(ValueError):
    """Why torchtitan refuses the cut (its own check, in words)."""


def torchtitan_cut(layers: int, ranks: int, interleaved: bool, first: int = 1, last: int = 1,
                   layers_per_stage: int | None = None) -> tuple[int, ...]:
    """The transformer layers of each model part, in order, as torchtitan cuts ``layers`` over
    ``ranks`` pipeline ranks (module docstring); :class:`CutError` where torchtitan refuses it."""
    if layers_per_stage is not None:
        if layers_per_stage < 1:
            raise CutError(f"pipeline_parallel_layers_per_stage {layers_per_stage} is not a layer count")
        parts = math.ceil((layers + first + last) / layers_per_stage)
        if parts % ranks:
            raise CutError(f"{parts} model parts of {layers_per_stage} layers do not divide over {ranks} pipeline "
                           "ranks")
        if not interleaved and parts != ranks:
            raise CutError(f"{parts // ranks} model parts a rank, and a single-stage schedule runs one")
        if interleaved and parts < 2 * ranks:
            raise CutError("one model part a rank, and an interleaved schedule runs two or more")
    else:
        parts = ranks * (2 if interleaved else 1)
    weighed = layers + first + last
    if parts > weighed:
        raise CutError(f"{parts} model parts are more than the {weighed} weighed layers ({layers} + {first} + {last})")
    share, extra = divmod(weighed, parts)
    if share == 0 or first > share or last > share:
        raise CutError(f"{parts} model parts of {share} weighed layers each, less than the first or last "
                       f"stage's weight ({first}, {last})")
    out, left = [], layers
    for i in range(parts):
        take = share + (1 if i < extra else 0) - (first if i == 0 else last if i == parts - 1 else 0)
        take = max(0, min(take, left))
        out.append(take)
        left -= take
    return tuple(out)
