"""The global batch a command takes when --batch is not given, and the rule it says it followed."""

from dataclasses import replace

from networks.default_batch import SAMPLES_PER_DEVICE, SEQUENCES_PER_DEVICE, TOKENS_PER_BATCH, default_batch
from networks.loader import load_network


def _with_sequence(net, seq: int):
    spec = net.inputs[0]
    return replace(net, inputs=(replace(spec, shape=(seq,)), *net.inputs[1:]))


def test_a_language_model_takes_about_4m_tokens_capped_per_device():
    llama = load_network("llama3-8b")  # 8,192 tokens a sequence
    assert default_batch(llama, 64) == (TOKENS_PER_BATCH // 8192, "512 sequences of 8192 tokens: about 4M tokens, "
                                        "as Llama 2 and GPT-3 trained")
    batch, rule = default_batch(llama, 8)
    assert batch == SEQUENCES_PER_DEVICE * 8 and "4M tokens would be more than" in rule


def test_a_sequence_of_half_the_4m_tokens_or_more_is_one_sequence_said_so():
    llama = _with_sequence(load_network("llama3-8b"), 2 ** 31)
    batch, rule = default_batch(llama, 8)
    assert batch == 1 and rule.startswith("1 sequence of 2,147,483,648 tokens, the fewest") and "about 4M" in rule


def test_a_network_of_images_takes_a_number_a_device():
    want = (SAMPLES_PER_DEVICE * 8, f"{SAMPLES_PER_DEVICE} samples a device")
    assert default_batch(load_network("resnet50"), 8) == want
