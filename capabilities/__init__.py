"""Capability contracts, normalized results, the MQTT protocol, the worker SDK, built-ins.

A capability worker installs without torch or ONNX Runtime: this package never imports
``venus.engines``, ``venus.hw``, ``venus.daemon`` or ``venus.export``.
"""
