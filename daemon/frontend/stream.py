"""One session's streaming state, in one object, reset in one call.

Everything the chunk step carries from one chunk to the next lives here: the mel front
end's carry, the audio encoder's window, the backbone's KV cache, the reply being spoken
(its speech-decoder cache and id), an open delegation span, the tokens that lead the
next prefill, and the user's turn as a VAD decision policy tracks it. Token-to-wave state
(flow, vocoder) belongs to the speech-out thread.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from venus.daemon.frontend.memory import SessionMemory
from venus.daemon.frontend.policy import UserTurn
from venus.engines.backbone import BackboneState
from venus.engines.encoders import AudioState
from venus.engines.mel import MelState
from venus.engines.speech import SpeechState

DIALOGUE_TURNS = 8  # recent utterances kept as delegation evidence
EVIDENCE_AUDIO_SAMPLES = 10 * 16000  # the last 10 s of microphone audio, for evidence
FAILED_SHOWN = 8  # failed results a retry may name: the newest shown in the session


class ContextChunks:
    """Which chunks the backbone's context still holds: (chunk index, cache offset of its
    first token) per chunk, oldest first, kept in step with evictions."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, int]] = deque()

    def add(self, chunk: int, offset: int) -> None:
        """Chunk ``chunk``'s tokens start at cache position ``offset``."""
        self._chunks.append((chunk, offset))

    def evicted(self, first: int, dropped: int) -> None:
        """The cache dropped ``dropped`` tokens after its first ``first`` (the sinks):
        a chunk that began before the kept tail is gone (one the sinks cut counts as gone
        too); the offsets of the rest move down by ``dropped``."""
        if dropped <= 0:
            return
        while self._chunks and self._chunks[0][1] < first + dropped:
            self._chunks.popleft()
        self._chunks = deque((c, at - dropped) for c, at in self._chunks)

    def oldest(self, default: int) -> int:
        """The oldest chunk whose tokens are all in the context (``default`` if none)."""
        return self._chunks[0][0] if self._chunks else default

    def clear(self) -> None:
        self._chunks.clear()

    def __len__(self) -> int:
        return len(self._chunks)


@dataclass
class Stream:
    mel: MelState
    audio: AudioState
    backbone: BackboneState
    speech: SpeechState  # the current reply's speech-decoder cache
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    pending: list[int] = field(default_factory=list)  # token ids that lead the next prefill
    reply_id: int | None = None  # the reply being spoken; None while listening
    replies: int = 0  # replies started in this session
    reply_text: list[int] = field(default_factory=list)  # text ids of the current reply
    reply_tags: tuple[str, ...] = ()  # item ids of the results the reply answers
    unanswered: list[str] = field(default_factory=list)  # results injected since the last reply
    failed: deque[str] = field(default_factory=lambda: deque(maxlen=FAILED_SHOWN))  # ids shown
    dialogue: deque[str] = field(default_factory=lambda: deque(maxlen=DIALOGUE_TURNS))
    recent_audio: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))
    frame: NDArray[np.uint8] | None = None  # the latest camera frame (RGB), for evidence
    chunks: int = 0  # chunks stepped
    turn: UserTurn = field(default_factory=UserTurn)  # the user's turn (``VadPolicy``)
    heard_since_s: float | None = None  # the VAD has heard speech since, while listening
    memory: SessionMemory | None = None  # long-session memory (``[memory]``), if on
    in_context: ContextChunks = field(default_factory=ContextChunks)

    def remember(self, samples: NDArray[np.float32], frame: NDArray[np.uint8] | None) -> None:
        """Keep the recent audio and the latest frame (new arrays: a delegation may hold
        on to the old ones while the harness freezes them)."""
        both = np.concatenate((self.recent_audio, samples))
        self.recent_audio = both[-EVIDENCE_AUDIO_SAMPLES:]
        if frame is not None:
            self.frame = frame

    def start_reply(self) -> int:
        """A new reply; it answers every result injected since the previous one."""
        self.speech.reset()
        self.reply_id = self.replies
        self.replies += 1
        self.reply_text = []
        self.reply_tags = tuple(self.unanswered)
        self.unanswered = []
        return self.reply_id

    def end_reply(self, text: str) -> None:
        if text:
            self.dialogue.append(text)
        self.reply_id = None
        self.reply_text = []
        self.reply_tags = ()

    def reset(self) -> None:
        """A new session on the same engines: forget everything (the memory's session
        ends: wiped from its file unless ``keep_after_session``)."""
        self.mel.reset()
        self.audio.reset()
        self.backbone.reset()
        self.speech.reset()
        self.session_id = uuid.uuid4().hex
        self.pending = []
        self.reply_id = None
        self.replies = 0
        self.reply_text = []
        self.reply_tags = ()
        self.unanswered = []
        self.dialogue.clear()
        self.recent_audio = np.zeros(0, np.float32)
        self.frame = None
        self.chunks = 0
        self.turn = UserTurn()
        self.heard_since_s = None
        self.in_context.clear()
        if self.memory is not None:
            self.memory.end()
            self.session_id = self.memory.begin(self.session_id)
