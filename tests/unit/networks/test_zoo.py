"""The shipped zoo: every spec loads, and matches its reference implementation exactly.

Reference figures:
- CNN parameter counts and GMACs: torchvision's model documentation ("Table of all available
  classification weights": its "GFLOPS" column counts multiply-accumulates, rounded to two decimals)
  for alexnet, vgg16, resnet18, resnet50, resnet152 and googlenet.
- GPT-2 small: the original OpenAI release (124M checkpoint, token embedding tied to the LM head),
  124,439,808 parameters; MACs from Kaplan et al. 2020 ("Scaling Laws for Neural Language Models",
  Table 1).
- LeNet-5: 61,706 parameters, 416,520 MACs (conv and linear) for the modern form in lenet5.yaml.
"""

import json
import re
from importlib import resources

import pytest
from typer.testing import CliRunner

from networks.analysis import layer_cost, layer_splits, summarize
from networks.loader import load_network, zoo_names
from dnnplan.cli import app

from tests.support.paths import ROOT

EXPECTED = {"alexnet", "vgg16", "resnet18", "resnet50", "resnet152", "googlenet", "mlp", "gpt2",
            "largeimage2d", "lenet5", "resnext101", "gpt2-xl", "gpt3-175b", "llama3-8b", "llama3-70b",
            "llama3.1-405b", "mixtral-8x7b", "qwen3-30b-a3b"}


