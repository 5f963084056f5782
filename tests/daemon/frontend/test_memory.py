"""Long-session memory in the frontend loop, on real tiny engines and a real SQLite file.

The loop runs offline over an OpenCV-drawn video (``venus.bench.long_video``): scenes of
20 s and a landmark shown early and again, partly occluded, later. A small context
(512 tokens) makes eviction happen within seconds, so the landmark's first showing has
left the context when it comes back.
"""

from __future__ import annotations

import dataclasses
import logging
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport
from support.frontend import chunk_record, config

from venus.bench.long_video import LongVideo, make_long_video
from venus.bench.memory import QuietAudio, _Discard
from venus.daemon.config.schema import MemoryConfig, VenusConfig
from venus.daemon.frontend.clock import OfflineClock
from venus.daemon.frontend.memory import SessionMemory
from venus.daemon.frontend.session import Frontend, open_frontend
from venus.daemon.frontend.stream import ContextChunks
from venus.daemon.frontend.timeline import ChunkRecord, MemoryRecord, RecallRecord
from venus.daemon.memory.persist import MemoryFile
from venus.daemon.service.metrics import Metrics
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.hw.video_file import VideoFile

CONTEXT, SINKS = 512, 16


@pytest.fixture(scope="module")
def engines(tiny_export: TinyExport) -> Engines:
    return Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",)))


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> LongVideo:
    path = tmp_path_factory.mktemp("video") / "long.avi"
    return make_long_video(path, seconds=140, landmark_s=10, repeat_s=100)


def memory_cfg(engines: Path, journal: Path, **memory: object) -> VenusConfig:
    cfg = config(engines, max_context_tokens=CONTEXT, sink_tokens=SINKS)
    harness = dataclasses.replace(cfg.harness, journal=journal)
    mem = dataclasses.replace(cfg.memory, **memory)
    model = dataclasses.replace(cfg.model, temperature=0.0)
    return dataclasses.replace(cfg, harness=harness, memory=mem, model=model)


def frontend(
    cfg: VenusConfig, engines: Engines, records: list[ChunkRecord], resume: bool = True
) -> Frontend:
    """A frontend as the live daemon opens one (``resume``), on the offline clock."""
    s = engines.manifest.schedule
    track = _Discard(s.sample_rate_out)
    clock = OfflineClock(track, s.sample_rate_out)
    return open_frontend(
        cfg, engines, track, clock, records.append, keep_records=False, resume=resume
    )


def run(f: Frontend, video: LongVideo, seconds: int, start: int = 0) -> None:
    audio = QuietAudio(start + seconds, f.step.schedule.chunk_s)
    audio.index = start
    with VideoFile(video.path, size=f.step.schedule.image_size) as frames:
        f.loop.run(f.stream, audio, frames.frame_at)


def test_context_chunks_follow_evictions() -> None:
    chunks = ContextChunks()
    for i in range(6):
        chunks.add(i, 10 * i)  # chunk i starts at token 10 i; 60 tokens held
    assert chunks.oldest(99) == 0
    chunks.evicted(first=5, dropped=20)  # tokens 5..24 go: chunks 0-2 began before 25
    assert chunks.oldest(99) == 3 and len(chunks) == 3
    chunks.add(6, 40)  # the next chunk after: 40 tokens are held now
    chunks.evicted(first=5, dropped=11)  # tokens 5..15 go (chunk 3 began at 10)
    assert chunks.oldest(99) == 4
    chunks.evicted(first=5, dropped=0)  # nothing dropped: the chunks at the sinks stay
    assert chunks.oldest(99) == 4
    chunks.evicted(first=5, dropped=100)
    assert chunks.oldest(99) == 99 and len(chunks) == 0


