"""Property test: a mutated good spec parses into a sound network or fails with one clean line.

Good specs (two zoo networks and small hand-written ones using blocks, concat, add and sequence
ops) are parsed into YAML trees, mutated at random (keys deleted or renamed, values replaced by
scalars of other types, numbers changed, layers swapped, duplicated or cut, input references and op
names changed) or corrupted as text, and parsed again. Any exception other than DnnplanError is a
parser bug. ``DNNPLAN_FUZZ_EXAMPLES`` raises the number of examples for a longer local hunt.
"""

from __future__ import annotations

import copy
import os

import yaml
from hypothesis import given, HealthCheck, settings, strategies as st

from networks.errors import DnnplanError
from networks.ir import Network
from networks.ops.catalogue import OPS
from networks.spec import parse_network

from tests.support.paths import ZOO


BLOCKS_SPEC = """
name: small_blocks
inputs:
  image: {shape: [3, 16, 16]}
blocks:
  unit:
    params: {width: 8, stride: 1, project: false}
    layers:
      - {name: conv, op: conv2d, filters: "{width}", kernel: 3, stride: "{stride}", padding: 1}
      - {name: bn, op: batchnorm2d}
      - {name: proj, op: conv2d, inputs: $input, filters: "{width}", kernel: 1, stride: "{stride}", when: "{project}"}
      - {name: add, op: add, inputs: [bn, "{'proj' if project else '$input'}"]}
      - {name: relu, op: relu}
  stage:
    params: [width, n]
    layers:
      - {use: unit, name: "0", args: {width: "{width}", stride: 2, project: true}}
      - {use: unit, name: "b{i}", start: 1, repeat: "{n}", args: {width: "{width}"}}
layers:
  - {name: stem, op: conv2d, filters: 8, kernel: 3, padding: 1}
  - {use: stage, name: s1, args: {width: 8, n: 2}}
  - {name: side, op: maxpool2d, kernel: 2, inputs: stem}
  - {name: cat, op: concat, inputs: [s1, side]}
  - {name: pool, op: avgpool2d, kernel: 2}
  - {name: gap, op: global_avgpool}
  - {name: flat, op: flatten}
  - {name: drop, op: dropout, rate: 0.5}
  - {name: fc, op: linear, features: 10}
  - {name: loss, op: softmax_cross_entropy}
"""

GPT_SPEC = """
name: tiny_gpt
inputs:
  ids: {shape: [16], dtype: int64}
blocks:
  layer:
    params: {dim: 32, heads: 4}
    layers:
      - {name: ln1, op: layernorm}
      - {name: attn, op: attention, heads: "{heads}", causal: true}
      - {name: res1, op: add, inputs: [attn, $input]}
      - {name: ln2, op: layernorm}
      - {name: up, op: linear, features: "{dim * 4}"}
      - {name: act, op: gelu}
      - {name: down, op: linear, features: "{dim}"}
      - {name: drop, op: dropout, rate: 0.1}
      - {name: res2, op: add, inputs: [drop, res1]}
layers:
  - {name: wte, op: embedding, vocab: 64, dim: 32, positions: 16}
  - {use: layer, name: "h{i}", repeat: 2, args: {dim: 32, heads: 4}}
  - {name: ln_f, op: layernorm}
  - {name: head, op: linear, features: 64, bias: false, tied_to: wte}
  - {name: loss, op: softmax_cross_entropy}
"""

TWO_INPUTS_SPEC = """
name: two_inputs
inputs:
  a: {shape: [8]}
  b: [8]
layers:
  - {name: fa, op: linear, features: 8, inputs: a}
  - {name: sum, op: add, inputs: [fa, b]}
  - {name: out, op: linear, features: 4}
  - {name: loss, op: softmax_cross_entropy}
"""

GOOD = {
    "lenet5": (ZOO / "lenet5.yaml").read_text(encoding="utf-8"),
    "resnet50": (ZOO / "resnet50.yaml").read_text(encoding="utf-8"),
    "small_blocks": BLOCKS_SPEC,
    "tiny_gpt": GPT_SPEC,
    "two_inputs": TWO_INPUTS_SPEC,
}
TREES = {name: yaml.safe_load(text) for name, text in GOOD.items()}
EXAMPLES = int(os.environ.get("DNNPLAN_FUZZ_EXAMPLES", "0"))
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None,
                max_examples=EXAMPLES or 180)
TEXT_FUZZ = settings(FUZZ, max_examples=EXAMPLES or 120)

SCALARS = st.one_of(
    st.integers(-3, 12), st.sampled_from([0, -1, 10 ** 12, 2 ** 63, 3.5, -0.0, float("inf"), float("nan")]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=6), st.sampled_from(["{i}", "{width * 4}", "{", "}", "{1/0}", "$input", "x", "conv1", "relu",
                                          "{'a' * 3}", "{0 ** -1}", "{heads}", "{n - 5}", "layer{i}", "a\nb"]),
    st.lists(st.integers(-2, 5), max_size=3), st.dictionaries(st.sampled_from(["shape", "op", "a"]),
                                                              st.integers(-1, 3), max_size=2),
)


