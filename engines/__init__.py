"""Inference backends (ONNX Runtime, native TensorRT), engine manifests, KV cache, sampling.

Numpy in and out; never imports torch, ``venus.hw``, ``venus.capabilities`` or ``venus.daemon``.

Reading order: ``runners.Engines.open`` (manifest -> ``hashcache`` verification ->
``providers`` -> ``session`` per graph) builds one runner per component: ``encoders``
(audio, vision), ``backbone``, ``speech``, ``flow``, ``vocoder``. KV-cached graphs run
through ``kvcache`` (preallocated, IO-bound, double-buffered); ``sampler`` chooses tokens.
Each runner is shared; a stream's state comes from ``runner.new_state()`` and resets in
one call. Nothing heavy is imported here, so ``venus.engines.manifest`` stays cheap.
"""
