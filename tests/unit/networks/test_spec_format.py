"""Positive behaviour of the network spec format: blocks, repeat, when, templates, aliases, order."""

from __future__ import annotations


import pytest

from networks.errors import DnnplanError
from networks.spec import parse_network

from tests.support.paths import ZOO


def parse(text: str):
    return parse_network(text, source="test.yaml")


def names(net) -> list[str]:
    return [layer.name for layer in net.layers]


def test_default_inputs_are_the_previous_layer_and_the_first_input():
    net = parse("""
name: t
inputs:
  x: {shape: [3, 8, 8]}
layers:
  - {name: conv, op: conv2d, filters: 4, kernel: 3}
  - {name: relu, op: relu}
  - {name: flat, op: flatten}
""")
    assert [layer.inputs for layer in net.layers] == [("x",), ("conv",), ("relu",)]
    assert net.layer("flat").out_shape == (4 * 6 * 6,)


def test_parameter_defaults_are_filled_in():
    net = parse("""
name: t
inputs:
  x: {shape: [3, 8, 8]}
layers:
  - {name: conv, op: conv2d, filters: 4, kernel: 3}
  - {name: pool, op: maxpool2d, kernel: 2}
  - {name: bn, op: batchnorm2d}
""")
    conv = net.layer("conv").p
    assert conv["stride"] == (1, 1) and conv["padding"] == (0, 0) and conv["dilation"] == (1, 1)
    assert conv["groups"] == 1 and conv["bias"] is True and conv["kernel"] == (3, 3)
    assert net.layer("pool").out_shape == (4, 3, 3)  # stride defaults to the kernel
    assert net.layer("bn").p["eps"] == pytest.approx(1e-5)
    assert net.inputs[0].dtype == "float32"


def test_multiple_inputs_and_the_list_shorthand():
    net = parse("""
name: t
inputs:
  a: {shape: [8]}
  b: [8]
  ids: {shape: [4], dtype: int32}
layers:
  - {name: fa, op: linear, features: 8, inputs: a}
  - {name: sum, op: add, inputs: [fa, b]}
  - {name: emb, op: embedding, vocab: 10, dim: 8, inputs: ids}
""")
    assert [(i.name, i.shape, i.dtype) for i in net.inputs] == [
        ("a", (8,), "float32"), ("b", (8,), "float32"), ("ids", (4,), "int32")]
    assert net.layer("sum").inputs == ("fa", "b")
    assert net.layer("emb").out_shape == (4, 8)


def test_out_of_order_layers_are_sorted_topologically_in_stable_file_order():
    net = parse("""
name: t
inputs:
  x: {shape: [8]}
layers:
  - {name: c, op: add, inputs: [a, b]}
  - {name: b, op: relu, inputs: x}
  - {name: z, op: gelu, inputs: x}
  - {name: a, op: linear, features: 8, inputs: x}
  - {name: loss, op: softmax_cross_entropy, inputs: c}
""")
    # b, z and a are ready at once and keep their file order; c waits for a
    assert names(net) == ["b", "z", "a", "c", "loss"]
    assert net.layer("loss").out_shape == ()


BLOCKS = """
name: t
inputs:
  x: {shape: [4, 16, 16]}
blocks:
  unit:
    params: {width: 4, stride: 1, project: false}
    layers:
      - {name: conv, op: conv2d, filters: "{width}", kernel: 3, stride: "{stride}", padding: 1}
      - {name: proj, op: conv2d, inputs: $input, filters: "{width}", kernel: 1, stride: "{stride}",
         when: "{project}"}
      - {name: add, op: add, inputs: [conv, "{'proj' if project else '$input'}"]}
  stage:
    params: [width, n]
    layers:
      - {use: unit, name: "0", args: {width: "{width}", stride: 2, project: true}}
      - {use: unit, name: "{i}", start: 1, repeat: "{n}", args: {width: "{width}"}}
layers:
  - {use: stage, name: layer1, args: {width: 6, n: 2}}
  - {name: after, op: relu, inputs: layer1}
  - {use: unit, name: plain, args: {stride: 2, project: true}}
"""


def test_nested_blocks_repeat_with_start_and_dotted_names():
    net = parse(BLOCKS)
    assert names(net) == [
        "layer1.0.conv", "layer1.0.proj", "layer1.0.add",
        "layer1.1.conv", "layer1.1.add",
        "layer1.2.conv", "layer1.2.add",
        "after", "plain.conv", "plain.proj", "plain.add"]


