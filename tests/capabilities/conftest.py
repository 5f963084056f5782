"""Fixtures for the capability tests: started in-process transports and their events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.inprocess import ECHO, Recorder, echo

from venus.capabilities.inprocess import Capability, InProcessTransport


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make(recorder: Recorder) -> Iterator[Callable[..., InProcessTransport]]:
    """Started transports, stopped at the end of the test."""
    made: list[InProcessTransport] = []

    def build(*capabilities: Capability, **kw: Any) -> InProcessTransport:
        t = InProcessTransport([Capability(ECHO, echo), *capabilities], **kw)
        t.start(recorder)
        made.append(t)
        return t

    yield build
    for t in made:
        t.stop(timeout_s=1.0)
