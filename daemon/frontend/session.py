"""Putting a frontend together from the configuration: engines, step, speech out, loop.

``Frontend`` owns every part of one running frontend; ``open_frontend`` builds it for
either clock. The offline and real-time runs (``offline``, ``realtime``) only differ in
the sources, the playback device and the clock they pass in.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import HarnessChannel, NoHarness
from venus.daemon.frontend.clock import Clock
from venus.daemon.frontend.deadline import Deadlines
from venus.daemon.frontend.delegation import ParsedCall
from venus.daemon.frontend.loop import FrontendLoop
from venus.daemon.frontend.memory import SessionMemory
from venus.daemon.frontend.playback import AudioOut, PlaybackController, PlaybackEvent
from venus.daemon.frontend.policy import DecisionPolicy
from venus.daemon.frontend.sampling import sampling_of
from venus.daemon.frontend.speech_out import SpeechOut
from venus.daemon.frontend.step import (
    ChunkInput,
    ChunkResult,
    ChunkStep,
    IdleGate,
    Samplers,
    StepSettings,
)
from venus.daemon.frontend.stream import Stream
from venus.daemon.frontend.timeline import (
    ChunkRecord,
    DelegationRecord,
    MemoryRecord,
    RecallRecord,
    ResultRecord,
)
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import Greedy, LogitBias, Sampler, TopP
from venus.errors import ConfigError
from venus.hw.frames import VISION_SIZE, Frame
from venus.hw.vad import Vad

log = logging.getLogger(__name__)

RecordSink = Callable[[ChunkRecord], None]


@dataclass
class Frontend:
    engines: Engines
    step: ChunkStep
    stream: Stream
    playback: PlaybackController
    speech_out: SpeechOut
    loop: FrontendLoop
    records: list[ChunkRecord] = field(default_factory=list)  # offline runs only

    def close(self, end_session: bool = False) -> None:
        """Stop token-to-wave; save the memory (a live session may continue after a
        restart) or, with ``end_session``, end the session's memory."""
        self.speech_out.close()
        if self.stream.memory is not None:
            self.stream.memory.close(end_session)


def check_schedule(cfg: VenusConfig, engines: Engines) -> None:
    """The configured chunk period must be the one the engines were exported for."""
    exported = engines.manifest.schedule.chunk_s
    if abs(cfg.schedule.chunk_s - exported) > 1e-9:
        raise ConfigError(
            f"schedule.chunk_s is {cfg.schedule.chunk_s} s but the engines in {engines.root} "
            f"were exported for {exported} s chunks; set schedule.chunk_s = {exported} or "
            "export a checkpoint made with that chunk_s"
        )
    if cfg.model.frontend not in ("auto", engines.manifest.frontend):
        raise ConfigError(
            f"model.frontend is {cfg.model.frontend!r} but the engines in {engines.root} are "
            f'an {engines.manifest.frontend!r} frontend; set model.frontend = "auto"'
        )


def make_samplers(cfg: VenusConfig, engines: Engines) -> Samplers:
    """Greedy decisions (optionally biased toward listening); text and speech sampled as
    :func:`sampling_of` says."""
    m = cfg.model
    listen = engines.token_id("<|listen|>")
    bias = LogitBias({listen: m.listen_bias}) if m.listen_bias else None
    how = sampling_of(m, engines.manifest)
    log.info("sampling: %s", how.describe())

    def choice(seed: int) -> Greedy | TopP:
        if how.temperature == 0:
            return Greedy()
        return TopP(how.temperature, how.top_p, rng=np.random.default_rng(seed))

    return Samplers(
        control=Sampler(choose=Greedy(), bias=bias),
        text=Sampler(choose=choice(m.seed)),
        speech=Sampler(choose=choice(m.seed + 1)),
    )


def open_frontend(
    cfg: VenusConfig,
    engines: Engines,
    out: AudioOut,
    clock: Clock,
    on_record: RecordSink,
    harness: HarnessChannel | None = None,
    session_id: str | None = None,
    policy: DecisionPolicy | None = None,
    keep_records: bool = True,
    resume: bool = False,
) -> Frontend:
    """Every part of one frontend. ``policy`` takes the control decisions (default
    ``ModelPolicy``: the model's own; the others are evaluation baselines).
    ``keep_records``: keep every chunk's record in ``Frontend.records`` (offline runs
    summarize them; a live session would grow without bound). ``resume`` (the live
    daemon only): continue the memory file's latest session if it may (``[memory]``)."""
    check_schedule(cfg, engines)
    harness = harness or NoHarness()
    s, h = cfg.schedule, cfg.harness
    settings = StepSettings(
        max_text_tokens=s.max_text_tokens,
        speech_tokens=s.speech_tokens_per_chunk,
        max_context_tokens=s.max_context_tokens,
        sink_tokens=s.sink_tokens,
        call_grammar=cfg.model.call_grammar,
        idle=IdleGate(h.idle_speech_ratio, h.idle_rise_db, h.idle_wait_s),
    )
    deadlines = Deadlines(s.chunk_s, enabled=s.deadlines and not clock.offline)
    samplers = make_samplers(cfg, engines)
    step = ChunkStep(engines, harness, samplers, deadlines, settings, policy)
    records: list[ChunkRecord] = []

    def events(event: PlaybackEvent) -> None:
        log.debug("playback: %s", event)

    playback = PlaybackController(out, events)

    def done(result: ChunkResult) -> None:
        record = to_record(result)
        if keep_records:
            records.append(record)
        on_record(record)

    flow_temperature = sampling_of(cfg.model, engines.manifest).flow_temperature
    speech_out = SpeechOut(engines, playback, done, cfg.model.seed, flow_temperature)
    vad = Vad(cfg.audio.vad_aggressiveness)
    loop = FrontendLoop(step, speech_out, playback, harness, clock, vad)
    stream = step.new_stream()
    if session_id is not None:
        stream.session_id = session_id
    stream.memory = open_memory(cfg, engines)
    if stream.memory is not None:
        stream.session_id = stream.memory.begin(stream.session_id, resume=resume)
    return Frontend(engines, step, stream, playback, speech_out, loop, records)


