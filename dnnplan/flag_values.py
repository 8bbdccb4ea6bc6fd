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


def dash_is_standard_output(value: str | None) -> str | None:
    """A typer callback: ``-``, standard output by the shell tools' convention (as `dnnplan import
    --out -` takes it), is ``/dev/stdout``, written after what the command prints there
    (networks.writing.standard_stream); it wrote a file called '-'."""
    return "/dev/stdout" if value == "-" else value


class MachinePrice(float):
    """A price given as ``MACHINE=PRICE`` (as `dnnplan plan -m A,B` takes them): the machine it names
    is checked against the one priced (:func:`price_for`)."""

    machine: str

    def __new__(cls, value: float, machine: str) -> "MachinePrice":
        got = super().__new__(cls, value)
        got.machine = machine
        return got


def one_price(flag: str, most: float) -> Callable[[str | None], float | None]:
    """A typer callback reading one price from 0 to ``most`` (a command that prices one machine):
    a number, or one ``MACHINE=PRICE`` pair (a :class:`MachinePrice`, the pair a comparison of
    machines takes); several pairs are refused in one line saying so."""
    def check(value: str | None) -> float | None:
        if value is None:
            return None
        name, _, number = value.rpartition("=") if "=" in value and "," not in value else ("", "", value)
        try:
            price = float(number)
        except ValueError:
            hint = ("this command prices one machine: give its price alone, e.g. 2.5; MACHINE=PRICE pairs "
                    "price the machines `dnnplan plan -m A,B` compares") if "=" in value else "e.g. 2.5"
            raise DnnplanError(f"{flag} {short(value)} is not a price", hint=hint) from None
        price = within(flag, 0, most)(price)
        return MachinePrice(price, name.strip()) if name.strip() else price
    return check


def price_for(price: float | None, machine: str, flag: str = "--gpu-hour-price") -> float | None:
    """``price`` for ``machine``, the one priced: a ``MACHINE=PRICE`` naming another is one line."""
    if isinstance(price, MachinePrice) and price.machine != machine:
        raise DnnplanError(f"{flag} prices {short(price.machine)}, and this prices {machine}",
                           hint=f"give its price alone, e.g. {flag} {float(price):g}, or {machine}={float(price):g}")
    return None if price is None else float(price)
