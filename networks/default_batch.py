"""The batch a command assumes when none is given, by the kind of network (pure).

- A **language model** (its first input is one sequence of integer token ids, shape ``[S]``) is
  trained on a global batch of about four million tokens: Llama 2 used 4M tokens for every size
  (Touvron et al. 2023, section 2.2), GPT-3 175B 3.2M (Brown et al. 2020, Table 2.1). So the
  default is ``2^22 / S`` sequences (a power of two for the zoo's power-of-two contexts), capped
  at :data:`SEQUENCES_PER_DEVICE` sequences a device: Megatron-LM's weak-scaling runs kept at most
  16 sequences a GPU (batch 512 on 32 GPUs; Narayanan et al., SC21, Table 1), and a few devices
  with a four-million-token batch would take minutes a step. At least one sequence.
- Anything else (images, vectors): :data:`SAMPLES_PER_DEVICE` samples a device, as data-parallel
  CNN training runs (Goyal et al. 2017 trained ResNet-50 at 32 images a GPU).
"""

from __future__ import annotations

from networks.ir import Network

TOKENS_PER_BATCH = 2 ** 22
SEQUENCES_PER_DEVICE = 16
SAMPLES_PER_DEVICE = 32


def sequence_length(net: Network) -> int | None:
    """The tokens per sample when the network reads token ids (one integer input of shape [S])."""
    spec = net.inputs[0] if net.inputs else None
    if spec is None or not spec.dtype.startswith("int") or len(spec.shape) != 1:
        return None
    return int(spec.shape[0])


def default_batch(net: Network, devices: int) -> tuple[int, str]:
    """The default global batch of ``net`` on ``devices`` devices and the rule it came from, in words."""
    seq = sequence_length(net)
    if seq is None:
        return SAMPLES_PER_DEVICE * devices, f"{SAMPLES_PER_DEVICE} samples a device"
    tokens = max(1, TOKENS_PER_BATCH // seq)
    unit = "token" if seq == 1 else "tokens"
    cap = SEQUENCES_PER_DEVICE * devices
    if tokens == 1:  # a sequence of half the 4M tokens or more: one, the fewest
        return 1, f"1 sequence of {seq:,} tokens, the fewest (Llama 2 and GPT-3 trained on about 4M tokens a batch)"
    if tokens <= cap:
        return tokens, f"{tokens} sequences of {seq} {unit}: about 4M tokens, as Llama 2 and GPT-3 trained"
    return cap, (f"{SEQUENCES_PER_DEVICE} sequences of {seq} {unit} a device: 4M tokens would be more than "
                 f"{SEQUENCES_PER_DEVICE} a device")
