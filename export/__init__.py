"""Offline tooling: torch reference model, checkpoint conversion, ONNX / TensorRT export.

Needs the ``export`` extra (torch). The daemon never imports this package.
"""
