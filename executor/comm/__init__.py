"""Communication between a plan's ranks: group communicators, collectives and reshards (halos included)."""
