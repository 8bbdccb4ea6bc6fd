"""Counts and sizes printed in the unit that keeps them short: 3.58P MACs, not 3584.58T."""

from dnnplan.render import fmt


def test_counts_and_bytes_scale_past_tera():
    assert fmt.count(3.58458e15) == "3.58P" and fmt.count(1.2e21) == "1200.00E" and fmt.count(4.5e12) == "4.50T"
    assert fmt.nbytes(5 * 2 ** 60) == "5.00 EiB" and fmt.nbytes(3 * 2 ** 50) == "3.00 PiB"
    assert fmt.nbytes(80 * 2 ** 30) == "80.00 GiB" and fmt.count(999) == "999"