def test_an_hour_in_miniature_stays_bounded_and_recalls_the_landmark(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    budget_mb = 0.02  # ~20 kB: the 140 s must be pooled and merged to fit
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", budget_mb=budget_mb)
    records: list[ChunkRecord] = []
    f = frontend(cfg, engines, records)
    run(f, video, video.seconds)
    positions = f.stream.backbone.positions
    f.close(end_session=True)

    assert len(records) == video.seconds
    assert sum(r.evicted_tokens for r in records) > 0  # the small context did evict
    assert max(r.context_tokens for r in records) <= CONTEXT
    assert positions <= CONTEXT  # renumbered on eviction: positions stay bounded
    for r in records:
        assert r.memory is not None and r.memory.bytes <= budget_mb * 2**20
        assert "memory" in r.latency_ms
        for x in r.memory.recalled:
            assert x.last_chunk < r.index  # only the past comes back
    # The landmark (seconds 10-29) is back at 100: its first showing is recalled.
    first, again = video.chunks(video.landmark_s), video.chunks(video.repeat_s)
    back = [
        r.index
        for r in records[again[0] : again[-1] + 1]
        for x in r.memory.recalled  # type: ignore[union-attr]
        if x.kind == "vision" and x.first_chunk <= first[-1] and x.last_chunk >= first[0]
    ]
    assert back and back[0] <= again[0] + 2, back
    # Recalled tokens went into the context: that chunk held more than its neighbours.
    at = records[back[0]]
    assert at.memory is not None and sum(x.tokens for x in at.memory.recalled) > 0
    # Elsewhere the scenes are new to the memory: little is recalled (no flood of hum).
    elsewhere = [r for r in records[40:95] if r.memory is not None and r.memory.recalled]
    assert len(elsewhere) < 20


def test_memory_survives_a_restart_within_the_session_and_is_wiped_at_its_end(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", persist=True)
    first: list[ChunkRecord] = []
    f = frontend(cfg, engines, first)
    session, entries = f.stream.session_id, None
    run(f, video, 25)
    assert f.stream.memory is not None
    entries = len(f.stream.memory.store)
    f.close()  # a daemon stop: the session may continue
    path = tmp_path / "memory.sqlite3"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds what the camera saw
    with MemoryFile(path) as file:
        latest = file.latest()
        assert latest is not None and latest.id == session and latest.last_chunk == 24
        assert len(file.load(session)) == entries > 0

    again: list[ChunkRecord] = []
    f = frontend(cfg, engines, again)  # the restart, within resume_within_s
    assert f.stream.session_id == session
    assert f.stream.memory is not None and f.stream.memory.offset == 25
    assert len(f.stream.memory.store) == entries
    run(f, video, 5, start=25)
    f.close(end_session=True)  # the session ends: wiped
    with MemoryFile(path) as file:
        assert file.latest() is None and file.load(session) == []


def test_a_late_restart_starts_a_new_session_and_wipes_the_old_unless_kept(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.sqlite3"
    for keep in (False, True):
        cfg = memory_cfg(journal.parent, journal, persist=True, keep_after_session=keep)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, engines=engines.root))
        f = frontend(cfg, engines, [])
        old = f.stream.session_id
        run(f, video, 12)
        f.close()
        late = dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, resume_within_s=0.0))
        f = frontend(late, engines, [])
        assert f.stream.session_id != old
        assert f.stream.memory is not None and len(f.stream.memory.store) == 0
        f.close(end_session=True)
        with MemoryFile(tmp_path / "memory.sqlite3") as file:
            assert (len(file.load(old)) > 0) == keep
            file.wipe()


