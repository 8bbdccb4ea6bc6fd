"""Machine model: shipped YAMLs, strict parsing, the local machine, group spans."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from costmodel.machine.loading import (DEFAULT_MACHINE, HostFacts, list_machines, load_machine, resolve_auto,
                                       shipped_machine_names)
from costmodel.machine.model import GIB, machine_from_dict
from networks.errors import DnnplanError

GOOD = {
    "name": "toy",
    "devices_per_node": 4,
    "nodes": 2,
    "device": {"name": "toy-gpu", "peak_tflops": {"float32": 10, "bfloat16": 100},
               "memory_gib": 16, "memory_bandwidth_gb_per_s": 1000, "efficiency": 0.5},
    "intra": {"name": "nvlink", "latency_us": 2, "bandwidth_gb_per_s": 100, "reduce_gb_per_s": 200},
    "inter": {"latency_us": 5, "bandwidth_gb_per_s": 25},
}


def test_every_shipped_machine_loads():
    names = shipped_machine_names()
    assert {"dgx-h100", "dgx-a100", "dgx1-v100", "summit", "local", "dgx-h200", "dgx-b200", "gb200-nvl72",
            "mi300x"} <= set(names)
    machines = list_machines()
    assert [m.name for m in machines] == names
    for m in machines:
        assert m.device.peak_flops["float32"] > 0
        assert m.intra.beta_s_per_byte <= m.inter.beta_s_per_byte


def test_dgx_h100_figures():
    m = load_machine("dgx-h100")
    assert m.devices_per_node == 8 and m.nodes is None and m.max_devices() is None
    assert m.device.mem_capacity_bytes == 81_559 * 2**20  # NVML's total of the 80 GB (the machine file's source)
    assert m.device.peak_flops["bfloat16"] == pytest.approx(989.5e12)
    assert m.device.mem_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert 1 / m.intra.beta_s_per_byte == pytest.approx(450e9)   # 900 GB/s bidirectional
    assert 1 / m.inter.beta_s_per_byte == pytest.approx(50e9)    # 400 Gb/s per GPU


def test_dgx_h200_figures():
    m = load_machine("dgx-h200")
    assert m.devices_per_node == 8 and m.domain_size == 8
    assert m.device.mem_capacity_bytes == 143_771 * 2**20                # NVML's total of the 141 GB HBM3e
    assert m.device.mem_bandwidth_bytes_per_s == pytest.approx(4.8e12)    # 4.8 TB/s
    assert m.device.peak_flops["float8"] == pytest.approx(3958e12 / 2)   # 3,958 with sparsity


def test_dgx_b200_figures():
    m = load_machine("dgx-b200")
    assert m.devices_per_node == 8 and m.domain_size == 8
    assert m.device.mem_capacity_bytes == 1440 / 8 * 2**30                 # 1,440 GB a node
    assert m.device.mem_bandwidth_bytes_per_s == pytest.approx(64e12 / 8)  # 64 TB/s a node
    assert m.device.peak_flops["float8"] == pytest.approx(72e15 / 8 / 2)  # 72 PFLOPS sparse a node
    assert m.device.peak_flops["bfloat16"] == pytest.approx(36e15 / 8 / 2)
    assert 1 / m.intra.beta_s_per_byte == pytest.approx(14.4e12 / 8 / 2)  # 14.4 TB/s NVLink a node


def test_gb200_nvl72_figures_and_domain():
    m = load_machine("gb200-nvl72")
    assert (m.devices_per_node, m.domain_size) == (4, 72)                  # trays of 4, 72 on NVLink
    assert m.device.mem_bandwidth_bytes_per_s == pytest.approx(576e12 / 72)
    assert m.device.peak_flops["float8"] == pytest.approx(720e15 / 72 / 2)
    assert 1 / m.intra.beta_s_per_byte == pytest.approx(900e9)             # 1.8 TB/s bidirectional
    assert m.link_for(range(16)) is m.intra                                # a TP 16 group spans 4 trays
    assert m.link_for([0, 72]) is m.inter                                  # two racks


def test_mi300x_figures():
    m = load_machine("mi300x")
    assert m.devices_per_node == 8 and m.device.mem_capacity_bytes == 192 * 2**30
    assert m.device.mem_bandwidth_bytes_per_s == pytest.approx(5.3e12)
    assert m.device.peak_flops["bfloat16"] == pytest.approx(1307.4e12)
    assert m.device.peak_flops["float8"] == pytest.approx(2614.9e12)
    assert 1 / m.intra.beta_s_per_byte == pytest.approx(896e9 / 2)         # 896 GB/s aggregate


def test_nvlink_domain_spans_nodes():
    m = machine_from_dict({**GOOD, "nodes": 4, "devices_per_nvlink_domain": 8}, "toy.yaml")
    assert m.domain_size == 8 and m.devices_per_node == 4
    assert m.link_for([3, 4]) is m.intra                                   # two nodes, one domain
    assert m.link_for([7, 8]) is m.inter                                   # two domains
    assert m.group_span(range(16)) == (8, 2)                               # the collective's two levels
    assert m.same_domain(0, 7) and not m.same_domain(7, 8)
    plain = machine_from_dict(GOOD, "toy.yaml")
    assert plain.domain_size == 4 and plain.link_for([3, 4]) is plain.inter


def test_dgx1_shares_four_edr_rails_among_eight_gpus():
    m = load_machine("dgx1-v100")
    assert m.devices_per_node == 8 and m.nodes is None
    assert m.device.peak_flops["float16"] == 125e12 and "bfloat16" not in m.device.peak_flops
    assert 1 / m.inter.beta_s_per_byte == pytest.approx(4 * 100e9 / 8 / 8)  # 4 x 100 Gb/s per 8 GPUs
    assert 1 / m.intra.beta_s_per_byte == pytest.approx(150e9)


def test_summit_shares_two_edr_rails_among_six_gpus():
    m = load_machine("summit")
    assert (m.devices_per_node, m.nodes, m.max_devices()) == (6, 4608, 6 * 4608)
    assert m.device.mem_capacity_bytes == 16 * 2**30
    assert 1 / m.inter.beta_s_per_byte == pytest.approx(25e9 / 6, rel=1e-4)


def test_default_machine_runs_the_readme_job():
    m = load_machine(DEFAULT_MACHINE)
    m.check_devices(64)
    assert m.link_for(range(8)) is m.intra and m.link_for(range(64)) is m.inter


def test_local_resolves_to_this_computers_cores():
    m = load_machine("local")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert m.devices_per_node == cores and m.nodes == 1
    assert m.device.peak_flops["float64"] == m.device.peak_flops["float32"] / 2
    assert 0 < m.device.mem_capacity_bytes < 2**50
    with pytest.raises(DnnplanError, match="do not fit"):
        m.check_devices(cores + 1)


def test_local_inside_an_mpi_job_has_the_cores_its_ranks_share(monkeypatch):
    """A rank bound to one core sizes `local` by the node's cores its job's ranks agreed on
    (executor.launch.node publishes them), so every rank loads the machine the plan was made for."""
    from costmodel.machine.loading import NODE_CORES_ENV
    from executor.launch.node import node_cores
    assert node_cores([frozenset({0}), frozenset({1}), frozenset({1, 2})]) == 3
    assert node_cores([frozenset({3}), frozenset({3})]) == 1
    monkeypatch.setenv(NODE_CORES_ENV, "7")
    assert load_machine("local").devices_per_node == 7
    monkeypatch.setenv(NODE_CORES_ENV, "")  # unset or empty: this process's own affinity
    assert load_machine("local").devices_per_node == (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())


def test_resolve_auto_uses_the_facts_given():
    facts = HostFacts(cores=12, cpu_name="Toy CPU", flops_per_cycle_float32=32, clock_hz=2e9,
                      memory_bytes=48 * 2**30)
    data = copy.deepcopy(GOOD)
    data["devices_per_node"] = "auto"
    data["device"].update(name="auto", peak_tflops="auto", memory_gib="auto")
    m = machine_from_dict(resolve_auto(data, facts), "toy.yaml")
    assert m.devices_per_node == 12 and m.device.name == "Toy CPU (one core)"
    assert m.device.peak_flops["float32"] == pytest.approx(32 * 2e9)
    assert m.device.mem_capacity_bytes == pytest.approx(4 * 2**30)


def test_units_converted_at_load():
    m = machine_from_dict(GOOD, "toy.yaml")
    assert m.device.peak_flops["float32"] == 10e12
    assert m.device.mem_capacity_bytes == 16 * GIB
    assert m.intra.alpha_s == pytest.approx(2e-6)
    assert m.intra.beta_s_per_byte == pytest.approx(1 / 100e9)
    assert m.intra.gamma_s_per_byte == pytest.approx(1 / 200e9)
    assert m.inter.name == "inter"
    # no reduce_gb_per_s: a third of the device's memory bandwidth (read 2, write 1)
    assert m.inter.gamma_s_per_byte == pytest.approx(3 / 1000e9)
    assert m.source == "toy.yaml" and m.profile is None
    # frozen and hashable, so planners can key caches on a machine
    assert m == machine_from_dict(GOOD, "toy.yaml") and hash(m) == hash(machine_from_dict(GOOD, "toy.yaml"))


def test_group_span_and_links():
    m = machine_from_dict(GOOD, "toy.yaml")
    assert m.group_span([0, 1, 2, 3]) == (4, 1)
    assert m.group_span([0, 4]) == (1, 2)
    assert m.group_span([2, 3, 4, 5]) == (2, 2)
    assert m.group_span(range(8)) == (4, 2)
    assert m.link_for([1, 3]) is m.intra and m.link_for([3, 4]) is m.inter
    assert m.max_devices() == 8
    m.check_devices(8)
    with pytest.raises(DnnplanError, match="9 devices do not fit"):
        m.check_devices(9)
    with pytest.raises(DnnplanError):
        m.check_devices(0)


def _mutated(path: tuple[str, ...], value=None, delete: bool = False) -> dict:
    data = copy.deepcopy(GOOD)
    node = data
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


BAD = [
    # (what is wrong, mutated mapping, key the message must name, words it must contain)
    ("unknown top key", _mutated(("gpus",), 8), "gpus", "unknown key"),
    ("unknown link key", _mutated(("inter", "bandwidth_gbps"), 25), "inter.bandwidth_gbps",
     "bandwidth_gb_per_s"),
    ("missing device", _mutated(("device",), delete=True), "device", "missing key"),
    ("missing latency", _mutated(("intra", "latency_us"), delete=True), "intra.latency_us",
     "missing key"),
    ("negative bandwidth", _mutated(("inter", "bandwidth_gb_per_s"), -25),
     "inter.bandwidth_gb_per_s", "not a plausible value"),
    ("zero memory", _mutated(("device", "memory_gib"), 0), "device.memory_gib", "not a plausible value"),
    ("bandwidth below 1 MB/s", _mutated(("intra", "bandwidth_gb_per_s"), 1e-300), "intra.bandwidth_gb_per_s",
     "1 MB/s to 100 TB/s"),
    ("bandwidth above 100 TB/s", _mutated(("inter", "bandwidth_gb_per_s"), 2e5), "inter.bandwidth_gb_per_s",
     "1 MB/s to 100 TB/s"),
    ("latency below 1 ns", _mutated(("intra", "latency_us"), 1e-6), "intra.latency_us", "1 ns to 1 s"),
    ("latency above 1 s", _mutated(("inter", "latency_us"), 5e6), "inter.latency_us", "1 ns to 1 s"),
    ("peak at 10^19 FLOP/s", _mutated(("device", "peak_tflops", "float32"), 1e7), "device.peak_tflops.float32",
     "10^18 FLOP/s"),
    ("nan memory", _mutated(("device", "memory_gib"), float("nan")), "device.memory_gib", "not a plausible value"),
    ("inf reduce rate", _mutated(("intra", "reduce_gb_per_s"), float("inf")), "intra.reduce_gb_per_s",
     "not a plausible value"),
    ("2^30 devices per node", _mutated(("devices_per_node",), 2**30), "devices_per_node", "up to 2^24"),
    ("string number", _mutated(("device", "memory_gib"), "80GB"), "device.memory_gib",
     "expected a number"),
    ("exponent YAML reads as text", _mutated(("device", "memory_gib"), "8e1"), "device.memory_gib",
     "write it with a decimal point, e.g. 8.0e+01"),
    ("quoted number", _mutated(("device", "memory_gib"), "80"), "device.memory_gib", "write 80 without quotes"),
    ("exponent past the range", _mutated(("device", "peak_tflops", "float32"), "1e400"), "device.peak_tflops.float32",
     "as a number it lies outside 1e-06 to 1e+06 TFLOP/s"),
    ("float node count", _mutated(("devices_per_node",), 8.5), "devices_per_node", "integer"),
    ("bool node count", _mutated(("nodes",), True), "nodes", "integer"),
    ("unknown dtype", _mutated(("device", "peak_tflops", "fp32"), 5), "device.peak_tflops.fp32",
     "unknown dtype"),
    ("no float32 peak", _mutated(("device", "peak_tflops"), {"float16": 5}),
     "device.peak_tflops.float32", "missing key"),
    ("efficiency above one", _mutated(("device", "efficiency"), 1.5), "device.efficiency",
     "between 0.001 and 1"),
    ("link not a mapping", _mutated(("intra",), [1, 2]), "intra", "mapping"),
    ("domain not whole nodes", _mutated(("devices_per_nvlink_domain",), 6), "devices_per_nvlink_domain",
     "not whole nodes of 4"),
    ("domain beyond the machine", _mutated(("devices_per_nvlink_domain",), 16), "devices_per_nvlink_domain",
     "larger than the machine's 8"),
    ("domain not an integer", _mutated(("devices_per_nvlink_domain",), "72"), "devices_per_nvlink_domain",
     "positive integer"),
    ("domain zero", _mutated(("devices_per_nvlink_domain",), 0), "devices_per_nvlink_domain",
     "positive integer"),
]


@pytest.mark.parametrize("what,data,key,words", BAD, ids=[b[0] for b in BAD])
def test_bad_machine_dicts_name_key_and_file(what, data, key, words):
    with pytest.raises(DnnplanError) as info:
        machine_from_dict(data, "bad.yaml")
    err = info.value
    assert err.file == "bad.yaml" and err.field == key
    assert "bad.yaml" in str(err) and key in str(err) and words in str(err)


@pytest.mark.parametrize("what,data,key,words", BAD, ids=[b[0] for b in BAD])
def test_bad_machine_files_name_key_file_and_line(tmp_path, what, data, key, words):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(DnnplanError) as info:
        load_machine(str(path))
    err = info.value
    assert err.file == str(path) and err.field == key and words in str(err)
    lines = path.read_text().splitlines()
    if words == "missing key":       # the line of the mapping that lacks it, if not the top level
        parent = key.rpartition(".")[0]
        if parent:
            assert lines[err.line - 1].strip().startswith(parent.split(".")[-1] + ":")
    else:
        assert lines[err.line - 1].strip().startswith(key.split(".")[-1] + ":")


def test_yaml_syntax_errors_and_duplicates(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: a\nname: b\n")
    with pytest.raises(DnnplanError, match="key 'name' appears twice") as info:
        load_machine(str(path))
    assert info.value.line == 2
    path.write_text("name: [a\n")
    with pytest.raises(DnnplanError, match="not valid YAML"):
        load_machine(str(path))
    path.write_text("")
    with pytest.raises(DnnplanError, match="the machine file is empty"):
        load_machine(str(path))
    path.write_text("- a list\n")
    with pytest.raises(DnnplanError, match="expected a mapping of keys at the top level, got list"):
        load_machine(str(path))


def test_unknown_machine_and_missing_file(tmp_path):
    with pytest.raises(DnnplanError, match="did you mean 'dgx-h100'"):
        load_machine("dgx-h10")
    with pytest.raises(DnnplanError, match="no such machine file"):
        load_machine(str(tmp_path / "nope.yaml"))


def test_relative_profile_resolved_against_the_file(tmp_path):
    data = dict(GOOD, profile="tables/toy.json")
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    m = load_machine(str(path))
    assert m.profile == str(tmp_path / "tables" / "toy.json")
    assert m.source == str(path)


def test_batched_reshards_take_the_link_of_the_domain_not_the_node():
    """The planner's vectorised reshard costs (costmodel.layer.edge_table) and edge_estimate agree on
    a machine whose NVLink domain spans two nodes, and a reshard inside the domain is cheaper than
    the same one between nodes that share no domain."""
    import random

    from costmodel.layer.candidates import candidate_strategies
    from costmodel.layer.edge import edge_estimate
    from costmodel.layer.edge_table import reshard_times
    from costmodel.parallel.shard import input_layout, output_layout
    from networks.loader import load_network
    domain = machine_from_dict({**GOOD, "nodes": 4, "devices_per_nvlink_domain": 8}, "toy.yaml")
    nodes = machine_from_dict({**GOOD, "nodes": 4}, "toy.yaml")
    net = load_network("gpt2")
    by = {layer.name: layer for layer in net.layers}
    rng = random.Random(8)
    cheaper = 0
    for _ in range(40):
        u, v, slot = rng.choice(net.edges())
        su, sv = rng.choice(candidate_strategies(by[u], 8, 8)), rng.choice(candidate_strategies(by[v], 8, 8))
        pair = (output_layout(by[u], su, 8), input_layout(by[v], sv, 8, slot))
        for m in (domain, nodes):
            (t,) = reshard_times([pair], False, 4, m)
            assert t == pytest.approx(edge_estimate(by[u], su, by[v], sv, slot, 8, m).fwd_s)
        (in_domain,), (across,) = reshard_times([pair], False, 4, domain), reshard_times([pair], False, 4, nodes)
        assert in_domain <= across
        cheaper += in_domain < across
    assert cheaper  # some reshard crosses the two nodes the domain joins


def test_an_empty_machine_file_says_it_is_empty(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("# nothing here yet\n")
    with pytest.raises(DnnplanError) as err:
        load_machine(str(path))
    assert "the machine file is empty" in str(err.value) and str(path) in str(err.value)
    assert "NoneType" not in str(err.value)
