"""Evidence snapshots: content-addressed, bounded, immutable, on a real filesystem."""

from __future__ import annotations

import base64
import io
import os
import stat
import wave
from pathlib import Path

import cv2
import numpy as np
import pytest

from venus.daemon.harness.evidence import SAMPLE_RATE, EvidenceInput, EvidenceStore, Snapshot
from venus.errors import HarnessError


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def sample(seconds: float = 12.0, side: tuple[int, int] = (720, 1280)) -> EvidenceInput:
    n = int(seconds * SAMPLE_RATE)
    audio = np.sin(np.arange(n, dtype=np.float32) * 0.05).astype(np.float32) * 0.5
    frame = np.zeros((*side, 3), np.uint8)
    frame[..., 0] = 220  # red, to check the colour order survives
    return EvidenceInput("what is this?", ["hi", "hello", "what is this?"], audio, frame)


def test_same_input_same_snapshot_stored_once(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    a = store.freeze(sample(), audio=True, frame=True)
    stored = files(tmp_path)
    b = store.freeze(sample(), audio=True, frame=True)
    assert a == b and files(tmp_path) == stored and len(stored) == 3
    assert a.bytes == sum(p.stat().st_size for p in stored)
    assert store.load(a.sha256) == a
    other = store.freeze(EvidenceInput("something else", ["hi"]), audio=True, frame=True)
    assert other.sha256 != a.sha256 and other.audio is None and other.frame is None


def test_files_are_read_only_in_a_private_directory(tmp_path: Path) -> None:
    root = tmp_path / "journal.evidence"
    snap = EvidenceStore(root).freeze(sample(), audio=True, frame=True)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for path in files(root):
        assert stat.S_IMODE(path.stat().st_mode) == 0o400
        assert path.parent.name == path.name[:2]
    assert {p.name for p in files(root)} == {snap.sha256, snap.audio, snap.frame}
    assert not [p for p in root.rglob(".tmp-*")]


def test_only_what_is_asked_for_is_kept(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    ev = sample()
    assert store.freeze(ev, audio=False, frame=False).audio is None
    only_frame = store.freeze(ev, audio=False, frame=True)
    assert only_frame.audio is None and only_frame.frame is not None
    only_audio = store.freeze(ev, audio=True, frame=False)
    assert only_audio.audio is not None and only_audio.frame is None
    none_there = store.freeze(EvidenceInput("x", []), audio=True, frame=True)
    assert (none_there.audio, none_there.frame) == (None, None)


def test_bounds_are_applied(tmp_path: Path) -> None:
    store = EvidenceStore(
        tmp_path, max_text_chars=5, max_dialogue=3, max_dialogue_chars=10, max_audio_s=2.0
    )
    turns = ["one", "two", "three", "four", "five"]
    snap = store.freeze(EvidenceInput("abcdefgh", turns), audio=False, frame=False)
    assert snap.text == "abcde"  # the start is kept
    assert snap.dialogue == ("four", "five")  # last 3 turns, then oldest dropped to 10 chars
    long_turn = store.freeze(EvidenceInput("", ["x" * 5 + "y" * 10]), audio=False, frame=False)
    assert long_turn.dialogue == ("y" * 10,)  # a lone turn over the bound keeps its end

    ramp = np.linspace(-1, 1, 5 * SAMPLE_RATE, dtype=np.float32)
    payload = store.payload(store.freeze(sample(), audio=True, frame=True).sha256)
    pcm = _wav_samples(payload)
    assert len(pcm) == 2 * SAMPLE_RATE
    tail = store.freeze(EvidenceInput("", [], audio=ramp), audio=True, frame=False)
    got = _wav_samples(store.payload(tail.sha256))
    np.testing.assert_allclose(got / 32767, ramp[-2 * SAMPLE_RATE :], atol=1e-4)  # the last 2 s

    assert _jpeg(payload).shape == (252, 448, 3)  # 1280x720 -> longer side 448
    small = store.freeze(sample(side=(100, 60)), audio=False, frame=True)
    assert _jpeg(store.payload(small.sha256)).shape == (100, 60, 3)  # never upscaled
    tall = store.freeze(sample(side=(1000, 10)), audio=False, frame=True)
    assert _jpeg(store.payload(tall.sha256)).shape == (448, 4, 3)


def test_a_later_change_to_the_callers_arrays_changes_nothing(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    audio = np.full(SAMPLE_RATE, 0.25, np.float32)
    frame = np.full((64, 64, 3), 10, np.uint8)
    turns = ["a", "b"]
    ev = EvidenceInput("text", turns, audio, frame)
    audio[:] = 0.9  # the caller reuses its buffers before the harness freezes
    frame[:] = 250
    turns.append("c")
    snap = store.freeze(ev, audio=True, frame=True)
    payload = store.payload(snap.sha256)
    assert snap.dialogue == ("a", "b")
    assert np.all(np.abs(_wav_samples(payload) / 32767 - 0.25) < 1e-3)
    assert abs(float(_jpeg(payload).mean()) - 10) < 3
    assert ev.audio is not None and not ev.audio.flags.writeable
    audio[:] = -0.5  # and after: the stored files are the files
    assert store.payload(snap.sha256) == payload


def test_bad_arrays_are_refused(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="mono"):
        EvidenceInput("", [], audio=np.zeros((2, 100), np.float32))
    with pytest.raises(HarnessError, match="RGB uint8"):
        EvidenceInput("", [], frame=np.zeros((10, 10), np.uint8))
    with pytest.raises(HarnessError, match="RGB uint8"):
        EvidenceInput("", [], frame=np.zeros((10, 10, 3), np.float32))  # type: ignore[arg-type]


def test_tampered_and_missing_files_are_detected(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    snap = store.freeze(sample(), audio=True, frame=True)
    assert snap.audio is not None
    wav = tmp_path / snap.audio[:2] / snap.audio
    os.chmod(wav, 0o600)
    data = bytearray(wav.read_bytes())
    data[-1] ^= 0xFF
    wav.write_bytes(bytes(data))
    store.load(snap.sha256)  # the snapshot itself is intact
    with pytest.raises(HarnessError, match="corrupt or was altered"):
        store.blob(snap.audio)
    with pytest.raises(HarnessError, match="corrupt or was altered"):
        store.payload(snap.sha256)
    store.freeze(sample(), audio=True, frame=True)  # freezing the same again repairs it
    assert store.blob(snap.audio)

    (tmp_path / snap.sha256[:2] / snap.sha256).unlink()
    with pytest.raises(HarnessError, match="missing"):
        store.load(snap.sha256)
    with pytest.raises(HarnessError, match="not an evidence sha256"):
        store.load("../../etc/passwd")


def test_payload_round_trips_and_inlines_up_to_a_limit(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    snap = store.freeze(sample(seconds=3.0), audio=True, frame=True)
    payload = store.payload(snap.sha256)
    assert set(payload) == {"sha256", "text", "dialogue", "audio", "frame"}
    assert payload["sha256"] == snap.sha256 and payload["text"] == "what is this?"
    assert payload["dialogue"] == ["hi", "hello", "what is this?"]
    audio, frame = payload["audio"], payload["frame"]
    assert audio["format"] == "wav" and audio["sample_rate"] == SAMPLE_RATE
    assert audio["sha256"] == snap.audio and frame["sha256"] == snap.frame
    assert audio["bytes"] == len(base64.b64decode(audio["data_b64"]))
    assert frame["format"] == "jpeg" and frame["bytes"] == len(base64.b64decode(frame["data_b64"]))
    assert len(_wav_samples(payload)) == 3 * SAMPLE_RATE
    rgb = _jpeg(payload)
    assert rgb.shape == (252, 448, 3) and rgb[..., 0].mean() > 200 > 20 > rgb[..., 2].mean()

    by_hash = store.payload(snap.sha256, inline_limit=1000)
    assert "data_b64" not in by_hash["audio"] and "data_b64" not in by_hash["frame"]
    assert by_hash["audio"]["bytes"] == audio["bytes"]
    assert (
        store.payload(store.freeze(EvidenceInput("t", []), audio=True, frame=True).sha256)["audio"]
        is None
    )


def test_delete_keeps_what_kept_snapshots_reach(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    frame = np.full((40, 40, 3), 128, np.uint8)
    keep = store.freeze(EvidenceInput("keep", [], frame=frame), audio=False, frame=True)
    drop = store.freeze(
        EvidenceInput("drop", [], audio=np.zeros(800, np.float32), frame=frame),
        audio=True,
        frame=True,
    )
    assert keep.frame == drop.frame  # one file, two snapshots
    (tmp_path / "notes.txt").write_text("not ours")  # left alone
    assert store.delete({keep.sha256}, older_than=0.0) == 0  # nothing that old
    assert store.delete({keep.sha256}) == 2  # the dropped snapshot and its audio
    assert store.load(keep.sha256) == keep and store.blob(keep.frame or "")
    with pytest.raises(HarnessError, match="missing"):
        store.load(drop.sha256)
    assert (tmp_path / "notes.txt").exists()
    assert store.delete(set()) == 2 and files(tmp_path) == [tmp_path / "notes.txt"]
    assert EvidenceStore(tmp_path / "never-used").delete(set()) == 0


def test_snapshot_is_frozen(tmp_path: Path) -> None:
    snap = EvidenceStore(tmp_path).freeze(EvidenceInput("t", ["d"]), audio=False, frame=False)
    assert isinstance(snap, Snapshot)
    with pytest.raises(AttributeError):
        snap.text = "changed"  # type: ignore[misc]


def _wav_samples(payload: dict[str, object]) -> np.ndarray:
    audio = payload["audio"]
    assert isinstance(audio, dict)
    with wave.open(io.BytesIO(base64.b64decode(audio["data_b64"]))) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, SAMPLE_RATE)
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)


def _jpeg(payload: dict[str, object]) -> np.ndarray:
    frame = payload["frame"]
    assert isinstance(frame, dict)
    data = np.frombuffer(base64.b64decode(frame["data_b64"]), np.uint8)
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
    assert bgr is not None
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
