"""The harness behind the frontend loop, end to end: a result is offered at a chunk
boundary, answered in a reply that is Delivered once heard, and the reply's own
delegation becomes a new item with its evidence, dispatched, answered and delivered."""

from __future__ import annotations

import time
from pathlib import Path

from support.frontend import config, write_wav
from support.scripted import CALL, Scripted

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.daemon.frontend.offline import run_offline
from venus.daemon.harness.core import Capture
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines

SESSION = "e2e"
WEATHER = Contract(
    name="weather",
    idempotent=True,
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def weather(ctx: Context) -> str:
    return f"sunny in {ctx.arguments.get('city', 'town')}"


def test_results_are_offered_answered_and_delivered(
    scripted_export: Scripted, tmp_path: Path
) -> None:
    transport = InProcessTransport([Capability(WEATHER, weather)])
    harness = Harness.open(tmp_path / "journal.sqlite3", [transport])
    harness.start()
    try:
        first = harness.submit(Capture("weather", {"city": "Lyon"}, SESSION))
        assert harness.wait(first, 10) is not None
        engines = Engines.open(scripted_export.engines, EngineOptions())
        wav = write_wav(tmp_path / "silence.wav", 10, seed=1)
        run_offline(
            config(scripted_export.engines),
            engines,
            _silent(wav),
            tmp_path / "out",
            harness=harness,
            session_id=SESSION,
        )
        time.sleep(0.5)  # the harness thread writes what the last chunks reported
    finally:
        harness.stop()

    from venus.daemon.harness.evidence import EvidenceStore
    from venus.daemon.harness.journal import Journal

    with Journal.open(tmp_path / "journal.sqlite3", read_only=True) as journal:
        path = [t.new for t in journal.transitions(first)]
        assert path == [
            State.QUEUED,
            State.RUNNING,
            State.COMPLETED,
            State.DELIVERING,
            State.DELIVERED,
        ]
        later = [i for i in journal.items() if i.id != first]
        assert later, "the reply's delegation made no item"
        made = min(later, key=lambda i: i.created_at)
        assert (made.capability, dict(made.arguments), made.chunk_index) == (
            "weather",
            {"city": "Paris"},
            0,
        )
        snapshot = EvidenceStore(journal.evidence_dir).load(made.evidence or "")
        assert snapshot.text == CALL and snapshot.audio is None
        delivered = [i for i in later if i.state is State.DELIVERED]
        assert delivered, [i.state for i in later]
        assert journal.check() == []


def _silent(wav: Path) -> Path:
    """The same length of digital silence: every chunk is idle (no user speech)."""
    import wave

    with wave.open(str(wav)) as w:
        frames, rate = w.getnframes(), w.getframerate()
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * frames)
    return wav
