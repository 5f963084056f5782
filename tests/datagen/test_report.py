"""The statistics report over hand-written trajectories: counts, spreads, ratios, mix."""

from __future__ import annotations

import json

import pytest
from support.datagen_fixtures import Loaded, delegation, duplex, record

from venus.datagen.config import parse_config, preset
from venus.datagen.report import build, quantile, to_markdown


@pytest.fixture
def report() -> dict:
    samples = (duplex(), delegation())
    config = parse_config({"samples": 2})
    return build(config, 5, [record(t) for t in samples], Loaded(*samples))


def test_counts_per_group_category_event_intent_action_decision_capability(report: dict) -> None:
    assert report["samples"] == 2
    assert report["seed"] == 5
    assert report["groups"] == {"video": 1, "audio": 1}
    assert report["categories"] == {
        "offline_understanding": 0, "proactive_duplex": 1, "delegation": 1,
    }  # fmt: skip
    assert report["events"] == {
        "backchannel": 0, "other_directed": 0, "background": 1, "interruption": 1,
    }  # fmt: skip
    assert report["intents"] == {"stop": 1, "revise": 0, "cancel_pending": 0, "change_topic": 0}
    assert report["actions"] == {"continue_speaking": 1, "stop_output": 1}
    assert report["delegation_decisions"]["retain"] == 2
    assert report["capabilities"] == {"weather": 1}
    assert report["delegation_status"] == {"completed": 1, "failed": 0, "cancelled": 0}
    assert report["turns_by_speaker"] == {"user": 3, "assistant": 3, "other": 0, "background": 1}


def test_durations_and_overlap_ratio(report: dict) -> None:
    assert report["duration_s"] == {
        "total": 18.0, "min": 8.0, "p50": 9.0, "p95": 9.9, "max": 10.0, "mean": 9.0,
    }  # fmt: skip
    overlap = report["overlap"]
    assert overlap["event_s"] == pytest.approx(1.5 + 0.8)
    assert overlap["ratio"] == pytest.approx(round(2.3 / 18.0, 4))
    assert overlap["event_s_by_kind"]["background"] == 1.5
    assert overlap["events_per_sample"] == 1.0
    assert report["alignment"]["max_onset_error_ms"]["max"] == 12.5


def test_chunk_decision_mix(report: dict) -> None:
    chunks = report["chunks"]
    assert chunks["total"] == 18
    # duplex: llssssssll, delegation: llellles
    assert chunks["decisions"] == {"listen": 9, "speak": 7, "turn_eos": 2}
    assert chunks["ratios"]["speak"] == round(7 / 18, 4)


def test_mix_achieved_against_configured(report: dict) -> None:
    mix = report["mix"]
    assert mix["group"]["video"] == {"configured": 0.7, "achieved": 0.5}
    assert mix["category"]["delegation"] == {"configured": 0.07, "achieved": 0.5}
    assert mix["category"]["offline_understanding"]["achieved"] == 0.0
    assert mix["events"]["interruption"] == {"configured": 0.25, "achieved": 0.5}
    assert mix["intents"]["stop"] == {"configured": 0.3, "achieved": 1.0}


def test_json_is_stable_and_markdown_has_the_tables(report: dict) -> None:
    assert json.loads(json.dumps(report)) == report
    md = to_markdown(report)
    assert md.startswith("# Data set statistics (seed 5)")
    assert "| group | video | 1 | 50.0% | 70.0% |" in md
    assert "| per sample | 8.0 | 9.0 | 9.9 | 10.0 | 9.0 |" in md
    assert "| interruption | 1 | 0.8 |" in md
    assert "| weather | 1 |" in md
    assert "| speak | 7 | 38.9% |" in md
    for line in md.splitlines():
        if line.startswith("|"):
            assert line.endswith("|")


def test_empty_set_reads_zeros() -> None:
    empty = build(preset("smoke"), 0, [], Loaded())
    assert empty["samples"] == 0
    assert empty["duration_s"]["p95"] == 0.0
    assert empty["overlap"]["ratio"] == 0.0
    assert "0 samples" in to_markdown(empty)


def test_quantile_interpolates() -> None:
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert quantile([7.0], 0.95) == 7.0
    assert quantile([], 0.5) == 0.0


def test_results_offered_early_are_counted_where_the_config_offers_them() -> None:
    held = delegation()  # the result injected at chunk 4, which listens: offered early
    held["delegations"][0]["result_chunk"] = 4
    samples = (duplex(), held)
    records = [record(t) for t in samples]
    early = parse_config({"samples": 2, "delegation": {"early_offer_p": 0.5}})
    report = build(early, 5, records, Loaded(*samples))
    assert report["results_offered_early"] == 1
    assert "1 of 1 results offered early" in to_markdown(report)
    as_before = build(early, 5, [record(delegation())], Loaded(delegation()))
    assert as_before["results_offered_early"] == 0  # announced where it came: speaks
    default = build(parse_config({"samples": 2}), 5, records, Loaded(*samples))
    assert "results_offered_early" not in default  # the report as before the key existed
    assert "offered early" not in to_markdown(default)
