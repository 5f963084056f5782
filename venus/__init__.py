"""Realtime-Venus: a full-duplex audio-visual voice assistant daemon for NVIDIA edge GPUs.

The subpackages live in top-level folders of the repository (see ``pyproject.toml``):
``venus.daemon``, ``venus.engines``, ``venus.hw``, ``venus.capabilities`` and the
offline ``venus.export``. Nothing is imported here, so ``import venus`` stays cheap.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("realtime-venus")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
