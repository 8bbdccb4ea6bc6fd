"""A network's hash names what defines it: a parameter added later, at its default, leaves the
hash of the networks written before it as it was, so their plan files still load."""

from dataclasses import replace

from networks.ir import LATER_PARAMS, UNPRICED_PARAMS
from networks.loader import load_network


def _without(net, key):
    """``net`` as written before parameter ``key`` existed."""
    return replace(net, layers=tuple(replace(layer, params=tuple((k, v) for k, v in layer.params if k != key))
                                     for layer in net.layers))


def test_a_later_parameter_at_its_default_leaves_the_hash_as_before_it_existed():
    for name in ("gpt-tiny", "tiny-moe"):
        net = load_network(name)
        for (op, key), default in LATER_PARAMS.items():
            if not any(layer.op == op for layer in net.layers):
                continue
            assert any(k == key and v == default for layer in net.layers if layer.op == op for k, v in layer.params)
            assert _without(net, key).content_hash() == net.content_hash()


def test_a_later_parameter_set_changes_the_hash():
    net = load_network("tiny-moe")
    assert net.with_param("moe", "act_clamp", 7.0).content_hash() != net.content_hash()
    assert load_network("gpt-tiny").with_param("attention", "yarn", True).content_hash() \
        != load_network("gpt-tiny").content_hash()


def test_an_unpriced_parameter_never_changes_the_hash():
    """Llama 3's rotary base (its zoo spec's rotary_base) prices nothing: a plan made before the spec
    set it, or with another, names the same network."""
    net = load_network("llama3-8b")
    assert {layer.p["rotary_base"] for layer in net.layers if layer.op == "attention"} == {500000.0}
    assert _without(net, "rotary_base").content_hash() == net.content_hash()
    assert net.with_param("attention", "rotary_base", 10000.0).content_hash() == net.content_hash()
    assert ("attention", "rotary_base") in UNPRICED_PARAMS


def test_llama_31s_rotary_scaling_is_left_out_of_the_hash():
    """Llama 3.1's rope_scaling (its zoo spec's factor 8) prices nothing: a plan made before the spec
    set it still names the same network."""
    net = load_network("llama3.1-405b")
    assert {layer.p["rope_scaling"] for layer in net.layers if layer.op == "attention"} == {8.0}
    assert _without(net, "rope_scaling").content_hash() == net.content_hash()
    assert net.with_param("attention", "rope_scaling", 32.0).content_hash() == net.content_hash()
    assert ("attention", "rope_scaling") in UNPRICED_PARAMS
