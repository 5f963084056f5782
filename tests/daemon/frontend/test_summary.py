"""The run summary from hand-made timeline records, percentiles checked by value."""

from __future__ import annotations

import json

import pytest

from venus.daemon.frontend.summary import StageLatency, render, summarize, summary_json
from venus.daemon.frontend.timeline import ChunkRecord, DelegationRecord, ResultRecord

GOOD = DelegationRecord(raw="{}", valid=True, name="lamp", arguments={}, error=None)
BAD = DelegationRecord(raw="{", valid=False, name=None, arguments=None, error="not JSON")


def chunk(index: int, **fields: object) -> ChunkRecord:
    values: dict[str, object] = {
        "index": index,
        "start_s": float(index),
        "decision": "listen",
        "text": "",
        "text_tokens": 0,
        "speech_tokens": 0,
        "reply_id": None,
        "reply_ended": False,
        "delegations": (),
        "results": (),
        "context_tokens": 100,
        "evicted_tokens": 0,
        "vision": False,
        "speech_ratio": 0.0,
        "playback_stopped": False,
        "latency_ms": {"mel": 1.0, "total": 1.0},
        "deadline_missed": False,
        "degraded": (),
    }
    values.update(fields)
    return ChunkRecord(**values)  # type: ignore[arg-type]


def records() -> list[ChunkRecord]:
    """20 chunks: total latency 1..20 ms, the vision encoder in chunks 0, 5, 10, 15."""
    out = []
    for i in range(20):
        latency = {"mel": 2.0, "audio_encoder": 10.0 + i}
        if i % 5 == 0:
            latency["vision_encoder"] = 40.0 + i
        latency["total"] = 1.0 + i
        out.append(
            chunk(
                i,
                decision=("listen", "speak", "speak", "turn_eos")[i % 4],
                latency_ms=latency,
                delegations=(GOOD, BAD) if i == 3 else (GOOD,) if i == 7 else (),
                results=(ResultRecord(item_id="a", tokens=5),) if i in (9, 12) else (),
                deadline_missed=i in (18, 19),
                degraded=("vision_skipped", "speech_shortened") if i == 19 else (),
                playback_stopped=i == 11,
            )
        )
    return out


def test_counts_and_percentiles() -> None:
    s = summarize(records(), wall_s=5.0, input_s=20.0)
    assert s.chunks == 20
    assert s.decisions == {"listen": 5, "speak": 10, "turn_eos": 5}
    assert (s.delegations_valid, s.delegations_malformed) == (2, 1)
    assert s.results_injected == 2
    assert s.deadlines_missed == 2
    assert s.degraded == {"vision_skipped": 1, "speech_shortened": 1}
    assert s.playback_stops == 1
    assert s.real_time_factor == pytest.approx(0.25)
    assert list(s.latency) == ["mel", "audio_encoder", "vision_encoder", "total"]
    # 1..20: the median is 10.5; p95 interpolates 19 + 0.05 * (20 - 19)
    assert s.latency["total"] == StageLatency(20, 10.5, pytest.approx(19.05), 20.0)  # type: ignore[arg-type]
    assert s.latency["mel"] == StageLatency(20, 2.0, 2.0, 2.0)
    assert s.latency["audio_encoder"].p50_ms == pytest.approx(19.5)
    # ran in 4 chunks only: 40, 45, 50, 55
    vision = s.latency["vision_encoder"]
    assert vision.runs == 4
    assert vision.p50_ms == pytest.approx(47.5)
    assert vision.p95_ms == pytest.approx(50 + 0.85 * 5)
    assert vision.max_ms == 55.0


def test_an_empty_run() -> None:
    s = summarize([], wall_s=0.0, input_s=0.0)
    assert s.chunks == 0 and s.latency == {} and s.real_time_factor is None
    assert s.decisions == {"listen": 0, "speak": 0, "turn_eos": 0}
    assert "n/a" in render(s)
    with pytest.raises(ValueError, match="input_s"):
        summarize([], wall_s=1.0, input_s=-1.0)


def test_render_is_a_short_table() -> None:
    text = render(summarize(records(), wall_s=5.0, input_s=20.0))
    lines = text.splitlines()
    assert len(lines) <= 12
    assert "listen 5, speak 10, turn_eos 5" in lines[0]
    assert "factor 0.25" in text and "2 valid, 1 malformed" in text
    assert "vision_skipped 1, speech_shortened 1" in text
    total = next(line for line in lines if line.startswith("total"))
    assert total.split() == ["total", "20", "10.5", "19.1", "20.0"]


def test_summary_json_is_plain_json() -> None:
    data = summary_json(summarize(records(), wall_s=5.0, input_s=20.0))
    assert json.loads(json.dumps(data)) == data
    assert data["latency_ms"]["total"] == {"runs": 20, "p50": 10.5, "p95": 19.05, "max": 20.0}
    assert data["delegations"] == {"valid": 2, "malformed": 1}
    assert data["real_time_factor"] == 0.25
    assert data["decisions"]["speak"] == 10
