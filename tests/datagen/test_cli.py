"""``venus datagen`` as a user runs it: a real subprocess, the real pipeline (espeak-ng,
flite), real files. Determinism, --jobs, resume after a kill, refusals, the mix, the
Full-Duplex-Bench windows against the audio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from support.datagen_fixtures import check_window

from venus.datagen.config import preset
from venus.datagen.fdb import TASKS

VENUS = Path(sys.executable).with_name("venus")
TIMEOUT_S = 180


def venus(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONHASHSEED": "random"},
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``venus datagen --preset smoke --seed 1``, run from an empty directory with the
    default --out, as a new user would."""
    cwd = tmp_path_factory.mktemp("user")
    out = subprocess.run(
        [str(VENUS), "datagen", "--preset", "smoke", "--seed", "1"],
        cwd=cwd, check=False, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "6 samples in datagen-smoke-seed1 (6 generated, 0 resumed)" in out.stdout
    assert "datagen: 6/6 samples (100%)" in out.stderr
    return cwd / "datagen-smoke-seed1"


def test_help_explains() -> None:
    out = venus("datagen", "--help")
    assert out.returncode == 0
    for words in ("--preset {smoke,eval}", "--jobs J", "--samples K", "byte-identical",
                  "resumes", "full_duplex_bench", "index.jsonl"):  # fmt: skip
        assert words in out.stdout, words
    assert "datagen" in venus("--help").stdout


def test_needs_a_config_or_a_preset() -> None:
    out = venus("datagen", "--seed", "1")
    assert out.returncode == 2
    assert "one of the arguments --config --preset is required" in out.stderr


def test_smoke_twice_gives_identical_files(smoke: Path, tmp_path: Path) -> None:
    out = venus("datagen", "--preset", "smoke", "--seed", "1", "--out", tmp_path / "again")
    assert out.returncode == 0, out.stderr
    files = tree(smoke)
    assert tree(tmp_path / "again") == files
    samples = json.loads((smoke / "run.json").read_text())["samples"]
    assert len([f for f in files if f.endswith("/trajectory.json")]) == samples == 6
    assert {"index.jsonl", "config.toml", "report.json", "report.md"} <= files.keys()
    assert len([f for f in files if f.startswith("plots/")]) == 2


def test_jobs_2_gives_the_same_files(smoke: Path, tmp_path: Path) -> None:
    out = venus("datagen", "--preset", "smoke", "--seed", "1", "--jobs", "2",
                "--out", tmp_path / "j2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert tree(tmp_path / "j2") == tree(smoke)


def test_a_killed_run_resumes_to_the_same_files(smoke: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    argv = [str(VENUS), "datagen", "--preset", "smoke", "--seed", "1", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if out.is_dir() and len(list(out.glob("samples/*/trajectory.json"))) >= 2:
                break
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert not (out / "index.jsonl").exists(), "the run finished before the kill"
    junk = out / "samples" / ".tmp-1-000005-4242"  # what a killed worker leaves
    junk.mkdir(parents=True, exist_ok=True)
    (junk / "input.wav").write_bytes(b"RIFF")
    again = venus(*argv[1:])
    assert again.returncode == 0, again.stderr
    assert "resumed)" in again.stdout and "0 resumed" not in again.stdout
    assert tree(out) == tree(smoke)


def test_resuming_with_another_seed_is_refused(smoke: Path) -> None:
    before = tree(smoke)
    out = venus("datagen", "--preset", "smoke", "--seed", "2", "--out", smoke)
    assert out.returncode == 1
    assert "made with --seed 1, not 2" in out.stderr
    assert "choose a new --out directory" in out.stderr
    other = venus("datagen", "--preset", "eval", "--seed", "1", "--out", smoke)
    assert other.returncode == 1
    assert "made with another config (duration.max_s = 16.0 there, 40.0 now" in other.stderr
    assert "resume it with --config" in other.stderr
    assert tree(smoke) == before


def test_trajectories_follow_the_copied_schema(smoke: Path) -> None:
    schema = json.loads((smoke / "schema" / "trajectory.schema.json").read_text())
    validator = Draft202012Validator(schema)
    for line in (smoke / "index.jsonl").read_text().splitlines():
        record = json.loads(line)
        validator.validate(json.loads((smoke / record["path"]).read_text()))


def test_smoke_covers_its_mix(smoke: Path) -> None:
    records = [json.loads(line) for line in (smoke / "index.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    mix = preset("smoke").mix
    for key, ratios in (("group", mix.group.ratios()), ("category", mix.category.ratios())):
        for name, ratio in ratios.items():
            count = sum(r[key] == name for r in records)
            assert count >= 1 and abs(count - ratio * len(records)) < 1.5, (key, name, count)


def test_every_overlap_window_matches_the_audio(smoke: Path) -> None:
    folders = sorted(p.parent for p in (smoke / "full_duplex_bench").glob("*/*/metadata.json"))
    events = sum(
        sum(json.loads(line)["events"].values())
        for line in (smoke / "index.jsonl").read_text().splitlines()
    )
    assert len(folders) == events > 0
    for folder in folders:
        assert folder.parent.name in TASKS.values()
        check_window(folder)


def test_the_mix_of_a_larger_set(tmp_path: Path) -> None:
    """100 short samples: the written index against the eval preset's mix ratios."""
    config = tmp_path / "short.toml"
    config.write_text(
        "samples = 100\n[duration]\nmin_s = 6.0\nmax_s = 10.0\n"
        "[output]\ntimeline_plots = 0\nfull_duplex_bench = false\n"
    )
    out = venus("datagen", "--config", config, "--seed", "1", "--jobs", "2",
                "--out", tmp_path / "set")  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (tmp_path / "set" / "index.jsonl").open()]
    assert len(records) == 100
    mix = preset("eval").mix
    for key, ratios in (("group", mix.group.ratios()), ("category", mix.category.ratios())):
        for name, ratio in ratios.items():
            achieved = sum(r[key] == name for r in records) / len(records)
            assert abs(achieved - ratio) <= 0.03, (key, name, achieved)
    report = json.loads((tmp_path / "set" / "report.json").read_text())
    assert report["mix"]["category"]["delegation"]["configured"] == 0.07
    assert report["samples"] == 100


def test_set_changes_one_key_and_the_set_records_it(tmp_path: Path) -> None:
    first = tmp_path / "first"
    out = venus("datagen", "--preset", "smoke", "--seed", "1", "--samples", "2", "--out", first,
                "--set", "events.reply_outlasts_s=2.0",
                "--set", "speech.assistant_voice=flite:kal16")  # fmt: skip
    assert out.returncode == 0, out.stderr
    written = (first / "config.toml").read_text()
    assert "reply_outlasts_s = 2.0" in written and 'assistant_voice = "flite:kal16"' in written
    assert "samples = 2" in written
    again = venus("datagen", "--config", first / "config.toml", "--seed", "1", "--out",
                  tmp_path / "again")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert tree(tmp_path / "again") == tree(first)  # the recorded config is the whole story
    plain = venus("datagen", "--preset", "smoke", "--seed", "1", "--samples", "2", "--out", first)
    assert plain.returncode == 1  # without the --set it is another config
    assert "reply_outlasts_s = 2.0 there, 0.0 now" in plain.stderr


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("events.reply_outlast=2", "events.reply_outlast: unknown key; did you mean "
                                   "reply_outlasts_s?"),
        ("event.reply_outlasts_s=2", "event: not a section; did you mean events?"),
        ("events.reply_outlasts_s", "expected KEY=VALUE, e.g. events.reply_outlasts_s=2.0"),
        ("events.reply_outlasts_s=9", "events.reply_outlasts_s: input should be less than or "
                                      "equal to 5"),
        ("speech.formant=[0.9", "speech.formant: "),
    ],
)  # fmt: skip
def test_set_names_what_is_wrong(item: str, said: str, tmp_path: Path) -> None:
    out = venus("datagen", "--preset", "smoke", "--set", item, "--out", tmp_path / "set")
    assert out.returncode == 1
    assert said in out.stderr, out.stderr
    assert not (tmp_path / "set").exists()
