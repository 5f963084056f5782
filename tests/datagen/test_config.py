"""The generation config: presets, defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from venus.datagen.config import (
    PRESETS,
    GenerationConfig,
    GenerationConfigError,
    load_config,
    parse_config,
    preset,
)
from venus.datagen.domains import DOMAINS
from venus.errors import ConfigError


def test_eval_preset_has_the_papers_mix() -> None:
    config = preset("eval")
    assert 200 <= config.samples <= 500
    assert config.mix.group.ratios() == {"video": 0.7, "audio": 0.3}
    category = config.mix.category.ratios()
    assert category["offline_understanding"] == 0.56 and category["proactive_duplex"] == 0.37
    assert sum(category.values()) == pytest.approx(1.0)


def test_smoke_preset_is_a_handful_of_short_samples() -> None:
    config = preset("smoke")
    assert config.samples <= 10 and config.duration.max_s <= 20.0


def test_defaults_are_the_eval_preset() -> None:
    assert parse_config({}) == preset("eval")
    assert set(GenerationConfig().delegation.capabilities) == set(DOMAINS)


def test_unknown_preset_says_which_exist() -> None:
    with pytest.raises(ConfigError, match="smoke, eval"):
        preset("big")
    assert set(PRESETS) == {"smoke", "eval"}


def test_a_partial_file_takes_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gen.toml"
    path.write_text(
        'samples = 12\n[mix]\nsampling = "random"\n'
        "[mix.group]\nvideo = 0.5\naudio = 0.5\n"
        "[speech]\nengines = ['flite']\nrate_wpm = [150, 160]\n"
    )
    config = load_config(path)
    assert config.samples == 12 and config.mix.sampling == "random"
    assert config.mix.group.ratios() == {"video": 0.5, "audio": 0.5}
    assert config.speech.engines == ("flite",) and config.speech.rate_wpm == (150, 160)
    assert config.acoustics == GenerationConfig().acoustics


def _problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(GenerationConfigError) as caught:
        parse_config(data)
    return dict(caught.value.problems)


@pytest.mark.parametrize(
    ("data", "key", "says"),
    [
        ({"sampels": 3}, "sampels", "did you mean samples?"),
        ({"mix": {"grop": {}}}, "mix.grop", "did you mean group?"),
        ({"mix": {"group": {"video": 0.6, "audio": 0.3}}}, "mix.group", "sum to 0.9"),
        (
            {"mix": {"events": {"backchannel": 1.5}}},
            "mix.events.backchannel",
            "less than or equal to 1",
        ),
        ({"mix": {"sampling": "sorted"}}, "mix.sampling", "'random' or 'stratified'"),
        ({"samples": "3"}, "samples", "valid integer"),
        ({"samples": 0}, "samples", "greater than or equal to 1"),
        ({"duration": {"min_s": 20.0, "max_s": 10.0}}, "duration.max_s", "at least min_s"),
        ({"speech": {"rate_wpm": [200, 100]}}, "speech.rate_wpm", "80 <= a <= b <= 400"),
        ({"speech": {"engines": ["festival"]}}, "speech.engines", "'espeak-ng' or 'flite'"),
        ({"speech": {"espeak_voices": ["en us"]}}, "speech.espeak_voices", "not a voice name"),
        ({"acoustics": {"snr_db": [5.0]}}, "acoustics.snr_db", "pair"),
        ({"acoustics": {"noise": ["hiss"]}}, "acoustics.noise", "choose one of"),
        ({"delegation": {"capabilities": ["teleport"]}}, "delegation.capabilities", "teleport"),
        ({"video": {"objects": [0, 3]}}, "video.objects", "1 <= a"),
        ({"chunk_s": 0.5}, "chunk_s", "only 1.0 s chunks"),
        ({"output": {"full_duplex_bench": "yes"}}, "output.full_duplex_bench", "boolean"),
    ],
)
def test_errors_name_the_key(data: dict[str, Any], key: str, says: str) -> None:
    problems = _problems(data)
    assert key in problems, problems
    assert says in problems[key]


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems({"samples": -1, "mix": {"group": {"video": 2.0}}, "extra": 1})
    assert {"samples", "mix.group.video", "extra"} <= set(problems)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no-such\.toml"):
        load_config(tmp_path / "no-such.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("samples = \n")
    with pytest.raises(GenerationConfigError, match=r"broken.toml(.|\n)*not valid TOML"):
        load_config(broken)
    bad = tmp_path / "bad.toml"
    bad.write_text("[speech]\npitch = [10, 120]\n")
    with pytest.raises(GenerationConfigError, match=r"bad.toml(.|\n)*speech.pitch"):
        load_config(bad)