def _resnext101_params() -> int:
    """ResNeXt-101 32x4d counted from Xie et al. 2017, Table 1's template: per bottleneck a 1x1 conv
    to width w, a 3x3 conv in 32 groups, a 1x1 conv to 2w (x2 for the output), batch norms (2 per
    channel), a 1x1 projection with its norm on each stage's first block; stem, fc."""
    total = 3 * 64 * 49 + 2 * 64  # stem conv and norm
    c = 64
    for w, blocks in ((128, 3), (256, 4), (512, 23), (1024, 3)):
        out = 2 * w
        for b in range(blocks):
            total += c * w + 2 * w + w * (w // 32) * 9 + 2 * w + w * out + 2 * out
            if b == 0:
                total += c * out + 2 * out
            c = out
    return total + 2048 * 1000 + 1000

# torchvision model docs / the original GPT-2 release / formulas in the spec headers
PARAMS = {
    "lenet5": 61_706,
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet152": 60_192_808,
    "googlenet": 6_624_904,
    "gpt2": 124_439_808,
    "gpt2-xl": 1_557_611_200,  # the released 1558M checkpoint (HuggingFace "gpt2-xl")
    # GPT-3 175B as Megatron-LM trains it (dense attention): Narayanan et al. SC21 Table 2, "174.6B",
    # from Table 2.1 of Brown et al. 2020: 96 * (12 D^2 + 13 D) + V D + S D + 2 D
    "gpt3-175b": 96 * (12 * 12288**2 + 13 * 12288) + 50257 * 12288 + 2048 * 12288 + 2 * 12288,
    # 784 -> 4096 -> 4096 -> 4096 -> 10, biases included
    "mlp": (784 * 4096 + 4096) + 2 * (4096 * 4096 + 4096) + (4096 * 10 + 10),
    "resnext101": _resnext101_params(),
    # the released checkpoints' safetensors totals (HuggingFace model pages; counted by hand from
    # their config.json in tests/unit/networks/test_zoo_modern.py)
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704,
    "qwen3-30b-a3b": 30_532_122_624,
}

# torchvision model docs, "GFLOPS" column (= GMACs), two decimals
GMACS = {"alexnet": 0.71, "vgg16": 15.47, "resnet18": 1.81, "resnet50": 4.09, "resnet152": 11.51,
         "googlenet": 1.50}

_NETS = {}


def net(name):
    if name not in _NETS:
        _NETS[name] = load_network(name)
    return _NETS[name]


def conv_linear_macs(network) -> int:
    return sum(layer_cost(layer, 1).macs for layer in network.layers if layer.op in ("conv2d", "linear"))


def shape(name, layer):
    return net(name).layer(layer).out_shape


def spec_source(name) -> str:
    return (resources.files("networks.zoo") / f"{name}.yaml").read_text(encoding="utf-8")


# --- every network -------------------------------------------------------------------------------

def test_zoo_names_lists_every_shipped_network():
    assert EXPECTED <= set(zoo_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loads_and_ends_in_the_loss(name):
    network = net(name)
    assert network.name == name
    assert network.layers[-1].op == "softmax_cross_entropy"
    assert network.layers[-1].out_shape == ()
    assert sum(1 for layer in network.layers if layer.op == "softmax_cross_entropy") == 1


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_header_comment_cites_reference_params_and_macs(name):
    text = spec_source(name)
    header = text[:text.index("\nname:")]
    assert all(line.startswith("#") for line in header.splitlines())
    assert f"{net(name).num_params:,}" in header, "the header must state the parameter count"
    assert re.search(r"MACs", header), "the header must state the MACs"
    assert re.search(r"\(.*(19|20)\d\d", header, re.S), "the header must cite a paper with its year"


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_count_matches_the_reference(name):
    assert net(name).num_params == PARAMS[name]


@pytest.mark.parametrize("name", sorted(GMACS))
def test_conv_and_linear_macs_match_torchvision(name):
    network = net(name)
    macs = conv_linear_macs(network)
    assert round(macs / 1e9, 2) == GMACS[name]
    assert summarize(network, 1).macs_per_sample == macs  # CNNs have no attention MACs


def test_lenet5_macs_exact():
    assert summarize(net("lenet5"), 1).macs_per_sample == 416_520


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_info_json_works(name):
    result = CliRunner().invoke(app, ["info", name, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["network"] == name
    assert data["totals"]["params"] == net(name).num_params
    assert len(data["layers"]) == len(net(name).layers)


# --- shapes at key layers ------------------------------------------------------------------------

def test_alexnet_and_vgg16_shapes():
    assert shape("alexnet", "pool5") == (256, 6, 6)
    assert shape("alexnet", "flatten") == (9216,)
    assert shape("vgg16", "block5.pool") == (512, 7, 7)
    assert shape("vgg16", "flatten") == (25088,)
    assert sum(1 for layer in net("vgg16").layers if layer.op == "conv2d") == 13
    assert sum(1 for layer in net("vgg16").layers if layer.op == "linear") == 3


@pytest.mark.parametrize("name,blocks", [("resnet18", (2, 2, 2, 2)), ("resnet50", (3, 4, 6, 3)),
                                         ("resnet152", (3, 8, 36, 3))])
def test_resnet_stages(name, blocks):
    names = {layer.name for layer in net(name).layers}
    for stage, count in enumerate(blocks, 1):
        assert f"layer{stage}.{count - 1}.add" in names
        assert f"layer{stage}.{count}.add" not in names
    final = 512 if name == "resnet18" else 2048
    assert shape(name, f"layer4.{blocks[3] - 1}.relu") == (final, 7, 7)
    assert shape(name, "flatten") == (final,)


def test_resnet18_downsamples_only_where_the_shape_changes():
    downs = [layer.name for layer in net("resnet18").layers if layer.name.endswith(".down")]
    assert downs == ["layer2.0.down", "layer3.0.down", "layer4.0.down"]


def test_googlenet_concat_channels():
    expected = {"3a": 256, "3b": 480, "4a": 512, "4b": 512, "4c": 512, "4d": 528, "4e": 832,
                "5a": 832, "5b": 1024}
    for block, channels in expected.items():
        assert shape("googlenet", f"inception{block}.concat")[0] == channels
    assert shape("googlenet", "maxpool1") == (64, 56, 56)  # ceil_mode
    assert shape("googlenet", "maxpool3") == (480, 14, 14)
    assert shape("googlenet", "maxpool4") == (832, 7, 7)
    assert shape("googlenet", "flatten") == (1024,)
    bns = [layer for layer in net("googlenet").layers if layer.op == "batchnorm2d"]
    assert len(bns) == 57 and all(layer.p["eps"] == 0.001 for layer in bns)


def test_gpt2_structure_and_shapes():
    network = net("gpt2")
    assert network.inputs[0].shape == (1024,) and network.inputs[0].dtype == "int64"
    assert shape("gpt2", "embed") == (1024, 768)
    assert shape("gpt2", "h11.add2") == (1024, 768)
    assert shape("gpt2", "lm_head") == (1024, 50257)
    attn = [layer for layer in network.layers if layer.op == "attention"]
    assert len(attn) == 12 and all(layer.p["causal"] and layer.p["heads"] == 12 for layer in attn)
    head = network.layer("lm_head")
    assert head.p["tied_to"] == "embed" and head.num_params == 0


def test_gpt2_macs_per_sequence():
    # Kaplan et al. 2020, Table 1: forward MACs per token = N + n_layer*n_ctx*d_attn (+ d*V for the
    # de-embedding), N = 2*d*n_layer*(2*d_attn + d_ff) = 12*n_layer*d^2 the non-embedding params.
    # Kaplan's mask row counts the QK^T product only; the attention op also counts the weighted sum
    # (probabilities x V), another n_layer*n_ctx*d per token, and does not halve for causality.
    S, D, V, L = 1024, 768, 50257, 12
    kaplan_n = 2 * D * L * (2 * D + 4 * D)
    assert kaplan_n == 84_934_656
    per_block = 4 * S * D * D + 2 * S * S * D + 2 * S * D * (4 * D)  # projections, scores+sum, MLP
    expected = L * per_block + S * D * V  # plus the (tied) LM head
    assert expected == S * kaplan_n + 2 * L * S * S * D + S * D * V
    assert expected == 145_824_153_600
    assert summarize(net("gpt2"), 1).macs_per_sample == expected


def test_mlp_shapes_and_macs():
    assert shape("mlp", "layer3.fc") == (4096,)
    assert shape("mlp", "out") == (10,)
    assert summarize(net("mlp"), 1).macs_per_sample == 784 * 4096 + 2 * 4096 * 4096 + 4096 * 10
    # tensor parallelism: every linear splits its features (F) and its contraction (C)
    for layer in net("mlp").layers:
        if layer.op == "linear":
            assert {"N", "C", "F"} <= set(layer_splits(layer))


def test_largeimage2d_is_a_spatial_parallelism_case():
    network = net("largeimage2d")
    channels = [4, 32, 32, 64, 64, 128, 128, 256, 256, 512, 512, 512, 512]
    sides = [1024, 1024, 512, 512, 256, 256, 128, 128, 64, 64, 32, 32]
    convs = [layer for layer in network.layers if layer.op == "conv2d"]
    assert [layer.out_shape for layer in convs] == [(f, s, s) for f, s in zip(channels[1:], sides)]
    assert network.num_params == (9 * sum(c * f for c, f in zip(channels, channels[1:]))
                                  + 2 * sum(channels[1:]) + 512 * 2 + 2)
    assert conv_linear_macs(network) == (sum(s * s * f * c * 9 for s, c, f in zip(sides, channels, channels[1:]))
                                         + 512 * 2)
    # one full-resolution activation of one sample is 128 MiB in fp32; backward keeps about 1 GiB of it
    summary = summarize(network, 1)
    assert summary.kept[network.index()["stem1.conv"]] == 128 * 2**20  # batch norm keeps it
    assert summary.activation_bytes > 0.9 * 2**30
    for layer in convs:
        assert {"H", "W"} <= set(layer_splits(layer))


# --- docs/network-spec.md stays true ---------------------------------------------------------------

DOC = ROOT / "docs" / "network-spec.md"


def test_doc_op_table_names_every_op_and_parameter():
    from networks.ops.catalogue import OPS
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Op catalogue"):text.index("### Which dimensions")]
    table = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines()
             if line.startswith("| `")}
    for name, op in OPS.items():
        assert name in table, f"op {name} missing from the op table"
        for prm in op.params:
            assert f"`{prm.name}`" in table[name], f"{name}.{prm.name} missing from the op table"


def test_doc_worked_example_is_what_it_says():
    from networks.spec import parse_network
    text = DOC.read_text(encoding="utf-8")
    example = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    network = parse_network(example, "example")
    assert len(network.layers) == 19 and network.num_params == 9_962
    assert round(summarize(network, 1).macs_per_sample / 1e6, 2) == 9.88
    assert network.layers[-1].op == "softmax_cross_entropy"


@pytest.mark.parametrize("name, layers, dim, ctx", [("gpt2-xl", 48, 1600, 1024), ("gpt3-175b", 96, 12288, 2048)])
def test_large_gpt_macs_per_sequence(name, layers, dim, ctx):
    """The GPT-2 block's MACs (test_gpt2_macs_per_sequence) at each model's depth, width and context."""
    S, D, V, L = ctx, dim, 50257, layers
    per_block = 4 * S * D * D + 2 * S * S * D + 2 * S * D * (4 * D)
    assert summarize(net(name), 1).macs_per_sample == L * per_block + S * D * V
