"""A KV cache bound to a session with IO binding: preallocated, double-buffered, no copies out.

Per layer there are two flat buffers for the keys and two for the values, each of
``batch * kv_heads * capacity * head_dim`` elements. A step binds ``past_key_values.{i}.*``
to the first ``batch * kv_heads * length * head_dim`` elements of the *current* buffer
(viewed as ``[batch, kv_heads, length, head_dim]``) and ``present.{i}.*`` to the same
prefix of the *spare* buffer, sized for ``length + new`` tokens. The graph writes the
present straight into the spare buffer; ``commit`` then swaps the two. Nothing is
allocated per step and the keys never leave the device.

CPU buffers are numpy arrays (pointers from ``.ctypes.data``); CUDA buffers are OrtValues
allocated once on the session's device (``.data_ptr()``). Binding is the same code for
both: only the device type and pointers differ.

``keep(first, last, shift_keys)`` evicts the middle of a long stream: it compacts the
first ``first`` and the last ``last`` tokens of every layer into the spare buffers and
swaps, like a step. ``shift_keys``, if given, maps the kept last keys of each layer on
their way (the backbone re-rotates them to earlier positions: see ``backbone``); values
and the first tokens are copied as they are. On the CPU that is slice copies between the
preallocated arrays (plus what ``shift_keys`` allocates); on CUDA each buffer makes a
round trip through host memory (ONNX Runtime's Python API cannot slice device memory),
which is acceptable because eviction is rare (once per many chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from venus.engines.manifest import ComponentEntry
from venus.engines.session import Session
from venus.errors import EngineError

PAST = "past_key_values.{}.{}"
PRESENT = "present.{}.{}"
KINDS = ("key", "value")

# Kept keys [batch, kv_heads, tokens, head_dim] -> the keys to store (same shape and dtype).
KeyShift = Callable[[NDArray[Any]], NDArray[Any]]


@dataclass(frozen=True)
class Buffer:
    """One flat device buffer: its address, and the object that owns the memory."""

    ptr: int
    host: NDArray[Any] | None  # CPU: the numpy array itself
    device: Any  # CUDA: the OrtValue (kept alive for as long as the cache)


def allocate(session: Session, dtype: np.dtype[Any], count: int) -> Buffer:
    """``count`` elements of ``dtype`` on the session's device."""
    if session.device.type == "cpu":
        host = np.zeros(count, dtype=dtype)
        return Buffer(ptr=host.ctypes.data, host=host, device=None)
    value = ort.OrtValue.ortvalue_from_shape_and_type(
        [count], dtype.type, session.device.type, session.device.id
    )
    return Buffer(ptr=value.data_ptr(), host=None, device=value)


