"""A Hugging Face ``config.json`` -> the equivalent network spec (YAML text). Pure: text in, text out.

Reads ``model_type`` and hands the config to its family's reader
(:data:`networks.importers.hf.families.FAMILIES`), checks that the op catalogue can express what it
found (:func:`networks.importers.hf.decoder.check_expressible`) and writes the spec
(:func:`networks.importers.hf.spec.decoder_spec`). Only causal language models are imported: the
head is the LM head over the vocabulary, trained with the next-token loss.
"""

from __future__ import annotations

import difflib

from networks.errors import DnnplanError, short
from networks.importers.hf.config import Config, parse_config
from networks.importers.hf.decoder import check_expressible
from networks.importers.hf.families import FAMILIES
from networks.importers.hf.spec import block_layers, decoder_spec
from networks.spec_expand import MAX_ENTRIES

#: Head classes (``architectures``) whose model is the decoder plus an LM head.
LM_HEADS = ("ForCausalLM", "LMHeadModel")


def _architecture(cfg: Config) -> None:
    arch = cfg.raw("architectures")
    if arch is None:
        return
    if not isinstance(arch, list) or not all(isinstance(a, str) for a in arch):
        raise cfg.fail("architectures", f"must be a list of class names, got {short(arch)}")
    other = [a for a in arch if not a.endswith(LM_HEADS)]
    if other:
        raise cfg.fail("architectures", f"architectures={short(arch)}: only the causal language model "
                       f"(a class ending in {' or '.join(LM_HEADS)}) is imported",
                       hint="the spec's head is the LM head over the vocabulary")


def _not_too_deep(decoder, source: str) -> None:
    """One line naming the config's layer count where its blocks expand past what a spec holds
    (networks.spec_expand's :data:`MAX_ENTRIES`); else the spec's own error would name a line
    of the spec written, which the user never saw."""
    per_block = len(block_layers(decoder)) + 1  # the block's layers, and the block's own entry
    most = MAX_ENTRIES // per_block
    if decoder.layers.value > most:
        raise DnnplanError(f"{decoder.layers.field}={short(decoder.layers.value)}: each decoder layer is {per_block} "
                           f"entries of the spec ({per_block - 1} layers and the block), past the {MAX_ENTRIES:,} "
                           "entries a network spec holds", file=source,
                           field=decoder.layers.field, hint=f"at most {most:,} decoder layers")


def import_config(text: str, source: str, seq: int | None = None, name: str = "model") -> str:
    """The network spec (YAML text) equivalent to the config in ``text``; ``seq`` overrides the
    sequence length (default: the config's longest); ``name`` names the network."""
    if seq is not None and seq < 1:
        raise DnnplanError(f"--seq must be a positive integer, got {seq}")
    data = parse_config(text, source)
    kind = data.get("model_type")
    if kind is None:
        raise DnnplanError("the config has no 'model_type'", file=source, field="model_type",
                           hint="a Hugging Face config.json names its model_type (llama, gpt2, ...)")
    if kind not in FAMILIES:
        close = difflib.get_close_matches(str(kind).lower(), FAMILIES, n=1, cutoff=0.75)
        hint = (f"did you mean {close[0]}? " if close else "") + f"it imports {', '.join(FAMILIES)}"
        raise DnnplanError(f"model_type {short(kind)} is not a family dnnplan imports", file=source,
                           field="model_type", hint=hint)
    cfg = Config(data, source, kind)
    cfg.read.update({"model_type", "_name_or_path", "transformers_version"})
    _architecture(cfg)
    decoder = FAMILIES[kind](cfg, seq)
    check_expressible(decoder, source)
    _not_too_deep(decoder, source)
    origin = data.get("_name_or_path")
    intro = [f"Imported by `dnnplan import` from {source} (model_type {kind}"
             + (f", {origin}" if isinstance(origin, str) and origin else "") + ").",
             "Each layer's comment says which config field (or default of transformers' config class) "
             "gave each number.", ""]
    return decoder_spec(decoder, name, intro, [k for k in cfg.unread() if not k.startswith("_")])
