"""Ordering a network spec's expanded layers: each layer after the layers it reads, in file order
where the graph allows, with clear errors for duplicate names, unknown inputs and cycles.
"""

from __future__ import annotations

import heapq

from networks.spec_expand import Parser, Raw, suggest


def toposort(raws: list[Raw], inputs: set[str], p: Parser) -> list[Raw]:
    """The raw layers in a stable topological order (the earliest ready layer in file order first),
    block-instance names resolved to the layers they stand for; duplicate names, unknown inputs and
    cycles are errors."""
    by_name: dict[str, Raw] = {}
    for raw in raws:
        if raw.name in by_name or raw.name in inputs:
            raise p.fail(f"the name '{raw.name}' is used twice", line=raw.line, layer=raw.name, field="name",
                         hint="layer names must be unique")
        by_name[raw.name] = raw
    for alias in p.aliases:
        if alias in by_name or alias in inputs:
            raw = by_name.get(alias)
            raise p.fail(f"the name '{alias}' is used twice (a block instance and a layer or input)",
                         line=raw.line if raw else None, layer=alias, field="name",
                         hint="layer names must be unique")

    def unalias(ref: str) -> str:
        seen = set()
        while ref not in by_name and ref in p.aliases and ref not in seen:  # an alias may name an alias
            seen.add(ref)
            ref = p.aliases[ref]
        return ref

    for raw in raws:
        raw.inputs = [unalias(r) for r in raw.inputs]
        for ref in raw.inputs:
            if ref not in by_name and ref not in inputs:
                raise p.fail(f"input '{ref}' is not a layer or network input", line=raw.line, layer=raw.name,
                             field="inputs", hint=suggest(ref, list(by_name) + list(inputs)))
            if ref == raw.name:
                raise p.fail("a layer cannot read its own output", line=raw.line, layer=raw.name, field="inputs")
    # stable topological order: always take the earliest ready layer in file order
    position = {raw.name: k for k, raw in enumerate(raws)}
    waiting = {raw.name: sum(1 for i in raw.inputs if i in by_name) for raw in raws}
    readers: dict[str, list[str]] = {}
    for raw in raws:
        for ref in raw.inputs:
            if ref in by_name:
                readers.setdefault(ref, []).append(raw.name)
    heap = [position[n] for n, count in waiting.items() if count == 0]
    heapq.heapify(heap)
    order: list[Raw] = []
    while heap:
        raw = raws[heapq.heappop(heap)]
        order.append(raw)
        for reader in readers.get(raw.name, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(heap, position[reader])
    if len(order) < len(raws):
        done = {raw.name for raw in order} | set(inputs)
        stuck = next(raw for raw in raws if raw.name not in done)
        cycle = find_cycle(stuck, by_name, done)
        raise p.fail(f"the layers form a cycle: {' -> '.join(cycle)}", line=stuck.line, layer=stuck.name,
                     field="inputs", hint="a network must be a DAG")
    return order


def find_cycle(start: Raw, by_name: dict[str, Raw], done: set[str]) -> list[str]:
    """The cycle reached by following unfinished inputs from ``start``."""
    path, seen, node = [], {}, start
    while node.name not in seen:
        seen[node.name] = len(path)
        path.append(node.name)
        nxt = next(i for i in node.inputs if i not in done)
        node = by_name[nxt]
    return path[seen[node.name]:] + [node.name]