def test_an_offline_run_never_continues_or_wipes_the_live_session(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", persist=True)
    live = frontend(cfg, engines, [])
    session = live.stream.session_id
    run(live, video, 12)
    live.close()  # the daemon stopped a moment ago: its session may continue
    offline = frontend(cfg, engines, [], resume=False)  # venus run --offline, an eval
    assert offline.stream.session_id != session
    assert offline.stream.memory is not None and len(offline.stream.memory.store) == 0
    run(offline, video, 12)
    offline.close(end_session=True)
    with MemoryFile(tmp_path / "memory.sqlite3") as file:
        latest = file.latest()
        assert latest is not None and latest.id == session and len(file.load(session)) > 0


def test_a_kept_ended_session_is_never_continued(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    cfg = memory_cfg(
        engines.root, tmp_path / "journal.sqlite3", persist=True, keep_after_session=True
    )
    f = frontend(cfg, engines, [])
    old = f.stream.session_id
    run(f, video, 13)  # 13: three chunks after the last flush, saved when it ends
    f.close(end_session=True)
    with MemoryFile(tmp_path / "memory.sqlite3") as file:
        assert file.latest() is None  # ended
        kept = file.sessions()
        assert [(info.id, info.last_chunk) for info, _, _ in kept] == [(old, 12)]
    again = frontend(cfg, engines, [])
    assert again.stream.session_id != old
    again.close()


def test_bad_embeddings_skip_the_memory_not_the_chunk(
    engines: Engines, video: LongVideo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = MemoryConfig(recall=2, min_similarity=-1.0)  # anything usable would come back
    memory = SessionMemory.open(config, tmp_path / "j.sqlite3", width=64)
    assert memory is not None
    memory.begin("s")
    rng = np.random.default_rng(0)
    for k in range(5):
        memory.step(k, float(k), k + 1.0, {"audio": rng.standard_normal((10, 64))}, 0)
    nan = np.full((10, 64), np.nan)
    with caplog.at_level(logging.WARNING):
        assert memory.step(5, 5.0, 6.0, {"audio": nan}, 3) == []
    assert "not kept" in caplog.text and len(memory.store) == 5
    assert memory.step(6, 6.0, 7.0, {"audio": rng.standard_normal((10, 32))}, 6) == []


def test_a_restart_on_engines_of_another_width_starts_afresh(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    config = MemoryConfig(persist=True)
    first = SessionMemory.open(config, tmp_path / "j.sqlite3", width=32)
    assert first is not None
    first.begin("narrow", resume=True)
    first.step(0, 0.0, 1.0, {"audio": np.ones((10, 32))}, 0)
    first.close(end_session=False)
    second = SessionMemory.open(config, tmp_path / "j.sqlite3", width=64)
    assert second is not None
    assert second.begin("wide", resume=True) == "wide"  # not "narrow": it cannot continue
    assert len(second.store) == 0
    second.close(end_session=True)
    with MemoryFile(tmp_path / "memory.sqlite3") as file:
        assert file.load("narrow") == []  # that session ended: wiped


def test_a_new_session_after_a_failed_chunk_forgets_the_old_one(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", persist=True)
    f = frontend(cfg, engines, [])
    old = f.stream.session_id
    run(f, video, 12)
    assert f.stream.memory is not None
    f.stream.memory.flush()
    f.stream.reset()  # what the loop does after a failed chunk
    assert f.stream.session_id != old and len(f.stream.memory.store) == 0
    with MemoryFile(tmp_path / "memory.sqlite3") as file:
        assert file.load(old) == []
    f.close()


def test_an_unreadable_memory_file_is_left_alone_and_the_session_runs(
    engines: Engines, video: LongVideo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "memory.sqlite3"
    path.write_bytes(b"not a database" * 100)
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", persist=True)
    records: list[ChunkRecord] = []
    with caplog.at_level(logging.ERROR):
        f = frontend(cfg, engines, records)
    assert str(path) in caplog.text and "without persistence" in caplog.text
    run(f, video, 3)
    f.close()
    assert len(records) == 3 and all(r.memory is not None for r in records)
    assert path.read_bytes() == b"not a database" * 100  # nothing lost or overwritten


def test_engines_without_memory_tokens_store_but_recall_nothing(
    engines: Engines, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = dict(engines.manifest.special_tokens)
    del tokens["<|memory|>"], tokens["<|/memory|>"]
    manifest = dataclasses.replace(engines.manifest, special_tokens=tokens)
    older = dataclasses.replace(engines, manifest=manifest)
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3")
    with caplog.at_level(logging.WARNING):
        f = frontend(cfg, older, [])
    assert "no <|memory|> token" in caplog.text
    assert f.stream.memory is not None and f.stream.memory.config.recall == 0
    f.close()


def test_memory_off_writes_no_memory_field(
    engines: Engines, video: LongVideo, tmp_path: Path
) -> None:
    cfg = memory_cfg(engines.root, tmp_path / "journal.sqlite3", enabled=False)
    records: list[ChunkRecord] = []
    f = frontend(cfg, engines, records)
    run(f, video, 3)
    f.close()
    assert [r.memory for r in records] == [None] * 3
    assert all("memory" not in r.latency_ms for r in records)


def test_metrics_report_the_store_and_what_it_recalled() -> None:
    metrics = Metrics(process_metrics=False)
    recall = RecallRecord(entry=3, kind="vision", first_chunk=5, last_chunk=9, score=0.9, tokens=12)
    record = chunk_record(
        memory=MemoryRecord(entries=40, bytes=12345, recalled=(recall,)),
        latency_ms={"memory": 1.5, "total": 10.0},
    )
    metrics.on_record(record)
    text = metrics.text().decode()
    assert "venus_memory_bytes 12345.0" in text
    assert "venus_memory_entries 40.0" in text
    assert 'venus_memory_recalled_total{kind="vision"} 1.0' in text
    assert 'venus_chunk_stage_seconds_count{stage="memory"} 1.0' in text


def test_a_recalled_entry_merged_away_passes_its_place_in_the_context_on() -> None:
    """The entry a recalled one merged into holds the same content: it must stay out of
    the search for as long as the recalled tokens are in the context."""
    entry = 1 * 8 * 2 + 8 * 4 + 96  # one float16 row and a float32 key at width 8
    config = MemoryConfig(
        budget_mb=(4 * entry + 50) / 2**20,  # room for four entries
        tier_tokens=(1,),
        tier_shares=(1.0,),
        merge_similarity=1.0,
        recall=1,
        min_similarity=-1.0,
    )
    memory = SessionMemory.open(config, Path("unused"), width=8)
    assert memory is not None
    memory.begin("s")
    e = np.eye(8)
    a, b = e[0], (e[0] + 0.3 * e[1]) / np.linalg.norm(e[0] + 0.3 * e[1])
    for k, v in enumerate((a, b, e[2], e[3])):
        memory.step(k, float(k), k + 1.0, {"vision": v[None]}, k)
    ids = [x.id for x in memory.store.entries()]
    found = memory.step(4, 4.0, 5.0, {"vision": e[1][None]}, 4)  # most like b; a 5th entry
    assert [r.entry.id for r in found] == [ids[1]]  # b was recalled ...
    assert memory.store.get(ids[1]) is None  # ... then merged into a to make room
    assert memory.recalled == {ids[0]: 4}
