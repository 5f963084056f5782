"""Evidence snapshots: what a work item was asked with, frozen when it was captured.

A snapshot keeps the request text, the recent dialogue and, when the capability needs
them, the last seconds of microphone audio (16-bit WAV) and one camera frame (JPEG).
Everything is content-addressed: each blob is stored once as ``root/<sha[:2]>/<sha>``,
named by the sha256 of its bytes, read-only (0400); the snapshot itself is a canonical
JSON blob whose sha256 names it. Reading checks the bytes against the name, so a file
altered or damaged on disk is an error, never silently sent to a capability.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import re
import tempfile
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.errors import HarnessError

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # Hz, mono: the microphone path's rate
FORMAT = 1  # "v" of the snapshot JSON
_SHA = re.compile(r"[0-9a-f]{64}")
_TMP = ".tmp-"  # prefix of files being written


@dataclass(frozen=True)
class EvidenceInput:
    """What the frontend hands over at the request boundary. The arrays are copied (and
    made read-only) here, so the caller may reuse its buffers at once."""

    text: str  # the request as the model wrote it
    dialogue: Sequence[str]  # recent turns, most recent last
    audio: NDArray[np.float32] | None = None  # 16 kHz mono in [-1, 1], most recent last
    frame: NDArray[np.uint8] | None = None  # RGB [h, w, 3]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dialogue", tuple(str(t) for t in self.dialogue))
        if self.audio is not None:
            audio = np.array(self.audio, dtype=np.float32, order="C", copy=True)
            if audio.ndim != 1:
                raise HarnessError(f"evidence audio is mono samples, not shape {audio.shape}")
            audio.flags.writeable = False
            object.__setattr__(self, "audio", audio)
        if self.frame is not None:
            frame = np.array(self.frame, order="C", copy=True)
            if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or not frame.size:
                raise HarnessError(
                    f"evidence frame is RGB uint8 [h, w, 3], not {frame.dtype} {frame.shape}"
                )
            frame.flags.writeable = False
            object.__setattr__(self, "frame", frame)


@dataclass(frozen=True)
class Snapshot:
    sha256: str  # of the snapshot's canonical JSON
    text: str
    dialogue: tuple[str, ...]
    audio: str | None  # sha256 of the WAV blob
    frame: str | None  # sha256 of the JPEG blob
    bytes: int  # of every file: the JSON and the blobs


class EvidenceStore:
    """Content-addressed, size-bounded, immutable evidence under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        max_text_chars: int = 2000,
        max_dialogue: int = 8,
        max_dialogue_chars: int = 4000,
        max_audio_s: float = 10.0,
        jpeg_quality: int = 85,
        max_frame_side: int = 448,
    ) -> None:
        if min(max_text_chars, max_dialogue, max_dialogue_chars) < 0 or max_audio_s <= 0:
            raise HarnessError("evidence bounds are >= 0 (max_audio_s > 0)")
        if not 1 <= jpeg_quality <= 100 or max_frame_side < 1:
            raise HarnessError("jpeg_quality is 1-100 and max_frame_side >= 1")
        self.root = Path(root)
        self.max_text_chars = max_text_chars
        self.max_dialogue = max_dialogue
        self.max_dialogue_chars = max_dialogue_chars
        self.max_audio_samples = round(max_audio_s * SAMPLE_RATE)
        self.jpeg_quality = jpeg_quality
        self.max_frame_side = max_frame_side

    def freeze(self, ev: EvidenceInput, *, audio: bool, frame: bool) -> Snapshot:
        """Store the bounded evidence (audio and frame only when asked for and present)."""
        sizes = 0
        audio_sha = frame_sha = None
        if audio and ev.audio is not None:
            wav = self._wav(ev.audio)
            audio_sha, sizes = self._put(wav), sizes + len(wav)
        if frame and ev.frame is not None:
            jpeg = self._jpeg(ev.frame)
            frame_sha, sizes = self._put(jpeg), sizes + len(jpeg)
        text = ev.text[: self.max_text_chars]
        dialogue = self._dialogue(ev.dialogue)
        doc = {"v": FORMAT, "text": text, "dialogue": list(dialogue)}
        data = _canonical({**doc, "audio": audio_sha, "frame": frame_sha})
        sha = self._put(data)
        return Snapshot(sha, text, dialogue, audio_sha, frame_sha, len(data) + sizes)

    def load(self, sha256: str) -> Snapshot:
        data = self.blob(sha256)
        doc = _parse(data)
        if doc is None:
            raise HarnessError(f"evidence {sha256} is not a snapshot: {self._path(sha256)}")
        sizes = 0
        for sha in (doc["audio"], doc["frame"]):
            if sha is not None:
                try:
                    sizes += self._path(sha).stat().st_size
                except FileNotFoundError:
                    raise HarnessError(
                        f"evidence {sha256}: its blob {sha} is missing from {self.root}"
                    ) from None
        return Snapshot(
            sha256,
            doc["text"],
            tuple(doc["dialogue"]),
            doc["audio"],
            doc["frame"],
            len(data) + sizes,
        )

    def blob(self, sha256: str) -> bytes:
        """A stored file's bytes, checked against its name."""
        path = self._path(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise HarnessError(f"evidence {sha256} is missing from {self.root}") from None
        except OSError as e:
            raise HarnessError(f"cannot read evidence {path}: {e}") from e
        if hashlib.sha256(data).hexdigest() != sha256:
            raise HarnessError(
                f"evidence {path} is corrupt or was altered (its bytes do not hash to its "
                "name); it is kept for inspection, and the item it belongs to cannot use it"
            )
        return data

    def payload(self, sha256: str, *, inline_limit: int = 1 << 20) -> dict[str, Any]:
        """The snapshot as a call request carries it; blobs up to ``inline_limit`` bytes
        inline as base64 (``data_b64``), larger ones by hash only."""
        snap = self.load(sha256)
        out: dict[str, Any] = {
            "sha256": snap.sha256,
            "text": snap.text,
            "dialogue": list(snap.dialogue),
            "audio": None,
            "frame": None,
        }
        if snap.audio is not None:
            out["audio"] = self._blob_payload(
                snap.audio, {"format": "wav", "sample_rate": SAMPLE_RATE}, inline_limit
            )
        if snap.frame is not None:
            out["frame"] = self._blob_payload(snap.frame, {"format": "jpeg"}, inline_limit)
        return out

    def delete(self, keep: set[str], *, older_than: float | None = None) -> int:
        """Remove every file not reachable from the snapshots in ``keep`` (and, with
        ``older_than``, last touched before that time.time()); return how many."""
        if not self.root.is_dir():
            return 0
        reachable = set()
        for sha in keep:
            if not _SHA.fullmatch(sha):
                continue
            reachable.add(sha)
            try:  # a damaged snapshot still protects the blobs it names
                doc = _parse(self._path(sha).read_bytes())
            except OSError:
                doc = None
            if doc is not None:
                reachable |= {doc["audio"], doc["frame"]} - {None}
        removed = 0
        for sub in sorted(self.root.iterdir()):
            if not (sub.is_dir() and re.fullmatch(r"[0-9a-f]{2}", sub.name)):
                continue
            for f in sub.iterdir():
                ours = f.name.startswith(_TMP) or (
                    _SHA.fullmatch(f.name) is not None and f.name[:2] == sub.name
                )
                if not ours or f.name in reachable:
                    continue
                try:
                    if older_than is not None and f.stat().st_mtime >= older_than:
                        continue
                    f.unlink()
                    removed += 1
                except FileNotFoundError:
                    continue
        return removed

    # -- internals -------------------------------------------------------------------------

    def _path(self, sha256: str) -> Path:
        if not _SHA.fullmatch(sha256):
            raise HarnessError(f"{sha256!r} is not an evidence sha256 (64 lowercase hex digits)")
        return self.root / sha256[:2] / sha256

    def _put(self, data: bytes) -> str:
        """Store ``data`` under its sha256 (once: same bytes, same file) and return it."""
        sha = hashlib.sha256(data).hexdigest()
        path = self._path(sha)
        if path.exists():
            try:
                if hashlib.sha256(path.read_bytes()).hexdigest() == sha:
                    os.utime(path)  # in use again: retention counts from now
                    return sha
                log.warning("evidence %s was damaged; writing it again", path)
            except OSError as e:
                log.warning("evidence %s unreadable (%s); writing it again", path, e)
        for d in (self.root, path.parent):
            d.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TMP, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o400)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return sha

    def _blob_payload(self, sha: str, meta: dict[str, Any], inline_limit: int) -> dict[str, Any]:
        data = self.blob(sha)
        out = {"sha256": sha, **meta, "bytes": len(data)}
        if len(data) <= inline_limit:
            out["data_b64"] = base64.b64encode(data).decode("ascii")
        return out

    def _dialogue(self, turns: Sequence[str]) -> tuple[str, ...]:
        """The last ``max_dialogue`` turns within ``max_dialogue_chars``, oldest dropped
        first; a single turn over the bound keeps its end."""
        if not self.max_dialogue or not self.max_dialogue_chars:
            return ()
        kept = list(turns)[-self.max_dialogue :]
        while len(kept) > 1 and sum(map(len, kept)) > self.max_dialogue_chars:
            kept.pop(0)
        if kept and len(kept[0]) > self.max_dialogue_chars:
            kept[0] = kept[0][len(kept[0]) - self.max_dialogue_chars :]
        return tuple(kept)

    def _wav(self, audio: NDArray[np.float32]) -> bytes:
        """The last ``max_audio_s`` as 16-bit mono WAV."""
        tail = np.nan_to_num(audio[-self.max_audio_samples :])
        pcm = np.round(np.clip(tail, -1.0, 1.0) * 32767).astype("<i2")
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(pcm.tobytes())
        return buf.getvalue()

    def _jpeg(self, frame: NDArray[np.uint8]) -> bytes:
        """The frame, its longer side at most ``max_frame_side``, as JPEG."""
        import cv2

        h, w = frame.shape[:2]
        if max(h, w) > self.max_frame_side:
            scale = self.max_frame_side / max(h, w)
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            frame = np.asarray(cv2.resize(frame, size, interpolation=cv2.INTER_AREA), np.uint8)
        bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        ok, encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
        if not ok:
            raise HarnessError(f"could not JPEG-encode an evidence frame of shape {frame.shape}")
        return bytes(encoded.tobytes())


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii")


def _parse(data: bytes) -> dict[str, Any] | None:
    """A snapshot document, or None when ``data`` is not one."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    ok = (
        isinstance(doc, dict)
        and doc.get("v") == FORMAT
        and isinstance(doc.get("text"), str)
        and isinstance(doc.get("dialogue"), list)
        and all(isinstance(t, str) for t in doc["dialogue"])
        and all(
            d is None or (isinstance(d, str) and _SHA.fullmatch(d))
            for d in (doc.get("audio", 0), doc.get("frame", 0))
        )
    )
    return doc if ok else None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
