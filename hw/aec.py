"""Echo cancellation: keep the assistant from hearing itself in full duplex.

The microphone picks up what the speaker plays. Each strategy below takes a microphone
block and the reference block that was played at the same time (both float32 mono at
the model rate, 16 kHz by default, aligned by the speaker's playback position) and
returns the block the frontend should hear. ``audio.echo_cancellation`` picks one:

- ``auto``: :class:`SpeexEchoCanceller` when libspeexdsp loads, otherwise
  :class:`SuppressingCanceller` with a WARNING naming the package to install.
- ``headset``: :class:`PassThrough`; there is no acoustic path from speaker to mic.
- ``suppress``: :class:`SuppressingCanceller`; audio passes unchanged, and
  ``ignore_onsets`` tells the frontend to ignore user speech onsets while the
  assistant's playback (or its echo tail) is in the block. Barge-in is lost.
- ``off``: :class:`PassThrough`; nothing at all (a loopback test, a muted speaker).

Why libspeexdsp (Xiph's MDF adaptive filter, BSD-3-Clause, Debian/Ubuntu
``libspeexdsp1`` on x86_64 and aarch64, already pulled in by PulseAudio and the ALSA
plugins), bound here with ctypes: it is a linear canceller, so near-end speech passes
unchanged during double talk (the user can barge in while the assistant speaks), the
filter tail is configurable, it costs about 5 ms of CPU per second of audio, and it
adds no Python dependency. WebRTC's AEC3 (``livekit.rtc.AudioProcessingModule``)
removes far more echo (62-68 dB against 25-29 dB on the same null-sink loop) but cut
the user's speech by 9-12 dB in double talk, delays the output by about 8 ms, has no
tail setting and brings an 11 MB Rust runtime with its own threads; see
docs/architecture.md, "Echo cancellation". What a linear filter leaves (loudspeaker
distortion, clock drift) is the case for combining with ``suppress`` later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import weakref
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from venus.errors import DeviceError

log = logging.getLogger(__name__)

EchoMode = Literal["auto", "off", "headset", "suppress"]
Float32Array = NDArray[np.float32]

FRAME_S = 0.010  # the canceller works on 10 ms frames (160 samples at 16 kHz)
DEFAULT_TAIL_MS = 200  # echo path length the filter covers: delay + room reverberation
PLAYBACK_FLOOR = 10 ** (-60 / 20)  # reference peak above -60 dBFS counts as playing
SPEEXDSP_LIBRARY = "libspeexdsp.so.1"
INSTALL_HINT = "install libspeexdsp (Debian/Ubuntu: sudo apt-get install libspeexdsp1)"
_SPEEX_ECHO_SET_SAMPLING_RATE = 24  # speex/speex_echo.h


class EchoCanceller(Protocol):
    """One streaming echo-cancellation state; ``reset`` on barge-in or device reopen."""

    @property
    def strategy(self) -> str:
        """What runs: ``speexdsp``, ``suppress``, ``headset`` or ``off`` (for logs)."""
        ...

    @property
    def ignore_onsets(self) -> bool:
        """True when the frontend should ignore user speech onsets in the last block."""
        ...

    def process(self, mic: Float32Array, reference: Float32Array) -> Float32Array:
        """The microphone block with the echo of ``reference`` removed (same length)."""
        ...

    def reset(self) -> None:
        """Forget the learnt echo path and any playback state."""
        ...


def frame_samples(sample_rate: int) -> int:
    """Samples in one 10 ms frame; ``sample_rate`` in Hz must be a multiple of 100."""
    if sample_rate <= 0 or sample_rate % 100:
        raise ValueError(f"sample_rate must be a positive multiple of 100 Hz, not {sample_rate}")
    return sample_rate // 100


def _check_blocks(mic: Float32Array, reference: Float32Array, frame: int) -> None:
    if mic.ndim != 1 or reference.ndim != 1:
        raise ValueError(f"mic and reference must be mono (1-D), not {mic.shape} {reference.shape}")
    if len(mic) != len(reference):
        raise ValueError(f"mic ({len(mic)}) and reference ({len(reference)}) lengths differ")
    if len(mic) % frame:
        raise ValueError(f"block of {len(mic)} samples is not a multiple of {frame} (10 ms)")


class PassThrough:
    """``off`` and ``headset``: the microphone block unchanged."""

    def __init__(self, strategy: Literal["off", "headset"], sample_rate: int = 16000) -> None:
        self._strategy = strategy
        self._frame = frame_samples(sample_rate)

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def ignore_onsets(self) -> bool:
        return False

    def process(self, mic: Float32Array, reference: Float32Array) -> Float32Array:
        _check_blocks(mic, reference, self._frame)
        return np.asarray(mic, dtype=np.float32)

    def reset(self) -> None:
        pass


class SuppressingCanceller:
    """``suppress``: audio unchanged; ``ignore_onsets`` while playback or its tail is heard.

    ``tail_ms`` is how long after the last played sample above -60 dBFS the echo may
    still be in the microphone.
    """

    def __init__(self, sample_rate: int = 16000, tail_ms: int = DEFAULT_TAIL_MS) -> None:
        self._frame = frame_samples(sample_rate)
        self._tail = sample_rate * tail_ms // 1000
        self._left = 0  # samples of echo tail still to come after the last block

    @property
    def strategy(self) -> str:
        return "suppress"

    @property
    def ignore_onsets(self) -> bool:
        return self._left > 0

    def process(self, mic: Float32Array, reference: Float32Array) -> Float32Array:
        _check_blocks(mic, reference, self._frame)
        playing = np.flatnonzero(np.abs(reference) > PLAYBACK_FLOOR)
        if len(playing):  # the tail runs from the last played sample
            self._left = max(0, self._tail - (len(reference) - 1 - int(playing[-1])))
        else:
            self._left = max(0, self._left - len(reference))
        return np.asarray(mic, dtype=np.float32)

    def reset(self) -> None:
        self._left = 0


def load_speexdsp(library: str | None = None) -> tuple[ctypes.CDLL, str]:
    """libspeexdsp with the echo functions typed, and the path it was loaded from.

    ``library`` is a file name or path (default: the soname, then the linker's search).
    Raises ``DeviceError`` naming the package to install when it cannot be loaded.
    """
    names = [library] if library else [SPEEXDSP_LIBRARY, ctypes.util.find_library("speexdsp")]
    errors: list[str] = []
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise DeviceError(f"libspeexdsp not found ({'; '.join(errors)}); {INSTALL_HINT}")
    ptr, i16 = ctypes.c_void_p, ctypes.c_void_p  # int16 buffers passed as addresses
    lib.speex_echo_state_init.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.speex_echo_state_init.restype = ptr
    lib.speex_echo_ctl.argtypes = [ptr, ctypes.c_int, ptr]
    lib.speex_echo_ctl.restype = ctypes.c_int
    lib.speex_echo_cancellation.argtypes = [ptr, i16, i16, i16]
    lib.speex_echo_cancellation.restype = None
    lib.speex_echo_state_reset.argtypes = [ptr]
    lib.speex_echo_state_reset.restype = None
    lib.speex_echo_state_destroy.argtypes = [ptr]
    lib.speex_echo_state_destroy.restype = None
    return lib, name


def _to_int16(x: Float32Array) -> NDArray[np.int16]:
    return np.ascontiguousarray(np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16))


class SpeexEchoCanceller:
    """libspeexdsp's adaptive echo canceller on 10 ms frames, ``tail_ms`` filter length.

    Blocks are any multiple of 10 ms; processing adds no delay. It converges within about
    a second of playback and follows slow changes of the echo path.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        tail_ms: int = DEFAULT_TAIL_MS,
        library: str | None = None,
    ) -> None:
        if tail_ms < 10:
            raise ValueError(f"tail_ms must be at least 10, not {tail_ms}")
        self._frame = frame_samples(sample_rate)
        self._lib, self.library = load_speexdsp(library)
        self._rate, self._taps = sample_rate, sample_rate * tail_ms // 1000
        self._state, self._finalizer = self._open()
        log.debug(
            "speexdsp echo canceller: %d Hz, %d ms tail, %s",
            sample_rate,
            tail_ms,
            self.library,
        )

    @property
    def strategy(self) -> str:
        return "speexdsp"

    @property
    def ignore_onsets(self) -> bool:
        return False

    def process(self, mic: Float32Array, reference: Float32Array) -> Float32Array:
        _check_blocks(mic, reference, self._frame)
        rec, play = _to_int16(mic), _to_int16(reference)
        out = np.empty_like(rec)
        step = self._frame * rec.itemsize
        r, p, o = rec.ctypes.data, play.ctypes.data, out.ctypes.data
        for k in range(len(rec) // self._frame):
            off = k * step
            self._lib.speex_echo_cancellation(self._state, r + off, p + off, o + off)
        cleaned: Float32Array = out.astype(np.float32) / np.float32(32768.0)
        return cleaned

    def reset(self) -> None:
        # A new state: speex_echo_state_reset leaves some adaptation state behind, and a
        # reset canceller must behave exactly like a fresh one.
        self._finalizer()
        self._state, self._finalizer = self._open()

    def _open(self) -> tuple[int, weakref.finalize[[int], SpeexEchoCanceller]]:
        state = self._lib.speex_echo_state_init(self._frame, self._taps)
        if not state:
            raise DeviceError("speex_echo_state_init failed; check sample_rate and tail_ms")
        rate = ctypes.c_int(self._rate)
        self._lib.speex_echo_ctl(state, _SPEEX_ECHO_SET_SAMPLING_RATE, ctypes.addressof(rate))
        return state, weakref.finalize(self, self._lib.speex_echo_state_destroy, state)


def make_echo_canceller(
    mode: EchoMode,
    sample_rate: int = 16000,
    *,
    tail_ms: int = DEFAULT_TAIL_MS,
    library: str | None = None,
) -> EchoCanceller:
    """The strategy for ``audio.echo_cancellation``; ``auto`` falls back to ``suppress``.

    ``library`` overrides where libspeexdsp is loaded from (a file name or path).
    """
    match mode:
        case "off" | "headset":
            return PassThrough(mode, sample_rate)
        case "suppress":
            return SuppressingCanceller(sample_rate, tail_ms)
        case "auto":
            pass
        case _:
            raise ValueError(f"unknown echo cancellation mode {mode!r}")
    try:
        return SpeexEchoCanceller(sample_rate, tail_ms, library)
    except DeviceError as e:
        log.warning(
            "echo cancellation: %s; falling back to 'suppress' (user speech is ignored "
            "while the assistant speaks)",
            e,
        )
        return SuppressingCanceller(sample_rate, tail_ms)
