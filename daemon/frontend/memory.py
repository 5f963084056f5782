"""Long-session memory in the frontend: store each chunk's embeddings, recall the relevant.

The backbone's context holds the attention sinks and a recent window (``step``'s
``_make_room``); what falls out of it is not lost but kept, as the encoders' embeddings,
in a bounded ``MemoryStore`` (``venus.daemon.memory``). At each chunk, before the
prefill, ``SessionMemory.step``:

1. searches the store with this chunk's audio and vision embeddings (cosine similarity
   of mean-pooled keys), among entries that are no longer in the context and were not
   put back recently, and returns the ``recall`` best above ``min_similarity`` that are
   also *new to the context*: an entry must be more like this chunk, by
   ``NOVELTY_MARGIN``, than any earlier chunk still in the context is. So a scene seen
   an hour ago and back now is recalled, while the hum of a quiet room (like every
   chunk before it) is not recalled over and over;
2. adds this chunk's embeddings to the store (near-duplicates merge, old entries are
   pooled and merged to stay within the budget).

The step lays each recalled entry into the chunk as ``<|memory|> <|image_start|> ...
<|image_end|> <|/memory|>`` (``<|audio_start|> ... <|audio_end|>`` for audio): memory
tokens, marked as such, which no training taught the model (training-free, as in the
paper). Chunks are numbered per session (``offset`` continues the numbering of a
session resumed after a restart), so "no longer in the context" is a chunk comparison.

Persistence (``persist``): the store's changes go to a ``MemoryFile`` (SQLite beside the
journal) every ``FLUSH_EVERY`` chunks and when the frontend closes, so a restart within
``resume_within_s`` of the last chunk continues the session with its memory. A session
that ended (the stream was reset, an offline run finished, or the restart came too late)
is wiped from the file unless ``keep_after_session``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.daemon.config.schema import MemoryConfig
from venus.daemon.memory.persist import MemoryFile, memory_path
from venus.daemon.memory.store import Entry, MemorySettings, MemoryStore, chunk_key
from venus.errors import MemoryStoreError

log = logging.getLogger(__name__)

NOVELTY_MARGIN = 0.05  # a recalled entry beats the context's best match by this much
FLUSH_EVERY = 10  # chunks between writes of the store's changes to the memory file


@dataclass(frozen=True)
class Recalled:
    entry: Entry
    score: float


@dataclass
class SessionMemory:
    """One session's memory store, with its file when ``persist`` is on."""

    config: MemoryConfig
    store: MemoryStore
    file: MemoryFile | None = None
    session_id: str = ""
    offset: int = 0  # session chunk number of this run's chunk 0 (a resumed session)
    recalled: dict[int, int] = field(default_factory=dict)  # entry id -> chunk put back
    # kind -> (session chunk, key) of the chunks in the context, oldest first
    recent: dict[str, deque[tuple[int, NDArray[np.float32]]]] = field(default_factory=dict)
    width: int | None = None  # the engines' embedding width: stored entries must match it
    _last_chunk: int = -1
    _unsaved: int = 0
    _saving: bool = True  # False after a failed save: the file is still wiped at the end

    @classmethod
    def open(
        cls, config: MemoryConfig, journal: Path, width: int | None = None
    ) -> SessionMemory | None:
        """The memory ``[memory]`` asks for (None when it is off). A memory file that
        cannot be read is an error logged once; the session then runs without persistence
        and the file is left as it is (nothing is lost)."""
        if not config.enabled:
            return None
        store = MemoryStore(settings_of(config))
        memory = cls(config, store, width=width)
        if config.persist:
            try:
                memory.file = MemoryFile(memory_path(config.path, journal))
            except MemoryStoreError as e:
                log.error("memory: %s; running without persistence", e)
        return memory

    def begin(self, session_id: str, resume: bool = False) -> str:
        """Start ``session_id``; with ``resume`` (a live daemon starting), continue the
        file's latest session instead when it has not ended and ran within
        ``resume_within_s``. -> the session id in use."""
        self.store.clear()
        self.store.take_changes()
        self.recalled.clear()
        self.recent.clear()
        self.session_id, self.offset, self._last_chunk, self._unsaved = session_id, 0, -1, 0
        if self.file is None or not resume:
            return session_id
        try:
            latest = self.file.latest()
            if latest is None:
                return session_id
            idle = time.time() - latest.updated_at
            if idle > self.config.resume_within_s:
                log.info(
                    "memory: session %s ended %.0f s ago (resume_within_s %.0f)",
                    latest.id,
                    idle,
                    self.config.resume_within_s,
                )
                self._ended(latest.id)
                return session_id
            entries = self.file.load(latest.id)
        except MemoryStoreError as e:
            log.error("memory: %s; this session starts with an empty memory", e)
            return session_id
        try:
            widths = {e.tokens.shape[1] for e in entries}
            if self.width is not None and widths - {self.width}:
                raise ValueError(f"its entries are {sorted(widths)} wide, the engines {self.width}")
            self.store.restore(entries)
        except ValueError as e:  # e.g. engines of another width since
            log.error("memory: session %s cannot continue (%s); a new one starts", latest.id, e)
            self.store.clear()
            self.store.take_changes()
            self._ended(latest.id)
            return session_id
        # restore marks only what it changed to fit these settings: the next flush saves it
        self.session_id, self.offset = latest.id, latest.last_chunk + 1
        log.info(
            "memory: continuing session %s (%d entries, %d bytes) from chunk %d",
            latest.id,
            len(self.store),
            self.store.nbytes,
            self.offset,
        )
        return latest.id

    def step(
        self,
        chunk: int,
        start_s: float,
        end_s: float,
        inputs: dict[str, NDArray[Any]],
        in_context_from: int,
    ) -> list[Recalled]:
        """Recall for this chunk (run's chunk index ``chunk``), then store its embeddings.
        ``inputs``: kind ("audio", "vision") -> tokens [1, n, d] or [n, d];
        ``in_context_from``: the run's oldest chunk still in the backbone's context."""
        n = self.offset + chunk
        before = self.offset + in_context_from
        for entry_id in [i for i, c in self.recalled.items() if c < before]:
            del self.recalled[entry_id]  # its memory tokens were evicted: may come back
        found: list[Recalled] = []
        keys = {kind: chunk_key(_rows(tokens)) for kind, tokens in inputs.items()}
        for kind, key in keys.items():
            recent = self.recent.setdefault(kind, deque())
            while recent and recent[0][0] < before:
                recent.popleft()
            if not self.config.recall or not _usable(key, self.width):
                continue
            floor = self.config.min_similarity
            if recent:  # what the context already holds that is most like this chunk
                held = np.stack([k for _, k in recent]) @ key
                floor = max(floor, float(held.max()) + NOVELTY_MARGIN)
            if floor > 1.0:  # the context holds this very input already
                continue
            hits = self.store.search(
                kind,
                key,
                self.config.recall,
                before_chunk=before,
                exclude=tuple(self.recalled),
                min_similarity=floor,
            )
            found += [Recalled(e, s) for e, s in hits]
        found.sort(key=lambda r: -r.score)
        found = found[: self.config.recall]
        for r in found:
            self.recalled[r.entry.id] = n
        at = start_s + self.offset * (end_s - start_s)  # a resumed run's clock restarts at 0
        for kind, tokens in inputs.items():
            try:
                self.store.add(kind, n, at, at + (end_s - start_s), _rows(tokens))
            except ValueError as e:  # NaN from an engine, a width the store does not hold
                log.warning("memory: chunk %d's %s embeddings not kept: %s", n, kind, e)
                continue
            for gone, kept in self.store.absorbed.items():  # a recalled entry merged away:
                if gone in self.recalled:  # the entry it went into is in the context too
                    at_chunk = self.recalled.pop(gone)
                    self.recalled[kept] = max(self.recalled.get(kept, at_chunk), at_chunk)
            if _usable(keys[kind], self.width):
                self.recent[kind].append((n, keys[kind]))
        self._last_chunk = n
        self._unsaved += 1
        if self._unsaved >= FLUSH_EVERY:
            self.flush()
        return found

    def flush(self) -> None:
        """Write the store's changes since the last flush (persist only; without a file
        they are dropped, or the change log would hold every entry ever made)."""
        upserts, removed = self.store.take_changes()
        self._unsaved = 0
        if self.file is None or not self._saving or self._last_chunk < 0:
            return
        try:
            self.file.save(self.session_id, upserts, removed, self._last_chunk, time.time())
        except MemoryStoreError as e:  # the file is kept: the session is still wiped at its end
            log.error("memory: %s; memory is no longer saved this run", e)
            self._saving = False

    def end(self) -> None:
        """The session ended: forget it, and wipe it from the file, or with
        ``keep_after_session`` save it and mark it ended (kept, never continued)."""
        if self.config.keep_after_session:
            self.flush()
        self._ended(self.session_id)
        self.store.clear()
        self.store.take_changes()  # nothing of the old session goes to the next one's saves
        self.recalled.clear()
        self.recent.clear()

    def close(self, end_session: bool) -> None:
        """The frontend closes: save (the session may continue after a restart) or end it."""
        if end_session:
            self.end()
        else:
            self.flush()
        if self.file is not None:
            self.file.close()
            self.file = None

    def _ended(self, session_id: str) -> None:
        if self.file is None or not session_id:
            return
        try:
            if self.config.keep_after_session:
                self.file.end(session_id)
                log.info("memory: session %s ended; kept (keep_after_session)", session_id)
                return
            removed = self.file.wipe(session_id)
        except MemoryStoreError as e:
            log.error("memory: session %s ended, but: %s", session_id, e)
            return
        log.info("memory: session %s ended; %d entries wiped", session_id, removed)


def settings_of(config: MemoryConfig) -> MemorySettings:
    return MemorySettings(
        budget_bytes=round(config.budget_mb * 2**20),
        tier_tokens=tuple(config.tier_tokens),
        tier_shares=tuple(config.tier_shares),
        merge_similarity=config.merge_similarity,
    )


def _usable(key: NDArray[np.float32], width: int | None) -> bool:
    """A key the store can be searched with: of the engines' width, and finite and not
    zero (``chunk_key`` of tokens with a NaN, or of silence from a dead encoder, is zero)."""
    if width is not None and key.shape[0] != width:
        return False
    return bool(np.isfinite(key).all() and key.any())


def _rows(tokens: NDArray[Any]) -> NDArray[Any]:
    """[1, n, d] or [n, d] -> [n, d]"""
    return tokens[0] if tokens.ndim == 3 else tokens


def frame_tokens(entry: Entry) -> tuple[str, str]:
    """The start and end tokens that frame an entry of this kind inside ``<|memory|>``."""
    if entry.kind == "vision":
        return "<|image_start|>", "<|image_end|>"
    return "<|audio_start|>", "<|audio_end|>"
