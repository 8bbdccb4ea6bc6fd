"""`dnnplan import`: a Hugging Face config or an ONNX file turned into a network spec."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Optional

import typer

from dnnplan.options import ForceOpt, JsonOpt, SeqOpt
from dnnplan.output import check_outputs, named
from dnnplan.render.imported import imported_line
from networks.errors import DnnplanError
from networks.importers.imported_files import import_model
from networks.writing import write_file

ModelArg = Annotated[str, typer.Argument(help="A Hugging Face config.json, a folder holding one, or an ONNX "
                                              "model (.onnx).")]
SpecOutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Write the spec here (YAML: a .yaml or "
                                                   ".yml name) instead of printing it; - prints it.")]


def import_(model: ModelArg, seq: SeqOpt = None, out: SpecOutOpt = None, force: ForceOpt = False,
            as_json: JsonOpt = False) -> None:
    """Write the network spec of a model you already have: a Hugging Face config.json (or its folder) or an ONNX file.

    The spec (YAML, docs/network-spec.md) has each number commented with where it came from: the config
    field, a default of the family's config class, --seq, or the ONNX node. It is printed, or written to
    --out. `dnnplan info`, `predict` and `plan` also take the config, folder or ONNX file directly.

    Hugging Face families: gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe and phi3,
    where the op catalogue can express them; anything it cannot (a sliding window shorter than the
    sequence, partial rotary, ALiBi, an exact-erf GELU, a gated GELU...) is refused naming the field.
    gemma, gpt_neox and falcon are read too, but their published checkpoints all need one of those
    (Gemma's gated GELU, GPT-NeoX's and Pythia's partial rotary or exact GELU, Falcon's exact GELU),
    so today only a config edited to what the catalogue holds imports.
    ONNX: convolutions, linear layers (Gemm, MatMul + Add), normalisations, activations, pooling, residual
    adds and concatenations, flatten, dropout and attention; an operator it cannot map is refused naming
    the node (docs/network-spec.md, "Importing a model").

    dnnplan import Llama-2-7b-hf/config.json --seq 4096 --out llama2-7b.yaml
    """
    out = _spec_out(out, model)
    check_outputs({"--out": out}, force, reads=(model,))
    got = import_model(model, seq)
    if out:
        write_file(out, got.text, replace=force)
    if as_json:
        print(json.dumps({"network": got.network.name, "source": got.source, "params": got.network.num_params,
                          "layers": len(got.network.layers), "out": out, "spec": None if out else got.text}))
    elif out:
        imported_line(got.network, got.source, out)
    else:
        sys.stdout.write(got.text)


def _spec_out(out: str | None, model: str) -> str | None:
    """The file --out names (None: print the spec, as ``-`` asks too), refused in one line where it
    cannot hold the spec as dnnplan reads it back (a .json name: dnnplan reads a .json spec as JSON,
    and the spec is YAML with its provenance comments), is empty (:func:`dnnplan.output.named`), or
    is the model being imported
    (--force would replace the config it is read from)."""
    if out is None or out == "-" or not named("--out", out):
        return None
    if out.lower().endswith(".json"):
        raise DnnplanError(f"--out {out}: the spec is YAML with comments saying where each number came from, and "
                           "dnnplan reads a .json spec as JSON", hint=f"name it {out[:-5]}.yaml")
    source = os.path.join(model, "config.json") if os.path.isdir(model) else model
    if os.path.exists(out) and os.path.exists(source) and os.path.samefile(out, source):
        raise DnnplanError(f"--out {out} is the model being imported", hint="name another file for the spec")
    return out
