"""`venus run --offline` serves /metrics while it runs: scraped as a user would, with
curl-like HTTP GETs from outside the process, the histograms fill chunk by chunk."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.resources import as_file, files
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.frontend import write_wav
from support.services import free_port

RUN_LIMIT_S = 120.0  # a bound on the test, not an expectation


def scrape(url: str) -> dict[str, float] | None:
    """Sample name (with its labels) -> value, or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def test_histograms_fill_while_an_offline_run_goes(tmp_path: Path) -> None:
    port = free_port()
    wav = write_wav(tmp_path / "in.wav", seconds=90)
    with as_file(files("venus.demo") / "engines" / "tiny") as engines:
        config = tmp_path / "venus.toml"
        config.write_text(
            f'[model]\nengines = "{engines}"\n[service]\nmetrics_address = "127.0.0.1:{port}"\n'
        )
        venus = Path(sys.executable).with_name("venus")
        command = [str(venus), "--config", str(config), "run", "--quiet"]
        command += ["--offline", str(wav), "--out", str(tmp_path / "out")]
        pipe = subprocess.PIPE
        proc = subprocess.Popen(command, stdout=pipe, stderr=subprocess.STDOUT, text=True)
        seen: list[dict[str, float]] = []
        end = time.monotonic() + RUN_LIMIT_S
        while proc.poll() is None and time.monotonic() < end:
            got = scrape(f"http://127.0.0.1:{port}/metrics")
            if got is not None:
                seen.append(got)
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    chunks = [s.get("venus_chunks_total{}", 0.0) for s in seen]
    totals = [s.get("venus_chunk_seconds_count{}", 0.0) for s in seen]
    mel = [s.get("venus_chunk_stage_seconds_count{stage=mel}", 0.0) for s in seen]
    assert len({c for c in chunks if c > 0}) >= 2, f"never saw the run progress: {chunks}"
    assert chunks == sorted(chunks) and totals == sorted(totals)
    assert max(totals) == max(mel) == max(chunks) <= 90
    last = seen[-1]
    decisions = sum(v for k, v in last.items() if k.startswith("venus_chunk_decisions_total{"))
    assert decisions == last["venus_chunks_total{}"]
    assert last["venus_chunk_seconds_sum{}"] > last["venus_chunk_stage_seconds_sum{stage=mel}"] > 0
