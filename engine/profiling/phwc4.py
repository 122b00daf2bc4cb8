"""PHWC4 layout and compute-grid arithmetic of the TFLite GPU delegate.

From Lee et al., "On-Device Neural Net Inference with Mobile GPUs" (arXiv:1907.01989),
section 4 (the paper summary in ``reference/papers/tflite_gpu.md``, sections 2.4-2.5):

- a [H, W, C] tensor is cut into 4-channel slices stored one after another; a last slice
  that is not full is padded with zeros (L216). Fig. 2: (H8, W6, C12) is one continuous
  2-D array of H*C/4 = 24 rows and 4W = 24 columns (L166-169);
- a shader's grid is its output tensor, each cell one value (Fig. 3, L229), rounded up to
  a multiple of the work group (L236) and of 4 (L239): (H10, W10, C6) with a 4x4x4 work
  group is the grid (X12, Y12, Z8). The extra threads return at once ("stub" threads).

What differs here: ONNX tensors are channel-first, so a rank-4 (N, C, H, W) tensor is the
paper's [B, H, W, C] = (N, H, W, C), a rank-3 (N, C, L) is (N, 1, L, C), a rank-2 (N, C) is
(N, 1, 1, C) and a rank-1 (C) is (1, 1, 1, C). The paper takes B = 1 and stores a batch as
B tensors one after another (L213); a grid folds the batch into X, as the delegate's later
OpenCL kernels do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SLICE = 4
"""Channels per PHWC4 slice (the GPU's 4-vector, L207)."""
PAPER_WORK_GROUP = (4, 4, 4)
"""The work group of the paper's Fig. 3. The tuned per-GPU table (Table 2) is an image the
source text lost, so no tuned size is claimed."""


@dataclass(frozen=True)
class Bhwc:
    """A tensor as the delegate sees it: batch, height, width, channels."""

    b: int
    h: int
    w: int
    c: int


def to_bhwc(shape: tuple[int, ...]) -> Bhwc | None:
    """The [B, H, W, C] view of a channel-first ONNX shape; ``None`` above rank 4, which the
    delegate's tensors never are (L213)."""
    if len(shape) > 4:
        return None
    if len(shape) == 4:
        n, c, h, w = shape
        return Bhwc(n, h, w, c)
    if len(shape) == 3:
        n, c, length = shape
        return Bhwc(n, 1, length, c)
    if len(shape) == 2:
        return Bhwc(shape[0], 1, 1, shape[1])
    return Bhwc(1, 1, 1, shape[0] if shape else 1)


@dataclass(frozen=True)
class Phwc4Layout:
    """A tensor stored as PHWC4: ``array_shape`` is the continuous 2-D array (rows, columns)
    of Fig. 2; ``waste_fraction`` is the zero padding's share of the padded buffer."""

    bhwc: Bhwc
    slices: int
    padded_channels: int
    array_shape: tuple[int, int]
    elements: int
    padded_elements: int
    bytes: int
    padded_bytes: int
    waste_bytes: int
    waste_fraction: float

    def to_dict(self) -> dict:
        return {**asdict(self), "bhwc": asdict(self.bhwc), "array_shape": list(self.array_shape)}


def phwc4_layout(bhwc: Bhwc, element_bytes: float) -> Phwc4Layout:
    """The PHWC4 storage of ``bhwc`` with elements of ``element_bytes`` bytes (L216)."""
    slices = math.ceil(bhwc.c / SLICE)
    padded_channels = slices * SLICE
    elements = bhwc.b * bhwc.h * bhwc.w * bhwc.c
    padded = bhwc.b * bhwc.h * bhwc.w * padded_channels
    size = math.ceil(elements * element_bytes)
    padded_size = math.ceil(padded * element_bytes)
    return Phwc4Layout(
        bhwc=bhwc,
        slices=slices,
        padded_channels=padded_channels,
        array_shape=(bhwc.b * bhwc.h * slices, SLICE * bhwc.w),
        elements=elements,
        padded_elements=padded,
        bytes=size,
        padded_bytes=padded_size,
        waste_bytes=padded_size - size,
        waste_fraction=(padded - elements) / padded if padded else 0.0,
    )


@dataclass(frozen=True)
class Grid:
    """A shader's dispatch: ``workload`` is the output's (X=W*B, Y=H, Z=C) in values, ``grid``
    that rounded up to the work group and to multiples of 4. ``stub_threads`` return at
    once (grid rounding); ``padding_threads`` compute the zero channels of the last slice."""

    workload: tuple[int, int, int]
    work_group: tuple[int, int, int]
    grid: tuple[int, int, int]
    groups: tuple[int, int, int]
    threads: int
    stub_threads: int
    stub_fraction: float
    padding_threads: int

    def to_dict(self) -> dict:
        return {
            "workload": list(self.workload),
            "work_group": list(self.work_group),
            "grid": list(self.grid),
            "groups": list(self.groups),
            "threads": self.threads,
            "stub_threads": self.stub_threads,
            "stub_fraction": self.stub_fraction,
            "padding_threads": self.padding_threads,
        }


def compute_grid(bhwc: Bhwc, work_group: tuple[int, int, int] = PAPER_WORK_GROUP) -> Grid:
    """The grid of a shader writing ``bhwc`` (Fig. 3): each axis rounded up to a multiple
    of its work-group size and of 4; channels first padded to whole slices."""
    workload = (bhwc.w * bhwc.b, bhwc.h, bhwc.c)
    lanes = (workload[0], workload[1], math.ceil(bhwc.c / SLICE) * SLICE)
    grid = tuple(_round_up(n, math.lcm(g, SLICE)) for n, g in zip(lanes, work_group, strict=True))
    threads = math.prod(grid)
    laned = math.prod(lanes)
    return Grid(
        workload=workload,
        work_group=work_group,
        grid=grid,  # type: ignore[arg-type]
        groups=tuple(n // g for n, g in zip(grid, work_group, strict=True)),  # type: ignore[arg-type]
        threads=threads,
        stub_threads=threads - laned,
        stub_fraction=(threads - laned) / threads if threads else 0.0,
        padding_threads=laned - math.prod(workload),
    )


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
