"""`venus bench estimate`: floor arithmetic on hand-made figures, the verdicts on real ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from venus.bench.devices import DEVICES, PRECISIONS, Device, Figure
from venus.bench.estimate import estimate, model_costs, stage_floor

VENUS = Path(sys.executable).with_name("venus")

# 100 GB/s, 10 TFLOPS fp16, 20 TOPS int8, 10 GB: round numbers with known answers.
TOY = Device(
    name="toy",
    title="hand-made",
    memory_bandwidth_gb_s=Figure(100.0, "test"),
    fp16_dense_tflops=Figure(10.0, "test"),
    int8_dense_tops=Figure(20.0, "test"),
    memory_gb=Figure(10.0, "test"),
)


def toy_costs() -> dict[str, object]:
    def bytes_at(fp16: float) -> dict[str, int]:
        return {"fp16": int(fp16), "int8": int(fp16 / 2), "int4": int(fp16 * 0.28)}

    return {
        "model": "toy",
        "chunk_s": 1.0,
        "components": {
            # 1 TFLOP (100 ms at fp16), 50 GB (500 ms): bandwidth-bound
            "backbone": {"chunk_flops": 10**12, "chunk_bytes_moved": bytes_at(50e9)},
            # 5 TFLOP (500 ms at fp16), 1 GB (10 ms): compute-bound
            "vocoder": {"chunk_flops": 5 * 10**12, "chunk_bytes_moved": bytes_at(1e9)},
        },
        "total": {"weight_bytes": bytes_at(12e9)},
    }


def test_stage_floor_takes_the_larger_bound() -> None:
    memory = stage_floor("a", 10**12, 50 * 10**9, 10e12, 100e9)
    assert memory.compute_ms == pytest.approx(100.0)
    assert memory.memory_ms == pytest.approx(500.0)
    assert (memory.floor_ms, memory.bound) == (pytest.approx(500.0), "memory")
    compute = stage_floor("b", 5 * 10**12, 10**9, 10e12, 100e9)
    assert (compute.floor_ms, compute.bound) == (pytest.approx(500.0), "compute")
    assert compute.memory_ms == pytest.approx(10.0)


def test_fp16_floor_equal_to_the_chunk_is_real_time_but_weights_do_not_fit() -> None:
    e = estimate(toy_costs(), TOY, PRECISIONS["fp16"])
    assert [(s.component, s.bound) for s in e.stages] == [
        ("backbone", "memory"),
        ("vocoder", "compute"),
    ]
    assert e.floor_ms == pytest.approx(1000.0)
    assert e.fits_chunk  # the sum may equal the chunk period
    assert e.headroom == pytest.approx(1.0)
    assert not e.weights_fit  # 12 GB of weights, 10 GB of memory
    assert e.verdict == "not real time: weights do not fit in memory"


def test_int8_uses_int8_throughput_and_int8_bytes() -> None:
    e = estimate(toy_costs(), TOY, PRECISIONS["int8"])
    backbone, vocoder = e.stages
    assert backbone.floor_ms == pytest.approx(250.0)  # 25 GB / 100 GB/s
    assert vocoder.floor_ms == pytest.approx(250.0)  # 5 TOP / 20 TOPS
    assert e.headroom == pytest.approx(2.0)
    assert e.verdict == "real time possible"


def test_int4_reads_int4_bytes_but_computes_at_fp16() -> None:
    e = estimate(toy_costs(), TOY, PRECISIONS["int4"])
    backbone, vocoder = e.stages
    assert backbone.floor_ms == pytest.approx(140.0)  # 14 GB / 100 GB/s
    assert vocoder.floor_ms == pytest.approx(500.0)  # fp16 rate, not int8
    assert e.peak_tops == 10.0


def test_a_floor_over_the_chunk_is_not_real_time() -> None:
    costs = toy_costs()
    costs["chunk_s"] = 0.5
    e = estimate(costs, TOY, PRECISIONS["fp16"])
    assert not e.fits_chunk
    assert e.headroom == pytest.approx(0.5)
    assert e.verdict.startswith("not real time: floor exceeds the chunk")


def test_venus_9b_fp16_on_orin_nano_is_not_real_time() -> None:
    e = estimate(model_costs("venus-9b"), DEVICES["orin-nano"], PRECISIONS["fp16"])
    assert e.floor_ms > e.chunk_ms  # the backbone's weight reads alone take ~0.93 s
    assert not e.weights_fit  # 18.8 GB of weights, 8 GB of memory
    assert not e.verdict.startswith("real time possible")


def test_venus_9b_int4_on_h200_is_real_time() -> None:
    e = estimate(model_costs("venus-9b"), DEVICES["h200"], PRECISIONS["int4"])
    assert e.floor_ms < e.chunk_ms / 10
    assert e.weights_fit
    assert e.verdict == "real time possible"


def test_every_device_figure_has_a_source() -> None:
    for d in DEVICES.values():
        for f in (d.memory_bandwidth_gb_s, d.fp16_dense_tflops, d.int8_dense_tops, d.memory_gb):
            assert f.value > 0 and f.source, d.name


def venus(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_cli_prints_a_table() -> None:
    args = ("--model", "venus-9b", "--device", "orin-nano", "--precision", "fp16")
    out = venus("bench", "estimate", *args)
    assert out.returncode == 0, out.stderr
    assert "| component | FLOPs |" in out.stdout
    assert "| backbone |" in out.stdout
    assert "verdict: not real time" in out.stdout


def test_cli_unknown_device_lists_the_valid_ones() -> None:
    out = venus("bench", "estimate", "--device", "orin-nx")
    assert out.returncode == 2
    assert "orin-nx" in out.stderr
    assert all(name in out.stderr for name in DEVICES)


def test_cli_json_parses() -> None:
    out = venus("bench", "estimate", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"] == "venus-9b"
    assert len(data["estimates"]) == len(DEVICES) * len(PRECISIONS)
    first = data["estimates"][0]
    assert {"floor_ms", "headroom", "weights_fit", "verdict", "stages"} <= first.keys()
    assert data["devices"]["h200"]["memory_bandwidth_gb_s"]["source"]


def _without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs the CLI with torch unimportable, as on a Jetson with only the daemon."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from venus.cli import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_presets_need_no_torch(tmp_path: Path) -> None:
    out = _without_torch(tmp_path, "bench", "estimate", "--device", "h200", "--precision", "int4")
    assert out.returncode == 0, out.stderr
    assert "verdict: real time possible" in out.stdout


def test_a_config_without_torch_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    out = _without_torch(tmp_path, "bench", "estimate", "--model", "config.json")
    assert out.returncode == 1
    assert "needs torch" in out.stderr
    assert "realtime-venus[export]" in out.stderr


def test_an_unknown_model_names_the_presets() -> None:
    out = venus("bench", "estimate", "--model", "no-such-model")
    assert out.returncode == 1
    assert "venus-9b" in out.stderr and "tiny" in out.stderr


def test_a_config_json_is_computed_live(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from venus.export.model.config import PRESETS, save_config

    save_config(PRESETS["tiny"](), tmp_path / "config.json")
    live = estimate(model_costs(str(tmp_path)), DEVICES["orin-nano"], PRECISIONS["int4"])
    shipped = estimate(model_costs("tiny"), DEVICES["orin-nano"], PRECISIONS["int4"])
    assert live == shipped