def check_outcome(text: str, name: str) -> None:
    source = f"fuzz/{name}.yaml"
    try:
        net = parse_network(text, source=source)
    except DnnplanError as err:
        msg = str(err)
        assert "\n" not in msg and "\r" not in msg, msg
        assert source in msg, msg
        return
    assert isinstance(net, Network)
    seen = {spec.name for spec in net.inputs}
    for layer in net.layers:
        assert layer.name not in seen, f"duplicate {layer.name}"
        assert all(src in seen for src in layer.inputs), f"{layer.name} reads a later layer"
        seen.add(layer.name)
        shape = layer.out_shape
        assert isinstance(shape, tuple)
        if layer.op == "softmax_cross_entropy":
            assert shape == ()
        else:
            assert shape and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape), \
                (layer.name, shape)


def nodes(tree, path=()):
    """Every (path, value) below the root."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield path + (k,), v
            yield from nodes(v, path + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield path + (i,), v
            yield from nodes(v, path + (i,))


def at(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def layer_lists(tree) -> list[tuple]:
    out = [()] if isinstance(tree, list) else []
    out += [p for p, v in nodes(tree) if isinstance(v, list) and v and all(isinstance(e, dict) for e in v)]
    return out


def names_in(tree) -> list[str]:
    return [v["name"] for _, v in nodes(tree) if isinstance(v, dict) and isinstance(v.get("name"), str)]


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(TREES)))
    tree = copy.deepcopy(TREES[name])
    for _ in range(draw(st.integers(1, 3))):
        tree = mutate(draw, tree)
    return name, tree


def mutate(draw, tree):
    everything = list(nodes(tree))
    kind = draw(st.sampled_from(["delete", "replace", "rename", "swap", "inputs", "duplicate", "op",
                                 "number", "truncate"]))
    if not everything:
        return draw(SCALARS)
    if kind == "delete":
        keyed = [p for p, _ in everything if isinstance(at(tree, p[:-1]), (dict, list))]
        path = draw(st.sampled_from(keyed))
        del at(tree, path[:-1])[path[-1]]
    elif kind == "replace":
        path, _ = draw(st.sampled_from(everything))
        at(tree, path[:-1])[path[-1]] = draw(SCALARS)
    elif kind == "rename":
        keyed = [p for p, _ in everything if isinstance(at(tree, p[:-1]), dict)]
        path = draw(st.sampled_from(keyed))
        parent, key = at(tree, path[:-1]), path[-1]
        new = draw(st.one_of(st.text(min_size=1, max_size=6), st.just(key[:-1] or "x"),
                             st.sampled_from(["name", "op", "inputs", "when", "use", "args", "repeat", "kernel"])))
        value = parent.pop(key)
        parent[new] = value
    elif kind in ("swap", "duplicate", "truncate"):
        lists = layer_lists(tree)
        if not lists:
            return tree
        seq = at(tree, draw(st.sampled_from(lists)))
        i = draw(st.integers(0, len(seq) - 1))
        if kind == "swap":
            j = draw(st.integers(0, len(seq) - 1))
            seq[i], seq[j] = seq[j], seq[i]
        elif kind == "duplicate":
            seq.insert(draw(st.integers(0, len(seq))), copy.deepcopy(seq[i]))
        else:
            del seq[i:]
    elif kind == "inputs":
        entries = [v for _, v in everything if isinstance(v, dict) and ("op" in v or "use" in v)]
        if not entries:
            return tree
        entry = draw(st.sampled_from(entries))
        ref = st.sampled_from(names_in(tree) + ["$input", "nope", "image", "ids"])
        entry["inputs"] = draw(st.one_of(ref, st.lists(ref, max_size=3), SCALARS))
    elif kind == "op":
        entries = [v for _, v in everything if isinstance(v, dict) and "op" in v]
        if not entries:
            return tree
        draw(st.sampled_from(entries))["op"] = draw(st.one_of(st.sampled_from(sorted(OPS)), st.text(max_size=8)))
    elif kind == "number":
        numbers = [p for p, v in everything if isinstance(v, int) and not isinstance(v, bool)]
        if not numbers:
            return tree
        path = draw(st.sampled_from(numbers))
        old = at(tree, path)
        at(tree, path[:-1])[path[-1]] = draw(st.sampled_from(
            [old + 1, old - 1, old * 2, -old, 0, old * 1000, 10 ** 9, old + 0.5, str(old)]))
    return tree


@FUZZ
@given(mutated())
def test_mutated_trees_parse_or_fail_cleanly(case):
    name, tree = case
    text = yaml.safe_dump(tree, sort_keys=False, default_flow_style=None, allow_unicode=True)
    check_outcome(text, name)


@st.composite
def corrupted_text(draw):
    name = draw(st.sampled_from(sorted(GOOD)))
    text = GOOD[name]
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        if draw(st.booleans()) and pos < len(text):
            text = text[:pos] + text[pos + 1:]
        else:
            char = draw(st.one_of(st.sampled_from(list("\t\n :-[]{},'\"#&*!|>%@`0123456789$")), st.characters()))
            text = text[:pos] + char + text[pos:]
    return name, text


@TEXT_FUZZ
@given(corrupted_text())
def test_corrupted_text_parses_or_fails_cleanly(case):
    name, text = case
    check_outcome(text, name)


def test_the_good_specs_are_good():
    for name, text in GOOD.items():
        net = parse_network(text, source=f"{name}.yaml")
        assert net.layers[-1].op == "softmax_cross_entropy"
