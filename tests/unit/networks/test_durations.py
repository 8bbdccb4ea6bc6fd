"""A duration in words (networks.durations): the unit that keeps the leading digit at or above one,
never an exponent, rounded before the unit is chosen."""

from __future__ import annotations

import pytest

from networks.durations import seconds


@pytest.mark.parametrize("x, digits, words", [
    (9.277e-05, 4, "92.77 µs"),  # a tiny network's step: not 9.277e-05 s
    (2.3466e-05, 3, "23.5 µs"),
    (0.6756, 4, "675.6 ms"),
    (4.2551, 4, "4.255 s"),
    (4.2551, 3, "4.26 s"),
    (3.2e-10, 3, "0.32 ns"),
    (12345.6, 3, "12,300 s"),  # a long step: whole, with separators, no exponent
    (999.95, 3, "1,000 s"),
    (0.9999, 3, "1 s"),  # rounded first: not "1e+03 ms"
    (0.0009996, 3, "1 ms"),
    (-0.003, 3, "-3 ms"),
    (0.0, 3, "0"),
])
def test_duration_in_words(x, digits, words):
    assert seconds(x, digits) == words


def test_never_an_exponent():
    for k in range(-13, 7):
        for m in (1.0, 1.2345, 9.9996):
            assert "e" not in seconds(m * 10.0 ** k, 4)


def test_infinity_says_so():
    assert seconds(float("inf")) == "inf s"
