"""Inference backends (ONNX Runtime, native TensorRT), engine manifests, KV cache, sampling.

Numpy in and out; never imports torch, ``venus.hw``, ``venus.capabilities`` or ``venus.daemon``.
"""
