"""Devices ``venus bench estimate`` knows (memory bandwidth, dense tensor throughput,
memory) and the precisions it estimates (bytes per weight, which tensor-core rate computes).

Every number carries its source: the vendor document and the figure it gives. Vendors
quote INT8 / FP16 tensor throughput "with sparsity" (2:4 structured sparsity, twice the
dense rate); our weights are dense, so such figures are halved here and the source says
so. Where a figure is derived rather than printed in a datasheet, the source says that
too. Units are decimal: 1 GB/s = 1e9 bytes/s, 1 TFLOPS = 1e12 operations/s (a multiply-add
counts 2, as in the model's FLOP counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Figure:
    """One number of a device and where it comes from."""

    value: float
    source: str


@dataclass(frozen=True)
class Precision:
    """How weights are stored (bytes moved) and which tensor-core rate computes."""

    name: str  # key of model_info's weight_bytes / chunk_bytes_moved
    compute: Literal["fp16", "int8"]
    note: str


PRECISIONS = {
    "fp16": Precision("fp16", "fp16", "fp16 weights, fp16 tensor-core compute"),
    "int8": Precision(
        "int8", "int8", "int8 weights and activations (W8A8), int8 tensor-core compute"
    ),
    "int4": Precision(
        "int4",
        "fp16",
        "int4 weight-only (0.5 byte a weight + one fp16 scale per 32): bytes at int4, "
        "weights dequantised to fp16, fp16 tensor-core compute",
    ),
}


@dataclass(frozen=True)
class Device:
    name: str  # the --device key
    title: str  # what it is, and the power mode the figures hold for
    memory_bandwidth_gb_s: Figure
    fp16_dense_tflops: Figure  # tensor cores, dense; also the int4 weight-only rate
    int8_dense_tops: Figure  # tensor cores, dense
    memory_gb: Figure  # what holds the weights (shared with the CPU on a Jetson)

    def peak_tops(self, precision: Precision) -> float:
        """Dense tensor throughput that computes ``precision``, in 1e12 operations/s."""
        if precision.compute == "int8":
            return self.int8_dense_tops.value
        return self.fp16_dense_tflops.value


_ORIN_FP16 = (
    "not printed in the datasheet; derived as half the dense INT8 rate (Orin's Ampere "
    "tensor cores, like A100's, run FP16 at half their INT8 rate: the A100 whitepaper "
    "gives 312 dense FP16 TFLOPS and 624 dense INT8 TOPS). Uncertain: a derived figure"
)

ORIN_NANO = Device(
    name="orin-nano",
    title="Jetson Orin Nano 8GB, Super mode (MAXN SUPER power mode, 25 W)",
    memory_bandwidth_gb_s=Figure(
        102.0,
        "NVIDIA Jetson Orin Nano Super Developer Kit datasheet (Dec 2024): 8GB 128-bit "
        "LPDDR5, 102 GB/s in Super mode (68 GB/s in the original 15 W mode; Super needs "
        "the JetPack 6.1 update / 6.2 or later)",
    ),
    fp16_dense_tflops=Figure(16.75, _ORIN_FP16),
    int8_dense_tops=Figure(
        33.5,
        "NVIDIA Jetson Orin Nano Super Developer Kit datasheet: AI performance 67 TOPS, "
        "sparse INT8, all on the GPU (the Orin Nano has no DLA); halved to 33.5 dense. "
        "The original mode gives 40 sparse / 20 dense",
    ),
    memory_gb=Figure(
        8.0,
        "NVIDIA Jetson Orin Nano Super Developer Kit datasheet: 8GB LPDDR5, shared by CPU "
        "and GPU, so the OS and the daemon take part of it",
    ),
)

ORIN_AGX = Device(
    name="orin-agx",
    title="Jetson AGX Orin 64GB (MAXN, 60 W)",
    memory_bandwidth_gb_s=Figure(
        204.8,
        "NVIDIA Jetson AGX Orin Series Technical Brief v1.2: 64GB 256-bit LPDDR5, 204.8 GB/s",
    ),
    fp16_dense_tflops=Figure(42.5, _ORIN_FP16),
    int8_dense_tops=Figure(
        85.0,
        "NVIDIA Jetson AGX Orin Series Technical Brief v1.2: GPU 170 sparse INT8 TOPS "
        "(64 tensor cores, 1.3 GHz); halved to 85 dense. The module's 275 TOPS include "
        "105 sparse TOPS of the two DLAs, which are not counted here",
    ),
    memory_gb=Figure(
        64.0,
        "NVIDIA Jetson AGX Orin Series Technical Brief v1.2: 64GB LPDDR5, shared by CPU and GPU",
    ),
)

RTX_4090 = Device(
    name="rtx4090",
    title="GeForce RTX 4090 24GB (boost clock 2520 MHz)",
    memory_bandwidth_gb_s=Figure(
        1008.0,
        "NVIDIA Ada GPU Architecture whitepaper, RTX 4090 column: 384-bit GDDR6X at "
        "21 Gbps, 1008 GB/s",
    ),
    fp16_dense_tflops=Figure(
        165.2,
        "NVIDIA Ada GPU Architecture whitepaper: peak FP16 tensor TFLOPS with FP32 "
        "accumulate 165.2 dense / 330.4 sparse; the dense FP32-accumulate figure is used "
        "(GeForce halves the rate with FP32 accumulation; FP16 accumulate gives 330.3 "
        "dense, but inference kernels accumulate in FP32)",
    ),
    int8_dense_tops=Figure(
        660.6,
        "NVIDIA Ada GPU Architecture whitepaper: peak INT8 tensor TOPS 660.6 dense / "
        "1321.2 sparse; dense figure used",
    ),
    memory_gb=Figure(24.0, "NVIDIA Ada GPU Architecture whitepaper: 24 GB GDDR6X"),
)

H200 = Device(
    name="h200",
    title="H200 SXM 141GB",
    memory_bandwidth_gb_s=Figure(
        4800.0,
        "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: GPU memory bandwidth 4.8 TB/s",
    ),
    fp16_dense_tflops=Figure(
        989.5,
        "NVIDIA H200 Tensor Core GPU datasheet: FP16 tensor core 1,979 TFLOPS, footnoted "
        "'with sparsity'; halved to 989.5 dense (the H100 whitepaper gives 989.4 dense for "
        "the same SXM compute)",
    ),
    int8_dense_tops=Figure(
        1979.0,
        "NVIDIA H200 Tensor Core GPU datasheet: INT8 tensor core 3,958 TOPS, footnoted "
        "'with sparsity'; halved to 1,979 dense",
    ),
    memory_gb=Figure(141.0, "NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e"),
)

DEVICES: dict[str, Device] = {d.name: d for d in (ORIN_NANO, ORIN_AGX, RTX_4090, H200)}
