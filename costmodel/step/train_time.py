"""Time and cost to train (pure): a token budget at a step's tokens and time, in steps, days,
device-hours and, at a price per device-hour, money.

A language model's step takes ``batch x sequence`` tokens (networks.default_batch.sequence_length);
``tokens`` tokens take ``ceil(tokens / that)`` steps, each the predicted step (warm-up, evaluation,
checkpoints and failures are not in it: a floor for the wall clock a run takes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from networks.default_batch import sequence_length
from networks.errors import DnnplanError, short
from networks.ir import Network

SECONDS_PER_DAY = 86400.0
#: what a suffix of ``--tokens`` multiplies by (15T: fifteen trillion)
SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
#: the most tokens a budget may name (a quadrillion: far past any run)
MAX_TOKENS = 1e18


@dataclass(frozen=True)
class TrainTime:
    """A token budget's steps, wall-clock seconds, device-hours and cost (None: no price given)."""

    tokens: float
    tokens_per_step: int
    steps: int
    seconds: float
    devices: int
    device_hours: float
    price_per_device_hour: float | None = None

    @property
    def days(self) -> float:
        return self.seconds / SECONDS_PER_DAY

    @property
    def cost(self) -> float | None:
        return None if self.price_per_device_hour is None else self.device_hours * self.price_per_device_hour

    def json(self) -> dict:
        return {"tokens": self.tokens, "tokens_per_step": self.tokens_per_step, "steps": self.steps,
                "seconds": self.seconds, "days": self.days, "devices": self.devices,
                "device_hours": self.device_hours, "price_per_device_hour": self.price_per_device_hour,
                "cost": self.cost}


def parse_tokens(text: str) -> float:
    """``--tokens``: a number of tokens, with a suffix K, M, B (or G) or T (``15T``, ``300B``, ``2e12``)."""
    value = text.strip().upper()
    scale = SUFFIXES.get(value[-1:], 1.0)
    try:
        tokens = float(value[:-1] if value[-1:] in SUFFIXES else value) * scale
    except ValueError:
        raise DnnplanError(f"--tokens {short(text)} is not a number of tokens",
                           hint="write e.g. 15T, 300B or 2e12") from None
    if not 1 <= tokens <= MAX_TOKENS:
        raise DnnplanError(f"--tokens must be from 1 to 10^18 tokens, got {short(text)}")
    return tokens


def train_time(step_s: float, tokens_per_step: int, devices: int, tokens: float,
               price_per_device_hour: float | None = None) -> TrainTime:
    """``tokens`` tokens trained at ``tokens_per_step`` a step of ``step_s`` seconds on ``devices``
    devices (module docstring)."""
    steps = math.ceil(tokens / tokens_per_step)
    seconds = steps * step_s
    return TrainTime(tokens, tokens_per_step, steps, seconds, devices, seconds * devices / 3600.0,
                     price_per_device_hour)


def tokens_per_step(net: Network, batch: int) -> int:
    """The tokens one step of ``net`` at ``batch`` sequences takes (one line for a network that reads
    no token ids: a budget of tokens means nothing for it)."""
    seq = sequence_length(net)
    if seq is None:
        raise DnnplanError(f"--tokens counts a language model's tokens, and {net.name} reads no token ids",
                           hint="leave --tokens out for this network")
    return batch * seq
