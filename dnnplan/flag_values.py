"""A flag's value checked as typer reads it: callbacks that refuse a value out of range, none of its
names, or blank, each in one line naming the flag (dnnplan.options gives them to its flags)."""

from __future__ import annotations

from typing import Callable, TypeVar

from networks.errors import DnnplanError, short

N = TypeVar("N", int, float)


def within(flag: str, least: float, most: float, unit: str = "") -> Callable[[N | None], N | None]:
    """A typer callback refusing a value of ``flag`` outside ``[least, most]`` (NaN included) with
    one line naming the flag, the range and what was given."""
    def check(value: N | None) -> N | None:
        if value is None or least <= value <= most:
            return value
        words = f"from {least:g} to {most:g}{unit}"
        if isinstance(value, int) and least == 1:
            words = f"a whole number from 1 to {most:,.0f}"
        raise DnnplanError(f"{flag} must be {words}, got {short(value)}")
    return check


def one_of(flag: str, names: tuple[str, ...]) -> Callable[[str | None], str | None]:
    """A typer callback refusing a value of ``flag`` that is none of ``names``, in one line naming them."""
    def check(value: str | None) -> str | None:
        if value is None or value in names:
            return value
        raise DnnplanError(f"unknown {flag} {short(value)}", hint=f"use {', '.join(names[:-1])} or {names[-1]}")
    return check


def not_blank(flag: str, what: str, example: str) -> Callable[[str | None], str | None]:
    """A typer callback refusing an empty value of ``flag`` (``--machine ''`` fell back to the
    default in silence) in one line naming ``what`` it should name."""
    def check(value: str | None) -> str | None:
        if value is not None and not value.strip(" ,"):
            raise DnnplanError(f"{flag} {short(value)} names no {what}", hint=f"e.g. {flag} {example}")
        return value
    return check


def one_price(flag: str, most: float) -> Callable[[str | None], float | None]:
    """A typer callback reading one price from 0 to ``most`` (a command that prices one machine);
    ``MACHINE=PRICE`` pairs, which a comparison of machines takes, are refused in one line saying so."""
    def check(value: str | None) -> float | None:
        if value is None:
            return None
        try:
            price = float(value)
        except ValueError:
            hint = ("this command prices one machine: give its price alone, e.g. 2.5; MACHINE=PRICE pairs "
                    "price the machines `dnnplan plan -m A,B` compares") if "=" in value else "e.g. 2.5"
            raise DnnplanError(f"{flag} {short(value)} is not a price", hint=hint) from None
        return within(flag, 0, most)(price)
    return check