class KVCache:
    """Keys and values of one stream for one KV-cached graph, with its own IO binding."""

    def __init__(
        self,
        session: Session,
        layers: int,
        kv_heads: int,
        head_dim: int,
        batch: int,
        capacity: int,
    ) -> None:
        if capacity < 1 or batch < 1:
            raise EngineError(f"{session.name}: KV cache capacity and batch must be >= 1")
        self.session = session
        self.binding: Any = session.ort.io_binding()
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.batch, self.capacity = batch, capacity
        self.dtype = session.dtype(PAST.format(0, "key"))
        count = batch * kv_heads * capacity * head_dim
        # [slot][layer * 2 + kind]: slot `self.current` holds the cache, the other is spare.
        self.buffers = [
            [allocate(session, self.dtype, count) for _ in range(2 * layers)] for _ in range(2)
        ]
        self.current = 0
        self.length = 0  # tokens held

    def shape(self, tokens: int) -> list[int]:
        """[batch, kv_heads, tokens, head_dim]"""
        return [self.batch, self.kv_heads, tokens, self.head_dim]

    def bind(self, new_tokens: int) -> None:
        """Bind past (current buffers) and present (spare buffers) for ``new_tokens`` more."""
        total = self.length + new_tokens
        if total > self.capacity:
            raise EngineError(
                f"{self.session.name}: KV cache full ({self.length} tokens held + "
                f"{new_tokens} new > capacity {self.capacity}); evict old chunks or reset "
                "the stream, or open it with a larger max_tokens"
            )
        dev, elem = self.session.device, self.dtype.type
        past, spare = self.buffers[self.current], self.buffers[1 - self.current]
        for i in range(self.layers):
            for k, kind in enumerate(KINDS):
                j = 2 * i + k
                self.binding.bind_input(
                    PAST.format(i, kind),
                    dev.type,
                    dev.id,
                    elem,
                    self.shape(self.length),
                    past[j].ptr,
                )
                self.binding.bind_output(
                    PRESENT.format(i, kind),
                    dev.type,
                    dev.id,
                    elem,
                    self.shape(total),
                    spare[j].ptr,
                )

    def commit(self, new_tokens: int) -> None:
        """After a successful run: the spare buffers hold the cache now."""
        self.current = 1 - self.current
        self.length += new_tokens

    def reset(self) -> None:
        """Forget every token (the buffers stay allocated)."""
        self.length = 0

    def keep(self, first: int, last: int, shift_keys: KeyShift | None = None) -> int:
        """Keep the first ``first`` and the last ``last`` tokens of every layer, drop the
        middle; -> the number of tokens dropped (0 when ``first + last`` covers them all,
        and then nothing changes). ``shift_keys`` maps every layer's kept last keys
        [batch, kv_heads, last, head_dim] (a read-only view: return a new array of the
        same shape) before they are stored; values and the first tokens are not touched."""
        if first < 0 or last < 0:
            raise EngineError(f"KV cache keep({first}, {last}): counts must be >= 0")
        held = self.length
        kept = first + last
        if kept >= held:
            return 0
        current, spare = self.buffers[self.current], self.buffers[1 - self.current]
        for j, (src, dst) in enumerate(zip(current, spare, strict=True)):
            shift = shift_keys if KINDS[j % 2] == "key" else None
            if src.host is not None and dst.host is not None:
                self._compact(src.host, dst.host, first, last, shift)
            else:  # CUDA: through the host (see the module docstring)
                host = src.device.numpy()
                out = np.zeros_like(host)
                self._compact(host, out, first, last, shift)
                dst.device.update_inplace(out)
        self.current = 1 - self.current
        self.length = kept
        return held - kept

    def _compact(
        self,
        src: NDArray[Any],
        dst: NDArray[Any],
        first: int,
        last: int,
        shift: KeyShift | None,
    ) -> None:
        """dst[..., :first + last, :] = src's first ``first`` then last ``last`` tokens,
        the last ones through ``shift`` if given."""
        held, kept = self.length, first + last
        a = src[: self.batch * self.kv_heads * held * self.head_dim].reshape(self.shape(held))
        b = dst[: self.batch * self.kv_heads * kept * self.head_dim].reshape(self.shape(kept))
        b[:, :, :first] = a[:, :, :first]
        recent = a[:, :, held - last :]
        if shift is None or last == 0:
            b[:, :, first:] = recent
            return
        recent.flags.writeable = False
        shifted = shift(recent)
        if shifted.shape != recent.shape:
            raise EngineError(
                f"{self.session.name}: KV cache keep: shift_keys returned shape "
                f"{shifted.shape} for keys of shape {recent.shape}"
            )
        b[:, :, first:] = shifted

    def data_ptrs(self) -> tuple[int, ...]:
        """Addresses of every buffer (they never change while the cache lives)."""
        return tuple(b.ptr for slot in self.buffers for b in slot)

    def layer(self, i: int) -> tuple[NDArray[Any], NDArray[Any]]:
        """Layer ``i``'s keys and values [batch, kv_heads, length, head_dim] (host copies)."""
        n = self.batch * self.kv_heads * self.length * self.head_dim
        out = []
        for b in self.buffers[self.current][2 * i : 2 * i + 2]:
            flat = b.host if b.host is not None else b.device.numpy()
            out.append(flat[:n].reshape(self.shape(self.length)).copy())
        return out[0], out[1]


def open_kv_cache(session: Session, entry: ComponentEntry, batch: int, capacity: int) -> KVCache:
    """A KV cache shaped by the manifest entry's ``layers``, ``kv_heads`` and ``head_dim``."""
    if entry.layers is None or entry.kv_heads is None or entry.head_dim is None:
        raise EngineError(
            f"{session.path}: the manifest gives no KV-cache layout (layers, kv_heads, "
            f"head_dim) for {session.name}; re-run `venus export`"
        )
    return KVCache(session, entry.layers, entry.kv_heads, entry.head_dim, batch, capacity)


def run_cached(
    session: Session,
    kv: KVCache,
    feeds: Mapping[str, NDArray[Any]],
    outputs: Mapping[str, tuple[int, ...]],
    new_tokens: int,
) -> dict[str, NDArray[Any]]:
    """One run of a KV-cached graph: numpy ``feeds`` in, ``outputs`` (name -> shape) out.

    The outputs are numpy arrays the graph writes into (copied from the device when the
    session runs on a GPU); the KV cache grows by ``new_tokens`` only if the run succeeds.
    """
    b = kv.binding
    for name, value in feeds.items():
        b.bind_cpu_input(name, session.feed(name, value))
    result: dict[str, NDArray[Any]] = {}
    for name, shape in outputs.items():
        arr = np.empty(shape, dtype=session.dtype(name))
        b.bind_output(name, "cpu", 0, arr.dtype.type, list(shape), arr.ctypes.data)
        result[name] = arr
    kv.bind(new_tokens)
    session.run_binding(b)
    kv.commit(new_tokens)
    return result
