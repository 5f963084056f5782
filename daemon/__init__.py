"""The daemon: configuration, the frontend loop, the harness, service glue and the CLI.

It composes ``venus.hw``, ``venus.engines`` and ``venus.capabilities``; it never imports
``venus.export`` (offline tooling that needs torch).
"""
