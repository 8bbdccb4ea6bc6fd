"""Importers: a Hugging Face config.json or an ONNX graph turned into the equivalent network spec.

One folder an importer (:mod:`networks.importers.hf`, :mod:`networks.importers.onnx`), beside what
both write with (:mod:`.spec_out`, :mod:`.values`) and their one I/O edge (:mod:`.imported_files`).
Each importer is pure: it takes the file's text or bytes (read through :mod:`networks.reading`) and
returns the spec's YAML text, every number commented with where it came from, which
:func:`networks.spec.parse_network` then reads like any hand-written spec. What the op catalogue
cannot express is refused in one line naming the field or node (docs/network-spec.md, "Importing a
model").
"""
