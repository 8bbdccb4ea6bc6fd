"""Makes the graph-only ONNX fixtures beside it: torchvision's ResNet-50 and Hugging Face's GPT-2 small.

Run once, in a throwaway environment outside the repository (no weights are downloaded: both models
are built from their code with random values, and the files keep only the graph and the weights'
shapes)::

    python3 -m venv /tmp/exportvenv
    /tmp/exportvenv/bin/pip install torch==2.14.1 torchvision==0.29.1 transformers==5.24.0 onnx==1.23.2 onnxscript==0.7.2
    /tmp/exportvenv/bin/python tests/assets/onnx/export.py

What each export is, and why:

- ``resnet50.onnx``: ``torchvision.models.resnet50()`` in training mode, through PyTorch's TorchScript
  exporter (``dynamo=False``, ``export_params=False``, opset 17, dynamic batch). The weights become graph
  inputs with their shapes. Training mode keeps each BatchNormalization a node of its own (the
  ``torch.export`` exporter folds it into the convolution before it). Every parameter and buffer is
  first set to distinct random values: the exporter shares tensors of equal value (a fresh network's
  batch-norm scales are all ones), which would show one tensor used by many layers.
- ``gpt2.onnx``: ``transformers.GPT2LMHeadModel(GPT2Config())`` (GPT-2 small, 1024 tokens, tied head)
  with eager attention, through the ``torch.export`` exporter (opset 20, dynamic batch), in eval mode
  (no dropout nodes). Its MLP activation is set to ``torch.nn.GELU(approximate="tanh")``, the same
  function as GPT-2's ``gelu_new``, so it is exported as one Gelu node. Parameters get random values
  for the same reason as above (and so no zero bias is optimised away), and are then moved from
  initializers to graph inputs with their shapes; the small constants the graph computes with stay
  (the exporter's per-node stack traces are dropped).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

HERE = Path(__file__).resolve().parent


def _randomise(model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)


def export_resnet50(path: Path) -> None:
    import torchvision

    model = torchvision.models.resnet50()
    _randomise(model)
    model.train()
    torch.onnx.export(model, (torch.randn(2, 3, 224, 224),), str(path), input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      dynamo=False, export_params=False, opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        return self.model(input_ids=tokens, use_cache=False).logits


def export_gpt2(path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config()
    config._attn_implementation = "eager"
    model = GPT2LMHeadModel(config)
    for block in model.transformer.h:
        block.mlp.act = torch.nn.GELU(approximate="tanh")
    _randomise(model)
    model.tie_weights()
    model.eval()
    wrapper = _Logits(model)
    torch.onnx.export(wrapper, (torch.zeros(2, 1024, dtype=torch.long),), str(path), input_names=["tokens"],
                      output_names=["logits"], dynamic_shapes={"tokens": {0: torch.export.Dim("batch")}},
                      external_data=False, opset_version=20)
    params = {name for name, _ in wrapper.named_parameters(remove_duplicate=False)}
    strip_weights(path, params)


def strip_weights(path: Path, params: set[str]) -> None:
    """Move the initializers named in ``params`` to graph inputs with their shapes (no data), and drop
    the exporter's per-node notes (the Python stack trace of each node: most of the file)."""
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    keep = []
    for init in model.graph.initializer:
        if init.name in params:
            model.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            keep.append(init)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    onnx.save(model, str(path))


if __name__ == "__main__":
    export_resnet50(HERE / "resnet50.onnx")
    export_gpt2(HERE / "gpt2.onnx")
    for name in ("resnet50.onnx", "gpt2.onnx"):
        print(name, (HERE / name).stat().st_size, "bytes")
