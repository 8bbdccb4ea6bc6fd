"""A typed key read (planner.launch_import.value_kinds), one helper for torchtitan's TOML and
DeepSpeed's JSON: each kind's test, the one line a wrong value gets in each format (its wording
pinned), and numbers no integer can hold (infinity, NaN) refused in that line, not a crash."""

from __future__ import annotations

import json

import pytest

from networks.errors import DnnplanError
from planner.launch_import import deepspeed, torchtitan
from planner.launch_import.value_kinds import BOOL, INT, PARTS, STR, STRS, typed, whole_at_least


@pytest.mark.parametrize("kind, good, bad", [
    (INT, [0, -3, 8], [True, 8.0, "8", None]),
    (STR, ["", "1F1B"], [1, ["a"], None]),
    (BOOL, [True, False], [0, 1, "true"]),
    (STRS, [[], ["a", "b"]], ["a", [1], [["a"]]]),
    (PARTS, [[], [["a"], []]], [["a"], [[1]], "a"]),
    (whole_at_least(1), [1, 8, 8.0], [0, 0.0, 1.5, True, "8", float("inf"), float("nan"), None]),
])
def test_each_kind_takes_its_values_and_no_other(kind, good, bad):
    assert all(kind.test(v) for v in good)
    assert not any(kind.test(v) for v in bad)


def test_a_wrong_value_is_the_refusal_given_its_message():
    assert typed(8, INT, lambda m: DnnplanError(m)) == 8
    with pytest.raises(DnnplanError) as err:
        typed("8", INT, lambda m: DnnplanError(m, file="f.toml", line=3, hint="write it"))
    assert str(err.value) == "f.toml:3: takes an integer, got '8' (write it)"


@pytest.mark.parametrize("read, text, path, message", [
    (deepspeed.read, json.dumps({"train_batch_size": "256", "train_micro_batch_size_per_gpu": 4}), "ds.json",
     "ds.json:1: train_batch_size: takes an integer of at least 1, got '256' (write \"train_batch_size\": N)"),
    (deepspeed.read, json.dumps({"train_micro_batch_size_per_gpu": 4.5}), "ds.json",
     "ds.json:1: train_micro_batch_size_per_gpu: takes an integer of at least 1, got 4.5 "
     "(write \"train_micro_batch_size_per_gpu\": N)"),
    (deepspeed.read, json.dumps({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": "yes"}}), "ds.json",
     "ds.json:1: bf16.enabled: takes true or false, got 'yes' (write true or false)"),
    (torchtitan.read, "[parallelism]\ntensor_parallel_degree = \"8\"\n", "job.toml",
     "job.toml:2: [parallelism] tensor_parallel_degree: takes an integer, got '8' "
     "(write tensor_parallel_degree = <an integer>)"),
    (torchtitan.read, "[model]\nconverters = \"float8\"\n", "job.toml",
     "job.toml:2: [model] converters: takes a list of strings, got 'float8' "
     "(write converters = <a list of strings>)"),
])
def test_each_format_words_a_wrong_value_as_before(read, text, path, message):
    with pytest.raises(DnnplanError) as err:
        read(text, path)
    assert str(err.value) == message


@pytest.mark.parametrize("number", ["Infinity", "NaN", "1e999"])
def test_a_number_no_integer_holds_is_refused_in_one_line(number):
    text = '{"train_batch_size": %s, "train_micro_batch_size_per_gpu": 4}' % number
    with pytest.raises(DnnplanError) as err:
        deepspeed.read(text, "ds.json")
    assert str(err.value).startswith("ds.json:1: train_batch_size: takes an integer of at least 1, got ")
