"""Timeline records: written and read back, checked against the committed JSON Schema."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from venus.daemon.frontend.timeline import (
    STAGES,
    ChunkRecord,
    DelegationRecord,
    ResultRecord,
    TimelineError,
    TimelineWriter,
    read_timeline,
    timeline_schema,
)

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "timeline.schema.json"
DOC_FILE = SCHEMA_FILE.with_name("timeline.md")


def record(index: int = 0, **changes: object) -> ChunkRecord:
    base = ChunkRecord(
        index=index,
        start_s=float(index),
        decision="listen",
        text="",
        text_tokens=0,
        speech_tokens=0,
        reply_id=None,
        reply_ended=False,
        delegations=(),
        results=(),
        context_tokens=75 * (index + 1),
        evicted_tokens=0,
        vision=True,
        speech_ratio=0.25,
        playback_stopped=False,
        latency_ms={"mel": 1.5, "audio_encoder": 12.0, "prefill": 30.25, "total": 50.0},
        deadline_missed=False,
        degraded=(),
    )
    return replace(base, **changes) if changes else base  # type: ignore[arg-type]


def records() -> list[ChunkRecord]:
    call = DelegationRecord(
        raw='{"name": "weather", "arguments": {"city": "Zürich"}}',
        valid=True,
        name="weather",
        arguments={"city": "Zürich", "days": [1, 2], "units": None},
        error=None,
    )
    bad = DelegationRecord(
        raw='{"name": "weather", ', valid=False, name=None, arguments=None, error="not JSON"
    )
    return [
        record(0),
        record(
            1,
            decision="speak",
            text="Let me check.",
            text_tokens=4,
            speech_tokens=25,
            reply_id=1,
            delegations=(call, bad),
            results=(ResultRecord(item_id="item-0", tokens=17),),
            latency_ms={stage: 1.0 + i for i, stage in enumerate(STAGES)} | {"total": 99.5},
            deadline_missed=True,
            degraded=("vision_skipped", "speech_shortened"),
            vision=False,
        ),
        record(2, decision="turn_eos", reply_id=1, reply_ended=True, playback_stopped=True),
    ]


def test_records_round_trip_through_a_file_and_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    with TimelineWriter(path) as writer:
        for rec in records():
            writer.write(rec)
            assert path.read_text().count("\n") == writer.count  # flushed line by line
    assert read_timeline(path) == records()
    stream = io.StringIO()
    with TimelineWriter(stream) as writer:
        writer.write(records()[1])
    assert not stream.closed
    stream.seek(0)
    assert read_timeline(stream) == [records()[1]]
    with TimelineWriter(path, append=True) as writer:
        writer.write(record(3))
    assert [r.index for r in read_timeline(path)] == [0, 1, 2, 3]


def test_the_committed_schema_is_the_generated_one() -> None:
    committed = json.loads(SCHEMA_FILE.read_text())
    assert committed == timeline_schema(), (
        "docs/timeline.schema.json is stale: run scripts/update-timeline-schema"
    )


def test_written_lines_validate_against_the_committed_schema(tmp_path: Path) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    path = tmp_path / "timeline.jsonl"
    with TimelineWriter(path) as writer:
        for rec in records():
            writer.write(rec)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        validator.validate(line)
    for broken in (
        lines[0] | {"decision": "sing"},
        lines[0] | {"latency_ms": {"mel": 1.0}},  # no total
        lines[0] | {"latency_ms": {"warp": 1.0, "total": 2.0}},
        lines[0] | {"extra": 1},
        {k: v for k, v in lines[0].items() if k != "vision"},
    ):
        assert not validator.is_valid(broken), broken


def test_a_bad_line_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    with TimelineWriter(path) as writer:
        writer.write(record(0))
        writer.write(record(1))
    good = path.read_text()
    bad = json.loads(good.splitlines()[0]) | {"index": "two"}
    path.write_text(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TimelineError, match=r"timeline.jsonl, line 4: .*index: Input should be"):
        read_timeline(path)
    path.write_text(good + '{"index": 2, \n')
    with pytest.raises(TimelineError, match=r"line 3: .*(JSON|json)"):
        read_timeline(path)
    with pytest.raises(TimelineError, match="cannot read"):
        read_timeline(tmp_path / "missing.jsonl")


def test_records_are_checked_when_made() -> None:
    with pytest.raises(ValidationError, match="total"):
        record(latency_ms={"mel": 1.0})
    with pytest.raises(ValidationError, match="reply_id"):
        record(reply_ended=True)
    with pytest.raises(ValidationError, match="speech_ratio"):
        record(speech_ratio=1.5)
    with pytest.raises(ValidationError, match="degraded"):
        record(degraded=("slow",))
    with pytest.raises(ValidationError, match="says why"):
        DelegationRecord(raw="x", valid=False, name=None, arguments=None, error=None)


def test_every_field_is_documented() -> None:
    doc = DOC_FILE.read_text()
    schema = timeline_schema()
    fields = set(schema["properties"])
    for sub in schema["$defs"].values():
        fields |= set(sub["properties"])
    missing = sorted(f for f in fields if f"`{f}`" not in doc)
    assert not missing, f"docs/timeline.md does not document {missing}"
    assert all(f"`{stage}`" in doc for stage in STAGES)
