"""Token-to-wave on its own thread: speech tokens -> flow -> vocoder -> playback queue.

The chunk step hands each chunk's result here and goes on with the next chunk, so
token-to-wave of chunk t overlaps the encoding of chunk t+1. Jobs run in chunk order on
one thread (the flow and vocoder states belong to it); each job ends by passing the
finished result, with its ``token2wave`` time, to ``on_done`` (the timeline), so records
come out in order.

The flow decoder takes its tokens in groups of the model's chunk size (``speech_tokens``
per chunk, with the lookahead held back); speech tokens are buffered until a group is
full, and the rest is flushed when the reply ends. A reply the model abandoned is cut at
once by the loop (``PlaybackController.stop``), and its queued jobs are skipped here.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from venus.daemon.config.schema import DEFAULT_FLOW_TEMPERATURE
from venus.daemon.frontend.playback import PlaybackController
from venus.daemon.frontend.step import ChunkResult
from venus.engines.runners import Engines
from venus.errors import EngineError, VenusError

log = logging.getLogger(__name__)


@dataclass
class _Reply:
    id: int
    tokens: NDArray[np.int64]  # received, not yet through the flow decoder


class SpeechOut:
    def __init__(
        self,
        engines: Engines,
        playback: PlaybackController,
        on_done: Callable[[ChunkResult], None],
        seed: int = 0,
        flow_temperature: float = DEFAULT_FLOW_TEMPERATURE,
    ) -> None:
        self.engines, self.playback, self.on_done = engines, playback, on_done
        self.flow_temperature = flow_temperature  # the flow decoder's noise scale
        self.group = engines.manifest.schedule.speech_tokens
        self.flow = engines.flow.new_state(seed=seed)
        self.vocoder = engines.vocoder.new_state()
        self.seed = seed
        self._reply: _Reply | None = None
        self._cut_below = 0  # replies with a smaller id were cut: skip their speech
        self._unsaid: collections.Counter[int] = collections.Counter()  # reply -> jobs with speech
        self._lock = threading.Lock()
        self._jobs: queue.Queue[ChunkResult | None] = queue.Queue()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="venus-token2wave", daemon=True)
        self._thread.start()

    def submit(self, result: ChunkResult) -> None:
        if self._failed is not None:
            raise EngineError(f"token-to-wave failed: {self._failed}") from self._failed
        if result.reply_id is not None and result.speech.size:
            with self._lock:
                self._unsaid[result.reply_id] += 1
        self._jobs.put(result)

    def cut(self, reply_id: int) -> bool:
        """Skip every queued job of ``reply_id`` and earlier (the loop stops playback).
        -> whether speech of ``reply_id`` was still waiting here (and is never said)."""
        with self._lock:
            self._cut_below = max(self._cut_below, reply_id + 1)
            return self._unsaid[reply_id] > 0

    def drain(self, timeout_s: float = 60.0) -> None:
        """Wait until every submitted job is done (the offline clock's barrier)."""
        deadline = time.monotonic() + timeout_s
        with self._jobs.all_tasks_done:
            while self._jobs.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EngineError(f"token-to-wave did not finish within {timeout_s:.0f} s")
                self._jobs.all_tasks_done.wait(left)
        if self._failed is not None:
            raise EngineError(f"token-to-wave failed: {self._failed}") from self._failed

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                t = time.perf_counter()
                try:
                    self._speak(job)
                except VenusError as e:  # degrade: this reply goes unspoken
                    log.error("token-to-wave failed at chunk %d: %s; reply dropped", job.index, e)
                    self._reply = None
                job.latency_ms["token2wave"] = (time.perf_counter() - t) * 1e3
                self.on_done(job)
            except Exception as e:  # the supervisor of this thread: report, stop the loop
                log.exception("token-to-wave thread failed at chunk %d", job.index)
                self._failed = e
            finally:
                if job.reply_id is not None and job.speech.size:
                    with self._lock:
                        self._unsaid[job.reply_id] -= 1
                self._jobs.task_done()
        self._jobs.task_done()

    def _speak(self, job: ChunkResult) -> None:
        with self._lock:
            cut_below = self._cut_below
        if job.reply_id is None or job.reply_id < cut_below:
            if self._reply is not None and self._reply.id < cut_below:
                self._reply = None  # abandoned: its state is reset when the next one starts
            return
        if self._reply is None or self._reply.id != job.reply_id:
            self.flow.reset(self.seed + job.reply_id)
            self.vocoder.reset()
            self._reply = _Reply(job.reply_id, np.zeros(0, np.int64))
        reply = self._reply
        reply.tokens = np.concatenate((reply.tokens, job.speech))
        pcm: list[NDArray[np.float32]] = []
        # Full groups go now; with the lookahead held back a group may wait for the next.
        while reply.tokens.size > self.group or (
            reply.tokens.size == self.group and not job.reply_ended
        ):
            pcm.append(self._wave(reply.tokens[: self.group], final=False))
            reply.tokens = reply.tokens[self.group :]
        if job.reply_ended:
            pcm.append(self._wave(reply.tokens, final=True))
            self._reply = None
        audio = np.concatenate(pcm) if pcm else np.zeros(0, np.float32)
        if audio.size or job.reply_ended:
            self.playback.queue(audio, job.reply_id, job.tags, last=job.reply_ended)

    def _wave(self, tokens: NDArray[np.int64], final: bool) -> NDArray[np.float32]:
        mel = self.engines.flow.step(
            tokens[None], self.flow, final=final, temperature=self.flow_temperature
        )
        if mel.shape[2] == 0:
            return np.zeros(0, np.float32)
        pcm = self.engines.vocoder.step(mel, self.vocoder)
        return np.asarray(pcm[0], dtype=np.float32)
