"""Configuration loading: every key validated, every problem reported with its path."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from venus.daemon.config import (
    ConfigInvalid,
    VenusConfig,
    load_config,
    parse_config,
    render_config,
)
from venus.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "systemd" / "venus.toml"


def problems(data: dict[str, object]) -> dict[str, str]:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(data)
    return {p.key: p.message for p in info.value.problems}


def test_defaults_without_a_single_key() -> None:
    cfg = parse_config({})
    assert cfg.schedule.chunk_s == 1.0
    assert cfg.audio.sample_rate == 16000
    assert cfg.engines.providers == ("tensorrt", "cuda", "cpu")
    assert cfg.harness.credentials_file is None


def test_values_are_typed_and_frozen() -> None:
    cfg = parse_config({"model": {"engines": "/srv/engines"}, "schedule": {"chunk_s": 1}})
    assert cfg.model.engines == Path("/srv/engines")
    assert isinstance(cfg.schedule.chunk_s, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.schedule.chunk_s = 2.0  # type: ignore[misc]


def test_unknown_key_suggests_the_nearest() -> None:
    found = problems({"audio": {"sample_rte": 16000}})
    assert found == {"audio.sample_rte": "unknown key; did you mean sample_rate?"}


def test_unknown_key_without_a_near_one_lists_the_valid_ones() -> None:
    msg = problems({"logging": {"zzz": 1}})["logging.zzz"]
    assert "valid keys here: format, level" in msg


def test_unknown_section() -> None:
    assert problems({"audoi": {}}) == {"audoi": "unknown key; did you mean audio?"}


def test_out_of_range_names_the_allowed_range() -> None:
    msg = problems({"schedule": {"chunk_s": -1}})["schedule.chunk_s"]
    assert "-1 is out of range" in msg
    assert "0.25 <= chunk_s <= 2.0" in msg


def test_chunk_must_be_whole_audio_hops() -> None:
    assert "10 ms" in problems({"schedule": {"chunk_s": 0.333}})["schedule.chunk_s"]
    assert parse_config({"schedule": {"chunk_s": 0.25}}).schedule.chunk_s == 0.25


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ({"audio": {"channels": "2"}}, "audio.channels", "integer"),
        ({"audio": {"sample_rate": 16000.0}}, "audio.sample_rate", "integer"),
        ({"video": {"enabled": 1}}, "video.enabled", "boolean"),
        ({"logging": {"level": "LOUD"}}, "logging.level", "'DEBUG'"),
        ({"engines": {"providers": ["tpu"]}}, "engines.providers[0]", "'tensorrt'"),
        ({"engines": {"providers": []}}, "engines.providers", "at least 1"),
        ({"audio": 3}, "audio", "must be a table"),
        ({"harness": {"broker_url": "http://x"}}, "harness.broker_url", "mqtt://"),
        ({"harness": {"broker_url": "mqtt://h:99999"}}, "harness.broker_url", "Port out of range"),
        ({"harness": {"node_id": "Bad Id"}}, "harness.node_id", "node id"),
        ({"harness": {"tls_cert": "/c"}}, "harness", "set both or neither"),
        ({"service": {"metrics_address": "9464"}}, "service.metrics_address", "HOST:PORT"),
    ],
)
def test_invalid_values(data: dict[str, object], key: str, fragment: str) -> None:
    found = problems(data)
    assert key in found, found
    assert fragment in found[key]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        {
            "audio": {"sample_rte": 1, "channels": 0},
            "schedule": {"chunk_s": 9},
            "bogus": {},
        }
    )
    assert set(found) == {"audio.sample_rte", "audio.channels", "schedule.chunk_s", "bogus"}


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "v.toml"
    path.write_text("[audio]\nsample_rate = = 1\n")
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    assert "line 2" in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file; copy the example"):
        load_config(tmp_path / "absent.toml")


def test_example_config_passes_and_equals_the_defaults() -> None:
    # The example shows every default: if a default changes, the example must too.
    assert load_config(EXAMPLE) == VenusConfig()


def test_example_config_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    sections = re.split(r"^\[(\w+)\]\s*$", text, flags=re.M)
    bodies = dict(zip(sections[1::2], sections[2::2], strict=True))
    for section in dataclasses.fields(VenusConfig):
        assert section.name in bodies, f"[{section.name}] missing from {EXAMPLE.name}"
        body = bodies[section.name]
        for key in dataclasses.fields(getattr(VenusConfig(), section.name)):
            match = re.search(rf"^(?:# )?{key.name} = ", body, flags=re.M)
            assert match, f"{section.name}.{key.name} missing from {EXAMPLE.name}"
            before = body[: match.start()].rstrip().splitlines()
            assert before and before[-1].startswith("#"), (
                f"{section.name}.{key.name} has no comment"
            )


def test_render_masks_the_broker_password() -> None:
    cfg = parse_config({"harness": {"broker_url": "mqtts://venus:hunter2@broker:8883"}})
    out = render_config(cfg)
    assert "hunter2" not in out
    assert 'broker_url = "mqtts://venus:********@broker:8883"' in out
    assert "hunter2" not in render_config(cfg, "json")


def test_render_says_what_an_unset_sampling_key_resolves_to() -> None:
    out = render_config(VenusConfig())
    assert "# temperature: not set (the engines' recommendation, else 0.7)" in out
    assert "# top_p: not set (the engines' recommendation, else 0.9)" in out
    assert "# tls_ca: not set\n" in out  # a key that is simply off
    assert "temperature = 0.3" in render_config(parse_config({"model": {"temperature": 0.3}}))


def test_rendered_toml_reads_back_to_the_same_config(tmp_path: Path) -> None:
    cfg = parse_config({"schedule": {"chunk_s": 0.5}, "harness": {"tls_ca": "/ca.pem"}})
    path = tmp_path / "resolved.toml"
    path.write_text(render_config(cfg))
    assert load_config(path) == cfg