def test_when_skips_layers_and_templates_pick_inputs():
    net = parse(BLOCKS)
    assert net.layer("layer1.0.add").inputs == ("layer1.0.conv", "layer1.0.proj")
    assert net.layer("layer1.1.add").inputs == ("layer1.1.conv", "layer1.0.add")  # '$input'
    assert net.layer("layer1.0.proj").inputs == ("x",)  # $input of the first block is the network input


def test_block_defaults_and_typed_expressions():
    net = parse(BLOCKS)
    assert net.layer("layer1.0.conv").p["filters"] == 6
    assert net.layer("layer1.0.conv").p["stride"] == (2, 2)
    assert net.layer("layer1.1.conv").p["stride"] == (1, 1)  # the default of 'unit'
    assert net.layer("plain.conv").p["filters"] == 4  # the default width of 'unit'
    assert net.layer("plain.add").out_shape == (4, 4, 4)
    assert net.layer("layer1.2.add").out_shape == (6, 8, 8)


def test_a_block_default_may_be_a_template_over_its_parameters():
    """``downsample: "{stride != 1}"`` is evaluated with the instance's own arguments (before the
    ninth session it was passed on as the string, always true)."""
    net = parse("""
name: t
inputs:
  x: {shape: [3, 8, 8]}
blocks:
  unit:
    params: {width: 4, stride: 1, downsample: "{stride != 1}", wide: "{width * 2}"}
    layers:
      - {name: conv, op: conv2d, filters: "{width}", kernel: 3, stride: "{stride}", padding: 1}
      - {name: down, op: conv2d, inputs: $input, when: "{downsample}", filters: "{width}", kernel: 1,
         stride: "{stride}"}
      - {name: add, op: add, inputs: [conv, "{'down' if downsample else '$input'}"]}
      - {name: out, op: conv2d, filters: "{wide}", kernel: 1}
layers:
  - {name: c0, op: conv2d, filters: 4, kernel: 1}
  - {use: unit, name: a}
  - {use: unit, name: b, args: {width: 8, stride: 2}}
  - {use: unit, name: c, args: {width: 16, wide: 3}}
""")
    assert "a.down" not in names(net) and net.layer("a.add").inputs == ("a.conv", "c0")
    assert net.layer("b.add").inputs == ("b.conv", "b.down")
    assert net.layer("a.out").p["filters"] == 8 and net.layer("b.out").p["filters"] == 16
    assert net.layer("c.out").p["filters"] == 3  # given, not the default


def test_a_block_instance_name_means_its_last_layer():
    net = parse(BLOCKS)
    assert net.layer("after").inputs == ("layer1.2.add",)
    assert net.layer("plain.conv").inputs == ("after",)  # default input: the previous entry


def test_required_block_parameters_must_be_given():
    with pytest.raises(DnnplanError, match=r"needs argument\(s\) n"):
        parse(BLOCKS.replace("args: {width: 6, n: 2}", "args: {width: 6}"))


def test_expressions_typed_and_formatted():
    net = parse("""
name: t
inputs:
  x: {shape: [4]}
blocks:
  mlp:
    params: {width: 4, deep: false}
    layers:
      - {name: "up{i}", op: linear, features: "{width * 4}"}
      - {name: "{i}", op: linear, features: "{width // 2 + 1}", bias: "{not deep}"}
      - {name: extra, op: relu, when: "{deep and width > 2}"}
layers:
  - {use: mlp, name: "m{i}", repeat: 2, start: 3, args: {width: "{8 - 2 * 2}", deep: "{i == 0}"}}
  - {use: mlp, name: last, args: {width: 6, deep: true}}
""")
    assert names(net) == ["m3.up3", "m3.3", "m4.up4", "m4.4", "last.up0", "last.0", "last.extra"]
    up = net.layer("m3.up3").p["features"]
    assert up == 16 and type(up) is int
    assert net.layer("m3.3").p["features"] == 3 and net.layer("m3.3").p["bias"] is True
    assert net.layer("last.0").p["bias"] is False


def test_yaml_anchors_and_merge_keys():
    net = parse("""
name: t
inputs:
  x: {shape: [3, 8, 8]}
layers:
  - &c3 {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}
  - {<<: *c3, name: c2, filters: 6}
""")
    assert net.layer("c2").p["padding"] == (1, 1) and net.layer("c2").out_shape == (6, 8, 8)


