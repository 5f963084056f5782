"""Speech units on real speech (flite's kal16 voice): the output mel's framing and bands, a
deterministic codebook that reconstructs held-out speech far better than the mean, its
file round trip and errors, and the per-chunk codes the speech decoder will learn."""

from __future__ import annotations

import json
import shutil
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from venus.engines.mel import hz_to_mel, mel_to_hz
from venus.train.data import TrainDataError, read_index
from venus.train.speech_units import (
    HOP,
    LOG_FLOOR,
    SAMPLE_RATE,
    SILENCE,
    Codebook,
    chunk_units,
    fit_units,
    kmeans,
    output_mel,
    read_speech,
    speech_frames,
)

K = 64  # small set, small codebook
TRAIN_TEXTS = [
    "Octopuses are remarkably clever animals with three hearts and blue blood.",
    "Bees collect nectar from flowers and carry it back to the hive.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The moon takes about twenty seven days to travel around the earth.",
    "Some birds fly thousands of miles south every winter to find food.",
    "A good cup of tea needs fresh water that has only just boiled.",
    "Light from the sun reaches us in a little over eight minutes.",
    "Elephants can recognise themselves in a mirror, like people do.",
    "The library opens at nine in the morning and closes at six.",
    "Please remember to water the plants on the kitchen window.",
    "Trains leave the central station every fifteen minutes today.",
    "My favourite season is autumn, when the leaves turn red and gold.",
]
HELD_OUT_TEXTS = [
    "Whales sing long songs that travel for miles under the ocean.",
    "Tomorrow will be cloudy with a chance of rain in the afternoon.",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def say(text: str, folder: Path) -> NDArray[np.int16]:
    if shutil.which("flite") is None:
        pytest.skip("flite is not installed (apt install flite)")
    path = folder / "say.wav"
    subprocess.run(["flite", "-voice", "kal16", "-t", text, "-o", str(path)], check=True,
                   timeout=30)  # fmt: skip
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def write_wav(path: Path, pcm: NDArray[np.int16], rate: int = 16000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


def assistant_track(texts: list[str], folder: Path, lead_s: float = 0.5) -> NDArray[np.int16]:
    """Sentences with digital silence around them, as the assistant track has."""
    gap = np.zeros(int(lead_s * 16000), np.int16)
    parts = [gap]
    for text in texts:
        parts += [say(text, folder), gap]
    return np.concatenate(parts)


def make_set(root: Path, texts: list[str], per_sample: int = 2) -> Path:
    """A folder shaped like a `venus datagen` set: index.jsonl, samples/<id>/assistant.wav."""
    root.mkdir(parents=True)
    records = []
    for n in range(0, len(texts), per_sample):
        sid = f"0-{n:06d}"
        write_wav(root / "samples" / sid / "assistant.wav",
                  assistant_track(texts[n : n + per_sample], root))  # fmt: skip
        records.append({"sample_id": sid, "index": n, "category": "speech"})
    (root / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


@pytest.fixture(scope="module")
def speech_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_set(tmp_path_factory.mktemp("units") / "set", TRAIN_TEXTS)


@pytest.fixture(scope="module")
def codebook(speech_set: Path) -> Codebook:
    _, book = fit_units(speech_set, read_index(speech_set), K, iterations=15, seed=0)
    return book


@pytest.fixture(scope="module")
def held_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("held_out")
    return write_wav(folder / "assistant.wav", assistant_track(HELD_OUT_TEXTS, folder))


@pytest.mark.parametrize("samples, frames", [(0, 0), (479, 0), (24000, 50), (24479, 50),
                                             (24480, 51)])  # fmt: skip
def test_one_frame_per_hop(samples: int, frames: int) -> None:
    assert output_mel(np.zeros(samples, np.float32)).shape == (80, frames)


@pytest.mark.parametrize("at", [12345, 480 * 30 + 1, 480 * 30 + 479, 480 * 7 + 240])
def test_a_click_lands_in_the_frame_of_its_hop(at: int) -> None:
    pcm = np.zeros(SAMPLE_RATE, np.float32)
    pcm[at] = 0.5
    mel = output_mel(pcm)
    assert int(np.argmax(np.exp(mel).sum(axis=0))) == at // HOP  # frame i: [20i, 20i+20) ms
    far = np.abs(np.arange(mel.shape[1]) - at // HOP) > 2  # beyond its 40 ms window
    assert np.all(mel[:, far] == np.float32(np.log(LOG_FLOOR)))


@pytest.mark.parametrize("hz", [440.0, 1000.0, 3000.0, 7000.0])
def test_a_tone_peaks_in_its_band_of_80_up_to_8_khz(hz: float) -> None:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    mel = output_mel((0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32))
    centres = mel_to_hz(np.linspace(0.0, hz_to_mel(np.array([8000.0]))[0], 82))[1:-1]
    assert int(np.argmax(mel[:, 25])) == int(np.argmin(np.abs(centres - hz)))


def test_the_speech_floor_separates_speech_from_the_silence_between(tmp_path: Path) -> None:
    pcm = read_speech(write_wav(tmp_path / "a.wav", assistant_track(TRAIN_TEXTS[:1], tmp_path)))
    active = speech_frames(pcm)
    assert len(pcm) == pytest.approx(1.5 * len(assistant_track(TRAIN_TEXTS[:1], tmp_path)), abs=1)
    assert not active[:20].any() and not active[-20:].any()  # the 0.5 s gaps
    assert active.mean() > 0.5 * (len(active) - 50) / len(active)  # most of the sentence


def test_kmeans_reseeds_an_empty_cluster_with_the_worst_fitting_row() -> None:
    far = 10.0 * torch.eye(4)
    x = torch.cat([torch.zeros(200, 4), far])  # the first draw is almost surely all zeros
    centroids = kmeans(x, 5, iterations=10, seed=0)
    rows = sorted(tuple(r) for r in centroids.tolist())
    assert rows == sorted(tuple(r) for r in torch.cat([torch.zeros(1, 4), far]).tolist())


def test_the_fit_is_deterministic_and_seeded(speech_set: Path, codebook: Codebook) -> None:
    records = read_index(speech_set)
    seen: list[tuple[int, int]] = []
    stats, again = fit_units(speech_set, records, K, iterations=15, seed=0,
                             progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert seen == [(n, len(records)) for n in range(1, len(records) + 1)]
    assert again.stats is stats and again.size == K
    assert np.array_equal(again.centroids, codebook.centroids)
    _, other = fit_units(speech_set, records, K, iterations=15, seed=1)
    assert not np.array_equal(other.centroids, codebook.centroids)


def test_codes_reconstruct_held_out_speech_far_better_than_the_mean(
    codebook: Codebook, held_out: Path
) -> None:
    pcm = read_speech(held_out)
    mel = output_mel(pcm)[:, : len(pcm) // HOP // 2 * 2]
    speech = speech_frames(pcm)[: mel.shape[1]]
    z = codebook.stats.normalise(mel)[:, speech]
    z_hat = codebook.stats.normalise(codebook.decode(codebook.encode(mel)))[:, speech]
    error = float(np.mean((z - z_hat) ** 2))
    baseline = float(np.mean(z**2))  # predicting each bin's mean
    assert error < 0.3 * baseline, (error, baseline)
    assert len(set(codebook.encode(mel).tolist())) > K // 4  # many codes in use


def test_digital_silence_is_its_own_code(codebook: Codebook) -> None:
    mel = output_mel(np.zeros(4800, np.float32))
    assert codebook.encode(mel).tolist() == [SILENCE] * 5
    assert np.allclose(codebook.decode(np.array([SILENCE])), np.log(LOG_FLOOR), atol=1e-4)


def test_a_saved_codebook_loads_to_the_same_codes(
    codebook: Codebook, held_out: Path, tmp_path: Path
) -> None:
    codebook.save(tmp_path / "units.safetensors")
    loaded = Codebook.load(tmp_path / "units.safetensors")
    mel = output_mel(read_speech(held_out))[:, :400]
    assert np.array_equal(loaded.encode(mel), codebook.encode(mel))
    assert np.array_equal(loaded.decode(loaded.encode(mel)), codebook.decode(codebook.encode(mel)))


def test_a_corrupt_codebook_file_is_named(codebook: Codebook, tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    good = tmp_path / "units.safetensors"
    codebook.save(good)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-100])
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a codebook at all")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"weight": np.zeros((2, 2), np.float32)}, str(foreign))
    wrong_shape = tmp_path / "shape.safetensors"
    tensors = {"centroids": np.zeros((4, 80), np.float32), "mean": codebook.stats.mean,
               "std": codebook.stats.std}  # fmt: skip
    save_file(tensors, str(wrong_shape), metadata={"format": "venus-speech-units", "version": "1"})
    for path in (truncated, garbage, foreign, wrong_shape, tmp_path / "missing.safetensors"):
        with pytest.raises(TrainDataError, match=path.name):
            Codebook.load(path)


def test_chunk_units_gives_25_codes_a_second_of_each_chunk(
    codebook: Codebook, tmp_path: Path
) -> None:
    speech = say(HELD_OUT_TEXTS[0], tmp_path)
    track = np.concatenate([np.zeros(32000, np.int16), speech])  # speech from 2.0 s
    wav = write_wav(tmp_path / "assistant.wav", track)
    seconds = len(track) / 16000
    chunks = int(seconds) + 3  # past the file's end
    units = chunk_units(wav, chunks, 1.0, codebook)
    assert units.shape == (chunks, 25) and units.dtype == np.int64
    assert np.all(units[:2] == SILENCE)  # chunks 0 and 1 are before the speech
    assert np.all(units[int(seconds) + 1 :] == SILENCE)  # past the end
    assert len(set(units[2].tolist())) > 5  # chunk 2 is speech
    assert np.array_equal(chunk_units(wav, chunks, 2.0, codebook).reshape(-1),
                          chunk_units(wav, 2 * chunks, 1.0, codebook).reshape(-1))  # fmt: skip
    with pytest.raises(ValueError, match="40 ms"):
        chunk_units(wav, chunks, 0.03, codebook)


def test_too_little_speech_for_the_codebook_is_refused(speech_set: Path) -> None:
    with pytest.raises(TrainDataError, match="fewer than the 4096 codes"):
        fit_units(speech_set, read_index(speech_set)[:1], 4096)
    with pytest.raises(ValueError, match="k 7000"):
        fit_units(speech_set, read_index(speech_set), 7000)
