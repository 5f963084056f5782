"""The generation config: presets, defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from venus.datagen import tts
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
        ({"speech": {"formant": [0.9, 1.5]}}, "speech.formant", "0.75 <= a <= b <= 1.35"),
        ({"speech": {"engines": ["festival"]}}, "speech.engines", "'espeak-ng', 'flite' or 'pico'"),
        ({"speech": {"espeak_voices": ["en us"]}}, "speech.espeak_voices", "not a voice name"),
        ({"speech": {"engine_weights": [1.0]}}, "speech.engine_weights", "one weight per engine"),
        ({"speech": {"engine_weights": [0.0, 0.0]}}, "speech.engine_weights", "not all 0"),
        ({"speech": {"engine_weights": [-1.0, 2.0]}}, "speech.engine_weights", "greater than"),
        ({"acoustics": {"snr_db": [5.0]}}, "acoustics.snr_db", "pair"),
        ({"acoustics": {"noise": ["hiss"]}}, "acoustics.noise", "choose one of"),
        ({"delegation": {"capabilities": ["teleport"]}}, "delegation.capabilities", "teleport"),
        (
            {"delegation": {"early_offer_p": 1.5}},
            "delegation.early_offer_p",
            "less than or equal to 1",
        ),
        ({"video": {"objects": [0, 3]}}, "video.objects", "1 <= a"),
        ({"chunk_s": 0.5}, "chunk_s", "only 1.0 s chunks"),
        ({"output": {"full_duplex_bench": "yes"}}, "output.full_duplex_bench", "boolean"),
        ({"speech": {"assistant_voice": "kal16"}}, "speech.assistant_voice", '"ENGINE:NAME"'),
        ({"speech": {"assistant_voice": "flite:"}}, "speech.assistant_voice", '"ENGINE:NAME"'),
        ({"speech": {"assistant_voice": ":kal16"}}, "speech.assistant_voice", '"ENGINE:NAME"'),
        ({"speech": {"assistant_voice": 16}}, "speech.assistant_voice", "valid string"),
        (
            {"speech": {"assistant_voice": "festival:kal16"}},
            "speech.assistant_voice",
            "unknown engine 'festival'",
        ),
        (
            {"speech": {"assistant_voice": "flite:kal 16"}},
            "speech.assistant_voice",
            "not a voice name",
        ),
        (
            {"speech": {"assistant_voice": "flite:nosuch"}},
            "speech.assistant_voice",
            "flite has no voice 'nosuch'; installed: awb, kal, kal16",
        ),
        (
            {"speech": {"assistant_voice": "flite:awb_time"}},  # limited-domain: says times only
            "speech.assistant_voice",
            "flite has no voice 'awb_time'",
        ),
        (
            {"speech": {"assistant_voice": "espeak-ng:en-zz"}},
            "speech.assistant_voice",
            "espeak-ng has no voice 'en-zz'; installed: ",
        ),
        (
            {"speech": {"assistant_voice": "espeak-ng:en-us+nosuch"}},
            "speech.assistant_voice",
            "espeak-ng has no variant 'nosuch'",
        ),
        (
            {"speech": {"assistant_voice": "flite:kal", "flite_voices": ["kal"]}},
            "speech.assistant_voice",
            "the only voice in flite_voices",
        ),
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


# --- speech.assistant_voice -----------------------------------------------------------------
def test_the_assistant_voice_is_drawn_per_sample_by_default() -> None:
    speech = GenerationConfig().speech
    assert speech.assistant_voice == "" and speech.fixed_assistant() is None
    assert speech.people_voices("espeak-ng") == speech.espeak_voices
    assert speech.people_voices("flite") == speech.flite_voices
    assert parse_config({"speech": {"assistant_voice": ""}}) == GenerationConfig()


@pytest.mark.parametrize(
    ("value", "fixed", "espeak", "flite"),
    [
        ("flite:kal16", ("flite", "kal16"), ("en-us", "en-us+f3"), ("kal",)),
        ("espeak-ng:en-us+f3", ("espeak-ng", "en-us+f3"), ("en-us",), ("kal", "kal16")),
    ],
)
def test_a_fixed_assistant_voice_is_left_out_of_the_peoples(
    value: str, fixed: tuple[str, str], espeak: tuple[str, ...], flite: tuple[str, ...]
) -> None:
    lists = {"espeak_voices": ["en-us", "en-us+f3"], "flite_voices": ["kal", "kal16"]}
    speech = parse_config({"speech": {**lists, "assistant_voice": value}}).speech
    assert speech.fixed_assistant() == fixed
    assert speech.people_voices("espeak-ng") == espeak
    assert speech.people_voices("flite") == flite


def test_the_only_voice_of_an_engine_not_used_may_be_the_assistants() -> None:
    data = {"engines": ["espeak-ng"], "flite_voices": ["kal16"], "assistant_voice": "flite:kal16"}
    assert parse_config({"speech": data}).speech.people_voices("flite") == ()


def test_assistant_voice_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "voices.toml"
    bad.write_text('[speech]\nassistant_voice = "flite:kal17"\n')
    with pytest.raises(GenerationConfigError) as caught:
        load_config(bad)
    assert caught.value.source == str(bad)
    assert dict(caught.value.problems) == {
        "speech.assistant_voice": "'flite:kal17': flite has no voice 'kal17'; installed: "
        "awb, kal, kal16, rms, slt"
    }
    assert str(bad) in str(caught.value) and "speech.assistant_voice" in str(caught.value)


def test_an_assistant_voice_needs_its_engine_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run there
    tts.voices.cache_clear()
    try:
        problems = _problems({"speech": {"assistant_voice": "flite:kal16"}})
    finally:
        tts.voices.cache_clear()
    assert "apt-get install flite" in problems["speech.assistant_voice"]
