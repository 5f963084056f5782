"""The runner's mechanics with a stand-in sample function (real plans, tone audio):
order, determinism across --jobs, resume, refusals, progress. tests/datagen/test_cli.py
runs the real pipeline."""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from support import datagen_stub as stub

from venus.datagen import runner
from venus.datagen.cli import ProgressLine, with_samples
from venus.datagen.config import GenerationConfig, load_config, parse_config
from venus.datagen.runner import JOURNAL, OutputError
from venus.datagen.sample import SampleRecord
from venus.errors import DatagenError

SEED = 3
SAMPLES = 12


@pytest.fixture(scope="module")
def config() -> GenerationConfig:
    return parse_config({"samples": SAMPLES, "output": {"timeline_plots": 2}})


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, config: GenerationConfig) -> Path:
    out = tmp_path_factory.mktemp("reference") / "set"
    runner.run(config, out, SEED, sample_fn=stub.generate)
    return out


def test_writes_the_layout(reference: Path, config: GenerationConfig) -> None:
    files = tree(reference)
    lines = (reference / "index.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["index"] for r in records] == list(range(SAMPLES))
    for r in records:
        assert f"samples/{r['sample_id']}/trajectory.json" in files
        assert f"samples/{r['sample_id']}/input.wav" in files
    assert load_config(reference / "config.toml") == config
    assert json.loads((reference / "run.json").read_text())["seed"] == SEED
    assert {"report.json", "report.md", "schema/trajectory.schema.json"} <= files.keys()
    assert len([f for f in files if f.startswith("plots/")]) == 2
    assert any(f.startswith("full_duplex_bench/user_interruption/") for f in files)
    assert not any(f.startswith(".") or "/." in f for f in files)  # no journal, no staging


def test_stub_trajectories_follow_the_schema(reference: Path) -> None:
    schema = json.loads((reference / "schema" / "trajectory.schema.json").read_text())
    validator = Draft202012Validator(schema)
    for path in sorted(reference.glob("samples/*/trajectory.json")):
        validator.validate(json.loads(path.read_text()))


def test_same_seed_and_config_same_bytes(
    tmp_path: Path, config: GenerationConfig, reference: Path
) -> None:
    runner.run(config, tmp_path / "again", SEED, sample_fn=stub.generate)
    assert tree(tmp_path / "again") == tree(reference)


def test_jobs_2_equals_jobs_1(tmp_path: Path, config: GenerationConfig, reference: Path) -> None:
    result = runner.run(config, tmp_path / "j2", SEED, jobs=2, sample_fn=stub.generate)
    assert result.generated == SAMPLES
    assert tree(tmp_path / "j2") == tree(reference)


def test_an_interrupted_run_resumes_to_the_same_bytes(
    tmp_path: Path, config: GenerationConfig, reference: Path
) -> None:
    out = tmp_path / "cut"
    with pytest.raises(stub.StubFailure):
        runner.run(config, out, SEED, sample_fn=functools.partial(stub.generate, fail_at=5))
    assert (out / JOURNAL).exists() and not (out / "index.jsonl").exists()
    # what a kill leaves: a worker's half-written directory, a finished one not journalled
    (out / "samples" / ".tmp-3-000007-999").mkdir()
    (out / "samples" / ".tmp-3-000007-999" / "input.wav").write_bytes(b"half")
    stub.generate(config, 9, SEED, out)
    with (out / JOURNAL).open("a") as journal:
        journal.write('{"index": 6, "path": "sampl')  # a line cut short
    calls: list[int] = []

    def counting(c: GenerationConfig, index: int, seed: int, o: Path) -> SampleRecord:
        calls.append(index)
        return stub.generate(c, index, seed, o)

    result = runner.run(config, out, SEED, sample_fn=counting)
    assert calls == list(range(5, SAMPLES))
    assert (result.generated, result.resumed) == (SAMPLES - 5, 5)
    assert tree(out) == tree(reference)


def test_a_finished_set_is_kept_and_a_changed_sample_redone(
    tmp_path: Path, config: GenerationConfig
) -> None:
    out = tmp_path / "done"
    runner.run(config, out, SEED, sample_fn=stub.generate)
    before = tree(out)
    first = json.loads((out / "index.jsonl").read_text().splitlines()[4])
    (out / first["path"]).write_text("{}")
    calls: list[int] = []

    def counting(c: GenerationConfig, index: int, seed: int, o: Path) -> SampleRecord:
        calls.append(index)
        return stub.generate(c, index, seed, o)

    runner.run(config, out, SEED, sample_fn=counting)
    assert calls == [4]
    assert tree(out) == before


def test_resuming_with_another_seed_or_config_is_refused(
    tmp_path: Path, config: GenerationConfig, reference: Path
) -> None:
    with pytest.raises(OutputError, match=f"made with --seed {SEED}, not 4"):
        runner.run(config, reference, 4, sample_fn=stub.generate)
    other = with_samples(config, SAMPLES + 1)
    with pytest.raises(OutputError, match="samples = 12 there, 13 now"):
        runner.run(other, reference, SEED, sample_fn=stub.generate)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"not empty and has no run\.json"):
        runner.run(config, foreign, SEED, sample_fn=stub.generate)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_a_failing_sample_says_which_and_how_to_resume(
    tmp_path: Path, config: GenerationConfig
) -> None:
    def failing(c: GenerationConfig, index: int, seed: int, o: Path) -> SampleRecord:
        if index == 2:
            raise DatagenError("espeak-ng is not installed")
        return stub.generate(c, index, seed, o)

    with pytest.raises(OutputError, match="sample 2: espeak-ng is not installed") as e:
        runner.run(config, tmp_path / "f", SEED, sample_fn=failing)
    assert "run the same command again to resume" in str(e.value)


def test_progress_lines_without_a_terminal() -> None:
    now = [0.0]
    stream = io.StringIO()
    progress = ProgressLine(stream, clock=lambda: now[0], tty=False)
    progress.start(10, 2)
    for _ in range(8):
        now[0] += 1.0
        progress.advance()
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "datagen: 2/10 samples (20%)"
    assert lines[1] == "datagen: 7/10 samples (70%), 1.00 samples/s, ETA 3s"  # 5 s later
    assert lines[-1] == "datagen: 10/10 samples (100%), 1.00 samples/s, ETA 0s"
    assert len(lines) == 3


def test_progress_redraws_in_place_on_a_terminal() -> None:
    stream = io.StringIO()
    progress = ProgressLine(stream, clock=lambda: 0.0, tty=True)
    progress.start(2, 0)
    progress.advance()
    progress.advance()
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 4 and text.endswith("\n") and text.count("\n") == 1
