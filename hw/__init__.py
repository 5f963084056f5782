"""Devices: microphone, speaker, camera, VAD, echo cancellation, file and synthetic sources.

Never imports ``venus.engines``, ``venus.capabilities``, ``venus.daemon`` or ``venus.export``.
"""