def test_when_on_a_block_use_skips_the_whole_block():
    net = parse("""
name: t
inputs:
  x: {shape: [8]}
blocks:
  b:
    layers:
      - {name: r, op: relu}
layers:
  - {use: b, name: "b{i}", repeat: 3, when: false}
  - {use: b, name: kept, when: true}
""")
    assert names(net) == ["kept.r"]
    with pytest.raises(DnnplanError, match="every layer is left out by its 'when'") as err:
        parse("""
name: t
inputs:
  x: {shape: [8]}
layers:
  - {name: r, op: relu, when: false}
""")
    assert err.value.field == "layers"


def test_input_inside_a_nested_block_is_that_blocks_input():
    net = parse("""
name: t
inputs:
  x: {shape: [8]}
blocks:
  inner:
    layers:
      - {name: r, op: relu}
      - {name: sum, op: add, inputs: [r, $input]}
  outer:
    layers:
      - {name: pre, op: gelu}
      - {use: inner, name: in}
      - {name: sum, op: add, inputs: [in, $input]}
layers:
  - {use: outer, name: o}
""")
    assert net.layer("o.in.sum").inputs == ("o.in.r", "o.pre")
    assert net.layer("o.sum").inputs == ("o.in.sum", "x")


def test_resnet50_from_the_zoo():
    net = parse_network((ZOO / "resnet50.yaml").read_text(encoding="utf-8"), source="resnet50.yaml")
    assert net.num_params == 25_557_032
    n = set(names(net))
    assert {"layer1.0.conv1", "layer1.0.down", "layer4.2.relu"} <= n
    assert "layer1.1.down" not in n
    assert net.layer("layer1.1.add").inputs == ("layer1.1.bn3", "layer1.0.relu")
    assert net.layer("layer2.0.conv2").p["stride"] == (2, 2)
    assert net.layer("avgpool").inputs == ("layer4.2.relu",)
    assert net.layer("fc").out_shape == (1000,)


def test_lenet5_from_the_zoo():
    net = parse_network((ZOO / "lenet5.yaml").read_text(encoding="utf-8"), source="lenet5.yaml")
    assert net.num_params == 61_706
    assert net.layer("flatten").out_shape == (400,)


def test_a_layer_in_a_block_reads_one_written_after_it_in_the_block():
    """As at the top level, a layer may name one written later; inside a block the name is this
    instance's first, and a loop through such names is a cycle."""
    net = parse("""
name: t
inputs:
  x: {shape: [8]}
blocks:
  b:
    layers:
      - {name: r, op: relu, inputs: s}
      - {name: s, op: relu, inputs: $input}
      - {name: sum, op: add, inputs: [r, s]}
layers:
  - {use: b, name: "b{i}", repeat: 2}
""")
    assert net.layer("b0.r").inputs == ("b0.s",) and net.layer("b1.s").inputs == ("b0.sum",)
    assert net.layer("b1.r").inputs == ("b1.s",)
    with pytest.raises(DnnplanError, match="cycle"):
        parse("""
name: t
inputs:
  x: {shape: [8]}
blocks:
  b:
    layers:
      - {name: r, op: relu, inputs: sum}
      - {name: s, op: relu, inputs: r}
      - {name: sum, op: add, inputs: [r, s]}
layers:
  - {use: b, name: b0}
""")


def test_a_tab_indenting_yaml_is_named_with_its_fix():
    """YAML's own words for a tab ('found character that cannot start any token') name no tab: the
    error says where the tab is and that YAML indents with spaces."""
    from networks.spec_yaml import load_yaml
    with pytest.raises(DnnplanError) as err:
        load_yaml("name: x\nlayers:\n\t- {name: fc, op: linear}\n", "net.yaml")
    assert "net.yaml:3:" in str(err.value) and "(a tab at column 1)" in str(err.value)
    assert "indents with spaces, never tabs" in (err.value.hint or "")
    for text in ("name: [x\n", 'layers:\n  - {name: "c\t1", op: conv2d, kernel: 5 x: }}\n'):
        with pytest.raises(DnnplanError) as other:  # another mistake, a tab inside a quoted value: no word of tabs
            load_yaml(text, "net.yaml")
        assert "tab" not in str(other.value) and "tab" not in (other.value.hint or "")