def open_memory(cfg: VenusConfig, engines: Engines) -> SessionMemory | None:
    """``[memory]`` for these engines: recall needs the ``<|memory|>`` tokens, which
    engines exported before them lack (the store still runs, nothing is put back)."""
    m = cfg.memory
    if m.enabled and m.recall and "<|memory|>" not in engines.manifest.special_tokens:
        log.warning(
            "memory: the engines in %s have no <|memory|> token; nothing is recalled "
            "(re-export the checkpoint with this version of venus)",
            engines.root,
        )
        m = dataclasses.replace(m, recall=0)
    return SessionMemory.open(m, cfg.harness.journal, engines.backbone.hidden_size)


WARM_UP_SPEAK_BIAS = 1e4  # on <|speak|>: the warm-up chunk always speaks


def warm_up(frontend: Frontend) -> float:
    """One chunk of silence (with a black frame if there is a vision encoder) through
    every engine, on the frontend's own stream, then a fresh session; nothing reaches the
    harness, the playback queue, the deadlines or the timeline. -> seconds it took.

    First runs pay one-off costs (CUDA kernels chosen, TensorRT contexts made, memory
    arenas grown) that must not land on the first chunk a user speaks into. The decision
    is forced to ``<|speak|>`` so the text, the speech decoder, the flow decoder and the
    vocoder run too (the flow and vocoder only if speech tokens came out); greedy
    everywhere, so the samplers' random streams are untouched.
    """
    t = time.perf_counter()
    step, e = frontend.step, frontend.engines
    s = step.schedule
    speak = LogitBias({e.token_id("<|speak|>"): WARM_UP_SPEAK_BIAS})
    samplers = Samplers(Sampler(bias=speak), Sampler(), Sampler())
    settings = dataclasses.replace(step.settings, call_grammar=False)  # no calls here
    dry = ChunkStep(e, NoHarness(), samplers, Deadlines(s.chunk_s, enabled=False), settings)
    frame = None
    if e.vision is not None:
        size = s.image_size or VISION_SIZE
        frame = Frame(np.zeros((size, size, 3), np.uint8), 0, time.monotonic(), size, size)
    samples = np.zeros(round(s.chunk_s * s.sample_rate_in), np.float32)
    stream = frontend.stream
    memory, session_id, stream.memory = stream.memory, stream.session_id, None
    try:
        result = dry(stream, ChunkInput(0, 0.0, samples, frame))
        if result.speech.size:
            tokens = result.speech[None, : e.flow.chunk_tokens]
            mel = e.flow.step(tokens, e.flow.new_state(seed=0), final=True)
            if mel.shape[2]:
                e.vocoder.step(mel, e.vocoder.new_state())
        stream.reset()
    finally:
        stream.memory, stream.session_id = memory, session_id  # the session is untouched
    return time.perf_counter() - t


def to_record(r: ChunkResult) -> ChunkRecord:
    latency = dict(r.latency_ms)
    latency["total"] = sum(latency.values())
    return ChunkRecord(
        index=r.index,
        start_s=r.start_s,
        decision=r.decision,  # type: ignore[arg-type]
        text=r.text,
        text_tokens=r.text_tokens,
        speech_tokens=int(r.speech.size),
        reply_id=r.reply_id,
        reply_ended=r.reply_ended,
        delegations=tuple(_delegation(c) for c in r.calls),
        results=tuple(ResultRecord(item_id=i, tokens=n) for i, n in r.results),
        context_tokens=r.context,
        evicted_tokens=r.evicted,
        vision=r.vision,
        speech_ratio=r.speech_ratio,
        speech_rise_db=r.rise_db,
        idle=r.idle,
        playback_stopped=r.playback_stopped,
        latency_ms=latency,
        deadline_missed=r.late,
        degraded=tuple(r.degraded),
        overridden_by=r.overridden_by,
        memory=None if r.memory is None else _memory(r),
    )


def _memory(r: ChunkResult) -> MemoryRecord:
    assert r.memory is not None
    entries, size = r.memory
    recalled = tuple(
        RecallRecord(
            entry=x.entry.id,
            kind=x.entry.kind,  # type: ignore[arg-type]
            first_chunk=x.entry.first_chunk,
            last_chunk=x.entry.last_chunk,
            score=min(1.0, max(-1.0, float(x.score))),
            tokens=int(x.entry.tokens.shape[0]) + 4,
        )
        for x in r.recalled
    )
    return MemoryRecord(entries=entries, bytes=size, recalled=recalled)


def _delegation(c: ParsedCall) -> DelegationRecord:
    return DelegationRecord(
        raw=c.raw, valid=c.valid, name=c.name, arguments=c.arguments, error=c.error
    )


def engine_options(cfg: VenusConfig) -> EngineOptions:
    """``[engines]`` as the runtime's options; an unwritable cache dir turns caching off."""
    e = cfg.engines
    cache: Path | None = e.cache_dir
    try:
        e.cache_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(e.cache_dir, os.W_OK):
            raise PermissionError(f"{e.cache_dir} is not writable")
    except OSError as err:
        log.warning("engines.cache_dir: %s; running without caches (slower start)", err)
        cache = None
    return EngineOptions(
        providers=e.providers,
        device_id=e.device_id,
        intra_op_threads=e.intra_op_threads,
        graph_optimization=e.graph_optimization,
        cache_dir=cache,
    )
