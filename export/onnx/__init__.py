"""ONNX export of every component, the engine manifest, precision passes, parity checks.

``venus export CKPT --out ENGINES`` (``build.export_engines``) writes one graph per
component with exactly the inputs and outputs of docs/engines.md, then ``manifest.json``:

- ``specs.py``     the graphs' tensor names, dtypes and (symbolic) shapes
- ``graphs.py``    a small wrapper module per graph over the reference modules
- ``exporter.py``  ``torch.onnx.export(dynamo=True)``, dimension names, external data
- ``precision.py`` int4 (backbone, speech decoder) and fp16 passes
- ``manifest.py``  the manifest, read back from the saved graphs
- ``verify.py``    parity with the torch reference (``--verify`` and the tests)

Files: ``<component>.onnx``; the backbone's weights always in ``backbone.onnx.data``
(ONNX Runtime GenAI's layout; far past protobuf's 2 GB at real size), any other graph's
in ``<component>.onnx.data`` only when they exceed 1 GB. Derived sizes are named by
their formula: ``group + 3`` (flow tokens: the group then 3 lookahead tokens), ``2 *
group`` (its mel frames), ``condition_length + sequence`` (speech decoder positions and
logits), ``480 * frames`` (vocoder samples); ``total_sequence`` = past + new tokens.
The flow decoder's temperature is fixed at 1.0 in the graph: the runtime scales nothing,
the noise input carries all randomness.
"""
