"""An ONNX model read as a network spec (pure): its protobuf read without the onnx package
(:mod:`.model_graph`), attention regions found (:mod:`.attention`, :mod:`.mask`, :mod:`.linear`), every
other node mapped to a layer (:mod:`.map`, :mod:`.convert`, :mod:`.pool`, :mod:`.attrs`);
:func:`.importer.import_onnx` is the entry."""
