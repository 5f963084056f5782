"""One chunk of the frontend: perceive, decide, say, delegate (token-to-wave runs after).

Reads top to bottom in the order of ``docs/timeline.md``'s token layout: log-mel ->
audio encoder -> (vision encoder) -> results from the harness -> backbone prefill ->
control decision (the model's, unless the ``DecisionPolicy`` replaces it) -> text tokens
(with delegation spans) -> speech decoder. What comes out is a ``ChunkResult``: the
speech tokens for token-to-wave, the playback action, and what the timeline records.
Every stage is timed; ``Deadlines`` may skip the vision encoder or shorten the speech
budget when the chunk runs late.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from venus.daemon.frontend.call_grammar import WRAP_UP, CallGrammar, SpanMatcher, failed_item
from venus.daemon.frontend.channel import Delegation, HarnessChannel, InjectedResult
from venus.daemon.frontend.deadline import Deadlines
from venus.daemon.frontend.delegation import ParsedCall, parse_call
from venus.daemon.frontend.memory import Recalled, frame_tokens
from venus.daemon.frontend.policy import DecisionPoint, DecisionPolicy, ModelPolicy
from venus.daemon.frontend.stream import Stream
from venus.daemon.frontend.timeline import Baseline, Decision
from venus.daemon.frontend.tokens import Vocab
from venus.engines.mel import LogMel
from venus.engines.runners import Engines
from venus.engines.sampler import Sampler
from venus.engines.speech import final_chunk_tokens
from venus.errors import EngineError, VenusError
from venus.hw.frames import Frame
from venus.hw.vad import VadStats

log = logging.getLogger(__name__)

DELEGATION_BUDGET = 256  # tokens one <|delegate|> span may take before it counts as cut off
RESULT_TOKENS = 512  # a longer injected result is cut to this many tokens


@dataclass(frozen=True)
class IdleGate:
    """When ``when_idle`` results may come in (``[harness]`` idle_*; docs/harness.md).

    A chunk counts as the user speaking (not idle) when the VAD hears speech in
    ``speech_ratio`` of it and its loud frames rise ``rise_db`` above the noise floor
    (hw/vad.py: webrtcvad alone takes babble and much steady noise for speech, in every
    chunk); and as idle anyway after ``wait_s`` of such speech while the assistant
    listens: speech that goes on that long is more often the room (a TV) than the user,
    and a result must not wait for a quiet that never comes; the model decides itself
    when to speak it."""

    speech_ratio: float = 0.2
    rise_db: float = 9.0
    wait_s: float = 8.0

    def busy(self, speech_ratio: float, rise_db: float) -> bool:
        """Whether a chunk with this VAD share and level is the user speaking."""
        return speech_ratio >= self.speech_ratio and rise_db >= self.rise_db


@dataclass(frozen=True)
class StepSettings:
    max_text_tokens: int = 16  # text tokens per chunk while speaking
    speech_tokens: int = 0  # speech tokens per chunk; 0: the model's rate x chunk
    max_context_tokens: int = 8192
    sink_tokens: int = 64
    call_grammar: bool = True  # delegation spans decoded under the capabilities' grammar
    idle: IdleGate = IdleGate()


@dataclass(frozen=True)
class Samplers:
    """Bias and choice per decision; the step adds the constraint (control / text / span)."""

    control: Sampler
    text: Sampler
    speech: Sampler


@dataclass(frozen=True)
class ChunkInput:
    index: int
    start_s: float
    samples: NDArray[np.float32]  # 16 kHz mono, one chunk
    frame: Frame | None  # the latest camera frame at the boundary, if any
    speech_ratio: float = 0.0  # VAD: fraction of the chunk the user spoke
    vad: VadStats | None = None  # the VAD's view of the chunk (None: no VAD runs)
    boundary_s: float | None = None  # time.monotonic() when the chunk's audio was complete


@dataclass
class ChunkResult:
    index: int
    start_s: float
    decision: str
    speech_ratio: float
    reply_id: int | None = None  # the reply this chunk's speech belongs to
    cut_reply: int | None = None  # a reply the model abandoned: stop its playback now
    speech: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    reply_ended: bool = False  # flush token-to-wave: the reply is complete
    tags: tuple[str, ...] = ()
    text: str = ""
    text_tokens: int = 0
    calls: list[ParsedCall] = field(default_factory=list)
    results: list[tuple[str, int]] = field(default_factory=list)  # (item id, tokens)
    vision: bool = False
    evicted: int = 0
    context: int = 0
    recalled: list[Recalled] = field(default_factory=list)  # memory entries put back
    memory: tuple[int, int] | None = None  # (entries, bytes) after it; None: memory off
    degraded: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    late: bool = False  # done after boundary + period
    playback_stopped: bool = False  # the loop cut queued output in this chunk
    overridden_by: Baseline | None = None  # the policy that replaced the model's decision
    rise_db: float | None = None  # the input above its noise floor (the VAD's; hw/vad.py)
    idle: bool = False  # when_idle results could come in at its boundary


class ChunkStep:
    def __init__(
        self,
        engines: Engines,
        harness: HarnessChannel,
        samplers: Samplers,
        deadlines: Deadlines,
        settings: StepSettings,
        policy: DecisionPolicy | None = None,
    ) -> None:
        self.engines, self.harness, self.deadlines = engines, harness, deadlines
        self.settings = settings
        self.policy: DecisionPolicy = policy or ModelPolicy()
        self.vocab = Vocab.of(engines.manifest.special_tokens)
        self.schedule = engines.manifest.schedule
        self.mel = LogMel.from_schedule(self.schedule)
        self.samplers = samplers
        self.speech_tokens = settings.speech_tokens or self.schedule.speech_tokens
        self.calls = CallGrammar.open(engines.tokenizer) if settings.call_grammar else None

    def new_stream(self) -> Stream:
        e = self.engines
        return Stream(
            mel=self.mel.new_state(),
            audio=e.audio.new_state(),
            backbone=e.backbone.new_state(max_tokens=self.settings.max_context_tokens),
            speech=e.speech.new_state(),
        )

    def _idle(self, stream: Stream, chunk: ChunkInput) -> bool:
        """Whether ``when_idle`` results may come in at this boundary: the assistant is
        not speaking, and the user is not (``IdleGate``) or has been for its ``wait_s``
        while the assistant listened."""
        if stream.reply_id is not None:
            stream.heard_since_s = None
            return False
        gate = self.settings.idle
        rise_db = chunk.vad.rise_db if chunk.vad is not None else math.inf  # no level known
        if not gate.busy(chunk.speech_ratio, rise_db):
            stream.heard_since_s = None
            return True
        if stream.heard_since_s is None:
            stream.heard_since_s = chunk.start_s
        return chunk.start_s - stream.heard_since_s >= gate.wait_s

    def __call__(self, stream: Stream, chunk: ChunkInput) -> ChunkResult:
        t0 = chunk.boundary_s if chunk.boundary_s is not None else time.monotonic()
        out = ChunkResult(chunk.index, chunk.start_s, "listen", chunk.speech_ratio)
        clock = _Clock(out.latency_ms, self.deadlines, t0)
        e, v = self.engines, self.vocab

        audio, vision = self._perceive(stream, chunk, out, clock)
        if stream.memory is not None:
            with clock("memory"):
                self._remember(stream, chunk, audio, vision, out)
        idle = out.idle = self._idle(stream, chunk)
        out.rise_db = None if chunk.vad is None else round(chunk.vad.rise_db, 1)
        results = self.harness.results(stream.session_id, chunk.index, idle)
        stream.unanswered += [r.item_id for r in results]
        with clock("prefill"):
            lead = len(stream.pending)  # the previous chunk's closing tokens come first
            parts = self._layout(stream, audio, vision, results, out)
            out.evicted = self._make_room(stream, sum(p.shape[1] for p in parts))
            stream.in_context.add(chunk.index, stream.backbone.length + lead)
            logits = e.backbone.prefill(np.concatenate(parts, axis=1), stream.backbone).logits
        with clock("decide"):
            control = self.samplers.control
            token = control.choose(v.control(control.scores(logits[0, -1])))
            token = self._policy(stream, chunk, v.decision_of(token), out)

        if out.decision == "speak":
            if stream.reply_id is None:
                reply = stream.start_reply()
                self.harness.replying(stream.session_id, reply, stream.reply_tags)
            self._speak(stream, chunk.index, out, clock)
        else:
            stream.pending = [token, v["<|chunk_end|>"]]
            if stream.reply_id is not None:
                out.reply_id, out.tags = stream.reply_id, stream.reply_tags
                if out.decision == "listen":  # the model yields mid-reply: cut it
                    out.cut_reply = stream.reply_id
                out.reply_ended = True
                stream.end_reply(e.tokenizer.decode(stream.reply_text))
        out.context = stream.backbone.length
        out.late = clock.elapsed() > self.schedule.chunk_s
        stream.chunks += 1
        return out

    def _policy(self, stream: Stream, chunk: ChunkInput, model: Decision, out: ChunkResult) -> int:
        """The decision policy's word on the model's decision, before the token enters the
        context (so the context holds what was done). -> the control token taken."""
        speaking = stream.reply_id is not None
        point = DecisionPoint(model, speaking, chunk.vad, self.schedule.chunk_s)
        out.decision = self.policy.decide(point, stream.turn)
        if out.decision != model:
            name = self.policy.name
            if name == "model":
                raise EngineError(f"{type(self.policy).__name__}, named model, overrode the model")
            out.overridden_by = name
            log.debug("chunk %d: %s, not %s (%s policy)", chunk.index, out.decision, model, name)
        return self.vocab.decision(out.decision)

    def _perceive(
        self, stream: Stream, chunk: ChunkInput, out: ChunkResult, clock: _Clock
    ) -> tuple[NDArray[Any], NDArray[Any] | None]:
        """Log-mel and audio encoder; the vision encoder unless there is no frame or no
        time for it. -> (audio tokens, vision tokens or None)."""
        e = self.engines
        stream.remember(chunk.samples, chunk.frame.image if chunk.frame else None)
        with clock("mel"):
            mel = self.mel(chunk.samples, stream.mel)
        with clock("audio_encoder"):
            audio = e.audio.step(mel, stream.audio)
        if e.vision is None or chunk.frame is None:
            return audio, None
        if self.deadlines.skip_vision(clock.elapsed()):
            out.degraded.append("vision_skipped")
            return audio, None
        with clock("vision_encoder"):
            vision = e.vision.encode(self._pixels(chunk.frame))
        out.vision = True
        return audio, vision

    def _remember(
        self,
        stream: Stream,
        chunk: ChunkInput,
        audio: NDArray[Any],
        vision: NDArray[Any] | None,
        out: ChunkResult,
    ) -> None:
        """Recall memory entries for this chunk, then store its embeddings (``memory``)."""
        memory = stream.memory
        assert memory is not None
        inputs = {"audio": audio} if vision is None else {"vision": vision, "audio": audio}
        end_s = chunk.start_s + self.schedule.chunk_s
        # The context as it was after the previous chunk (this one may evict more).
        since = stream.in_context.oldest(chunk.index)
        try:
            out.recalled = memory.step(chunk.index, chunk.start_s, end_s, inputs, since)
        except (ValueError, VenusError) as e:  # the memory degrades; the chunk runs on
            log.warning("chunk %d: memory skipped: %s", chunk.index, e)
        out.memory = (len(memory.store), memory.store.nbytes)

    def _speak(self, stream: Stream, index: int, out: ChunkResult, clock: _Clock) -> None:
        """This chunk's text (and delegations), then its speech tokens."""
        e = self.engines
        out.reply_id, out.tags = stream.reply_id, stream.reply_tags
        with clock("text"):
            hidden = self._say(stream, index, out)
        if hidden:
            full = final_chunk_tokens(self.speech_tokens) if out.reply_ended else self.speech_tokens
            budget = self.deadlines.speech_budget(clock.elapsed(), full)
            if budget < full:
                out.degraded.append("speech_shortened")
            with clock("speech_decoder"):
                condition = np.concatenate(hidden, axis=1)
                said = e.speech.speak(condition, stream.speech, self.samplers.speech, budget)
            seconds = out.latency_ms["speech_decoder"] / 1e3
            self.deadlines.observe_speech(seconds, max(1, said.tokens.size))
            out.speech = said.tokens
        if out.reply_ended:
            stream.end_reply(e.tokenizer.decode(stream.reply_text))

    def _layout(
        self,
        stream: Stream,
        audio: NDArray[Any],
        vision: NDArray[Any] | None,
        results: list[InjectedResult],
        out: ChunkResult,
    ) -> list[NDArray[Any]]:
        """The chunk's input embeddings in layout order (see ``tokens``)."""
        v, embed = self.vocab, self.engines.backbone.embed
        ids = [*stream.pending, v["<|chunk_start|>"]]
        parts: list[NDArray[Any]] = []
        for m in out.recalled:  # <|memory|> <|image_start|> ... <|image_end|> <|/memory|>
            start, end = frame_tokens(m.entry)
            parts += [_ids(embed, [*ids, v["<|memory|>"], v[start]]), m.entry.tokens[None]]
            ids = [v[end], v["<|/memory|>"]]
        if vision is not None:
            parts += [_ids(embed, [*ids, v["<|image_start|>"]]), vision]
            ids = [v["<|image_end|>"]]
        parts += [_ids(embed, [*ids, v["<|audio_start|>"]]), audio]
        ids = [v["<|audio_end|>"]]
        for r in results:
            text = self.engines.tokenizer.encode(r.text)[:RESULT_TOKENS]
            ids += [v["<|result|>"], *text, v["<|/result|>"]]
            out.results.append((r.item_id, len(text)))
            if (shown := failed_item(r.text)) is not None:  # a retry may name it now
                stream.failed.append(shown)
        parts.append(_ids(embed, ids))
        stream.pending = []
        dtype = parts[0].dtype
        return [p.astype(dtype, copy=False) for p in parts]

    def _make_room(self, stream: Stream, incoming: int) -> int:
        """Evict old chunks (keeping the attention sinks) when the context would overflow."""
        s = self.settings
        reserve = incoming + s.max_text_tokens + DELEGATION_BUDGET + 4
        if stream.backbone.length + reserve <= s.max_context_tokens:
            return 0
        keep_last = max(0, s.max_context_tokens // 2 - s.sink_tokens)
        dropped = stream.backbone.evict(s.sink_tokens, keep_last)
        stream.in_context.evicted(s.sink_tokens, dropped)
        log.info("context full: evicted %d tokens (kept %d sinks)", dropped, s.sink_tokens)
        return dropped

    def _say(self, stream: Stream, index: int, out: ChunkResult) -> list[NDArray[Any]]:
        """Text after ``<|speak|>`` until the chunk closes; hidden states of spoken tokens."""
        e, v = self.engines, self.vocab
        res = e.backbone.step(np.array([[v["<|speak|>"]]]), stream.backbone)
        hidden: list[NDArray[Any]] = []
        spoken: list[int] = []
        span: list[int] | None = None  # an open <|delegate|> span
        grammar: SpanMatcher | None = None  # where that span is in the call grammar
        steps = self.settings.max_text_tokens + 2 * DELEGATION_BUDGET  # a hard stop
        while steps and (span is not None or len(spoken) < self.settings.max_text_tokens):
            steps -= 1
            token = self._next(res.logits[0, -1], span, grammar, steps)
            if span is not None and token != v["<|/delegate|>"]:
                span.append(token)
                if grammar is not None:
                    grammar.consume(token)
                if len(span) >= DELEGATION_BUDGET:
                    break  # closed below as cut off
            elif span is not None:
                self._delegation(stream, index, span, False, out)
                span = None
            elif token == v["<|chunk_end|>"]:
                break
            elif token == v["<|turn_eos|>"]:
                out.reply_ended = True
                stream.pending = [token]
                break
            elif token == v["<|delegate|>"]:
                span = []
                grammar = self._grammar(stream, index)
            res = e.backbone.step(np.array([[token]]), stream.backbone)
            if span is None and token < v.text_vocab:
                spoken.append(token)
                hidden.append(res.hidden)
        if span is not None:  # the budget ran out inside a span
            self._delegation(stream, index, span, True, out)
            stream.pending = [v["<|/delegate|>"]]
        stream.pending = [*stream.pending, v["<|chunk_end|>"]]
        stream.reply_text += spoken
        out.text = e.tokenizer.decode(spoken)
        out.text_tokens = len(spoken)
        return hidden

    def _grammar(self, stream: Stream, index: int) -> SpanMatcher | None:
        """The grammar a span opened in chunk ``index`` is decoded under (None: freely,
        with a warning if it could not be made: the span is still parsed as it comes)."""
        if self.calls is None:
            return None
        try:
            return self.calls.start(self.harness.contracts(), tuple(stream.failed))
        except EngineError as e:
            log.warning("chunk %d: the delegation span decodes freely: %s", index, e)
            return None

    def _next(
        self, logits: NDArray[Any], span: list[int] | None, grammar: SpanMatcher | None, steps: int
    ) -> int:
        """The next token after ``<|speak|>``: text or what structures it, or inside a span
        the call (under the grammar, if one runs); ``steps`` more may follow this one."""
        v, sampler = self.vocab, self.samplers.text
        scores = sampler.scores(logits)
        if span is None:
            scores = v.speaking(scores)
            if self.calls is not None and steps < WRAP_UP:  # no room to finish a call
                scores[v["<|delegate|>"]] = -np.inf
        else:
            scores = v.delegating(scores)
            if grammar is not None:
                left = min(DELEGATION_BUDGET - len(span), steps + 1)  # choices left
                scores = grammar.restrict(scores, v["<|/delegate|>"], left)
        return sampler.choose(scores)

    def _delegation(
        self, stream: Stream, index: int, span: list[int], truncated: bool, out: ChunkResult
    ) -> None:
        call = parse_call(self.engines.tokenizer.decode(span), truncated)
        out.calls.append(call)
        if not call.valid:
            log.warning("chunk %d: malformed delegation dropped: %s", index, call.error)
            return
        shown = call.target if call.action == "retry" else None
        if shown is not None and shown in stream.failed:
            stream.failed.remove(shown)  # one retry per failure shown
        assert call.name is not None and call.arguments is not None
        self.harness.delegate(
            Delegation(
                session_id=stream.session_id,
                chunk_index=index,
                name=call.name,
                arguments=call.arguments,
                raw=call.raw,
                dialogue=tuple(stream.dialogue),
                action=call.action,
                target=call.target,
                audio=stream.recent_audio,
                frame=stream.frame,
            )
        )

    def _pixels(self, frame: Frame) -> NDArray[np.float32]:
        size = self.schedule.image_size
        image: NDArray[Any] = frame.image
        if image.shape[0] != size:
            image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
        pixels: NDArray[np.float32] = (image.astype(np.float32) / 255.0).transpose(2, 0, 1)
        return pixels[None]


def _ids(embed: Callable[[NDArray[Any]], NDArray[Any]], ids: list[int]) -> NDArray[Any]:
    return embed(np.array([ids], dtype=np.int64))


class _Clock:
    """``with clock("stage"):`` times a stage into the record and the deadline policy."""

    def __init__(self, into: dict[str, float], deadlines: Deadlines, t0: float) -> None:
        self.into, self.deadlines, self.t0 = into, deadlines, t0
        self.stage = ""
        self.t = 0.0

    def elapsed(self) -> float:
        """Seconds since the chunk's boundary."""
        return time.monotonic() - self.t0

    def __call__(self, stage: str) -> _Clock:
        self.stage = stage
        return self

    def __enter__(self) -> None:
        self.t = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self.t
        self.into[self.stage] = self.into.get(self.stage, 0.0) + seconds * 1e3
        self.deadlines.observe(self.stage, seconds)
