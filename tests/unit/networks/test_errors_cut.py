"""Error lines are cut at a word's end, never mid-word (issue 55: a sweep's error cell read
"...on 1 devices; the l"), and a misspelt network gets a did-you-mean."""

import pytest

from networks.errors import DnnplanError, _cut
from networks.loader import load_network


def test_a_long_message_is_cut_at_a_word_end():
    text = "no plan fits on 1 devices; the least any plan needs is 205.419 GiB per device " * 3
    out = _cut(text, 60)
    assert len(out) <= 60 and out.endswith(" ...")
    kept = out[:-4]
    assert text.startswith(kept) and text[len(kept)] == " "


def test_a_short_message_is_kept_whole():
    assert _cut("a short line", 60) == "a short line"


def test_one_unbroken_word_is_still_bounded():
    assert len(_cut("x" * 500, 60)) <= 60


@pytest.mark.parametrize("name", ["resnet-50", "Resnet50", "resnt50"])
def test_a_misspelt_network_gets_a_did_you_mean(name):
    with pytest.raises(DnnplanError) as got:
        load_network(name)
    assert "did you mean 'resnet50'?" in str(got.value)
