"""A profile table's communication fits, as the links of a machine: the joint alpha-beta-gamma
fit over every measured collective and each collective's own fit per size regime
(``dnnplan profile-comm``; docs/profiler.md, "Communication").
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.machine.model import LinkLevel, Machine
from costmodel.compute.profile_table import ProfileTable


def fitted_link(table: ProfileTable) -> LinkLevel | None:
    """The alpha-beta-gamma link fitted jointly over every measured collective, or None."""
    link = table.comm.get("link") if table.comm else None
    if not link:
        return None
    return LinkLevel(name=f"profiled ({table.comm.get('ranks', '?')} ranks)", alpha_s=float(link["alpha_s"]),
                     beta_s_per_byte=float(link["beta_s_per_byte"]),
                     gamma_s_per_byte=float(link["gamma_s_per_byte"]))


def fitted_collective_links(table: ProfileTable, state: str = "warm") -> tuple[tuple[str, float, LinkLevel], ...]:
    """``(collective, up to bytes, link)`` for each measured collective's size regime
    (``dnnplan profile-comm``) in one cache state (``warm``, or ``cold``: none in tables made
    before it was measured); a fit without ``regimes`` (older tables) is one regime."""
    comm = table.comm or {}
    fits = (comm.get("collectives") if state == "warm" else (comm.get(state) or {}).get("collectives")) or {}
    ranks = comm.get("ranks", "?")
    out = []
    for name, f in sorted(fits.items()):
        regimes = f.get("regimes") or [[None, f["alpha_s"], f["beta_s_per_byte"], f["gamma_s_per_byte"]]]
        for upto, a, b, g in regimes:
            bound = math.inf if upto is None else float(upto)
            label = (f"profiled {name} ({ranks} ranks{', cold' if state != 'warm' else ''})"
                     + ("" if upto is None else f" <= {bound:.0f} B"))
            out.append((name, bound, LinkLevel(name=label, alpha_s=float(a), beta_s_per_byte=float(b),
                                               gamma_s_per_byte=float(g))))
    return tuple(out)


def links_from_table(machine: Machine, table: ProfileTable) -> Machine:
    """``machine`` with the table's fitted links (unchanged without a communication profile): the
    joint fit replaces the intra-node link (and a one-node machine's inter link, never used), and
    each measured collective is costed with its own fit of the message's size regime
    (``Machine.fitted``; ``Machine.fitted_cold`` for the collectives that follow a layer's kernels,
    when the table has them); reshards (``Alltoallv``) use the alltoall fit."""
    link = fitted_link(table)
    if link is None:
        return machine
    inter = link if machine.nodes == 1 else machine.inter
    return replace(machine, intra=link, inter=inter, fitted=fitted_collective_links(table),
                   fitted_cold=fitted_collective_links(table, "cold"))
