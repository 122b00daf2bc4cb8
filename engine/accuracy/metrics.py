"""Error metrics between a reference tensor and a candidate tensor, and thresholds on them.

The metrics follow what users of comparable tools read: max absolute error, mean and max
relative error, cosine similarity and SNR in dB (AI Hub reports PSNR, OpenVINO's
workbench per-tensor MSE, the thesis ch.4/5 a relative precision error), plus top-1 /
top-5 agreement for classifier-like outputs.

Two choices keep the numbers meaningful on real tensors:

- relative error divides by ``max(|ref|, rel_floor * max|ref|)``: an element far below
  the tensor's scale is judged against that scale, so a value that should be 1e-9 and
  is 3e-9 does not read as a 200 % error;
- non-finite values are compared by kind (NaN with NaN, +inf with +inf) and any mismatch
  is counted separately; the other metrics use the positions where both are finite.

SNR is clamped to +-``SNR_CAP_DB``: +300 dB means bit-identical, -300 dB means the
reference is all zeros and the candidate is not.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

SNR_CAP_DB = 300.0
_EPS = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float8_e4m3fn": 2.0**-3,
    "float8_e4m3fnuz": 2.0**-3,
    "float8_e5m2": 2.0**-2,
    "float8_e5m2fnuz": 2.0**-2,
    "float4_e2m1fn": 2.0**-1,
}
"""Machine epsilon of the floating types narrower than float32, by numpy dtype name."""
_CLASSIFIER_MIN_CLASSES = 10
_TIE_REL = 1e-6  # scores this close (relative to the row's largest) count as a tie


@dataclass(frozen=True)
class Thresholds:
    """Limits a comparison must meet; ``None`` switches a check off.

    The defaults pass fp32 builds (SNR above 100 dB) and flag fp16 builds only where the
    error is real. Measured with random weights, fp16 gives 45-73 dB on the light CNNs,
    65-70 dB on BERT and ViT blocks and 38-42 dB on MobileNetV2 / EfficientNet-B0 (mean
    relative error up to 3 %, top-1 unchanged); where it overflows (activations beyond
    65504) it gives NaN. 30 dB is an error of 3 % of the signal's RMS; a one-weight bug
    gives well under 20 dB. ``max_abs`` depends on the tensor's scale, so it is off unless
    the user knows the scale. Layers are judged by ``cosine`` and ``snr_db`` only.
    """

    max_abs: float | None = None
    mean_rel: float | None = 0.05
    max_rel: float | None = None
    cosine: float | None = 0.999
    snr_db: float | None = 30.0
    top1: float | None = 1.0
    top5: float | None = 0.8
    rel_floor: float = 1e-3

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def strict(cls) -> Thresholds:
        """Tolerances like the ONNX backend tests (rtol 1e-3): for fp32 re-implementations."""
        return cls(mean_rel=None, max_rel=1e-3, cosine=0.99999, snr_db=60.0, top5=1.0)

    def for_precision(self, dtype) -> Thresholds:
        """These limits, loosened to 4 ulps for values of a type narrower than float32.

        A float16 result is only expected within a few of its own ulps (2^-10): relative
        limits become at least 4 eps, SNR at most -20 log10(4 eps), cosine at most 1 - 4 eps.
        """
        eps = _EPS.get(np.dtype(dtype).name)
        if eps is None:
            return self
        k = 4.0 * eps

        def looser(limit, floor):
            return None if limit is None else max(limit, floor)

        return replace(
            self,
            mean_rel=looser(self.mean_rel, k),
            max_rel=looser(self.max_rel, k),
            cosine=None if self.cosine is None else min(self.cosine, 1.0 - k),
            snr_db=None if self.snr_db is None else min(self.snr_db, -20.0 * math.log10(k)),
        )

    @classmethod
    def from_dict(cls, values: dict) -> Thresholds:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown threshold(s): {', '.join(sorted(unknown))}")
        return cls(**values)


INFINITY_STAND_IN = 1e38
"""A finite value this large stands in for infinity: no computation in a working network
reaches it, exporters write float32's extremes (+-3.4e38) as masks' "minus infinity"."""


@dataclass(frozen=True)
class TensorMetrics:
    """How far one candidate tensor is from its reference.

    ``error`` is set (and the numbers are worst-case) when the tensors cannot be
    compared at all: different shapes, or strings that differ.
    """

    elements: int
    max_abs: float
    mean_abs: float
    mean_rel: float
    max_rel: float
    cosine: float
    snr_db: float
    nonfinite_mismatch: int = 0
    ref_max_abs: float = 0.0
    saturated: int = 0
    """Elements the candidate's number format cannot hold (see :func:`compare_tensors`)."""
    top1: float | None = None
    top5: float | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        """Plain JSON: the infinities of an incomparable pair become ``None``."""
        return {k: json_number(v) for k, v in asdict(self).items()}


def json_number(value):
    """``value`` with non-finite floats replaced by ``None`` (JSON has no inf or NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def compare_tensors(
    reference, candidate, *, rel_floor: float = 1e-3, saturation: float | None = None
) -> TensorMetrics:
    """Compare two arrays of the same shape element by element (computed in float64).

    ``saturation``, the largest finite magnitude of the candidate's number format (65504
    for fp16): a reference element that stands in for infinity (beyond
    :data:`INFINITY_STAND_IN`: exporters write float32's lowest value, -3.4e38, into
    attention masks), met by the candidate at that magnitude or at infinity with the same
    sign, saturated as the format must: it is counted in ``saturated`` and left out of the
    errors (-65504 masks as -3.4e38 does). A value that overflows through arithmetic (a
    Conv output of 1e5 in fp16) is no stand-in, and stays an error.
    """
    ref, cand = np.asarray(reference), np.asarray(candidate)
    if ref.shape != cand.shape:
        return incomparable(ref.size, f"shape {_shape(cand)} instead of {_shape(ref)}")
    if ref.dtype.kind in "OSU" or cand.dtype.kind in "OSU":
        same = bool(np.array_equal(_strings(ref), _strings(cand)))
        return _exact(ref.size) if same else incomparable(ref.size, "strings differ")
    # Private float64 copies: the error of a float32 pair is exact in float64.
    r, c = _as_float64(ref).ravel(), _as_float64(cand).ravel()
    saturated = 0
    if saturation is not None:
        beyond = (
            (np.abs(r) >= INFINITY_STAND_IN)
            & (np.sign(r) == np.sign(c))
            & (np.abs(c) >= saturation)
        )
        saturated = int(np.count_nonzero(beyond))
        if saturated:
            r, c = r[~beyond], c[~beyond]
    mismatch, scale = 0, None
    if not (np.isfinite(r).all() and np.isfinite(c).all()):
        finite_ref = np.isfinite(r)
        scale = float(np.abs(r[finite_ref]).max()) if finite_ref.any() else 0.0
        finite = finite_ref & np.isfinite(c)
        mismatch = int(np.count_nonzero(~finite & ~_same_nonfinite(r, c)))
        r, c = r[finite], c[finite]
    if r.size == 0:
        # Nothing finite on both sides to measure: exact only if every non-finite value
        # matched (or there is nothing at all); a candidate all NaN where the reference is
        # finite is as far off as can be, not an exact match.
        base = _exact(ref.size) if not mismatch else _worst(ref.size)
        return replace(
            base, nonfinite_mismatch=mismatch, ref_max_abs=scale or 0.0, saturated=saturated
        )
    signal, power, dot = float(r @ r), float(c @ c), float(r @ c)
    diff = np.abs(np.subtract(c, r, out=c), out=c)
    rel = np.abs(r)
    scale = float(rel.max()) if scale is None else scale
    floor = max(rel_floor * scale, np.finfo(np.float64).tiny)
    rel = np.divide(diff, np.maximum(rel, floor, out=rel), out=rel)
    metrics = TensorMetrics(
        elements=int(ref.size),
        max_abs=float(diff.max()),
        mean_abs=float(diff.mean()),
        mean_rel=float(rel.mean()),
        max_rel=float(rel.max()),
        cosine=_cosine(signal, power, dot),
        snr_db=_snr_db(signal, float(diff @ diff)),
        nonfinite_mismatch=mismatch,
        ref_max_abs=scale,
        saturated=saturated,
    )
    scores = _classifier_scores(ref, cand)
    if scores is None:
        return metrics
    top1, top5 = topk_agreement(*scores)
    return replace(metrics, top1=top1, top5=top5)


def topk_agreement(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    """Top-1 and top-5 agreement over the rows of two ``(N, classes)`` score arrays.

    Top-1: the share of rows where the candidate's best class is also a best class of the
    reference (ties in the reference, within 1e-6 of the row's largest magnitude, all
    count). Top-5: the mean share of the candidate's five best classes that lie in the
    reference's five best (again with ties at the fifth place included).
    """
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    k = min(5, ref.shape[1])
    top1 = top5 = 0.0
    for r, c in zip(ref, cand, strict=True):
        tol = _TIE_REL * float(np.max(np.abs(r)))
        top1 += float(r[int(np.argmax(c))] >= r.max() - tol)
        kth = np.partition(r, -k)[-k]
        cand_top = np.argpartition(c, -k)[-k:]
        top5 += float(np.count_nonzero(r[cand_top] >= kth - tol)) / k
    rows = max(len(ref), 1)
    return top1 / rows, top5 / rows


def error_histogram(reference, candidate, *, bins: int = 30) -> dict:
    """Counts of element-wise absolute errors in log-spaced bins.

    ``{"edges": [...], "counts": [...], "zeros": n}``: ``zeros`` counts exact matches,
    which a log axis cannot show; non-finite positions are left out.
    """
    ref, cand = np.asarray(reference), np.asarray(candidate)
    if ref.shape != cand.shape or ref.dtype.kind in "OSU" or cand.dtype.kind in "OSU":
        return {"edges": [], "counts": [], "zeros": 0}
    diff = np.abs(_as_float64(cand) - _as_float64(ref)).ravel()
    diff = diff[np.isfinite(diff)]
    nonzero = diff[diff > 0]
    zeros = int(diff.size - nonzero.size)
    if nonzero.size == 0:
        return {"edges": [], "counts": [], "zeros": zeros}
    low, high = np.log10(nonzero.min()), np.log10(nonzero.max())
    edges = np.logspace(low, high if high > low else low + 1e-9, bins + 1)
    edges[0], edges[-1] = nonzero.min(), max(nonzero.max(), edges[-1])
    counts, edges = np.histogram(nonzero, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist(), "zeros": zeros}


def judge(metrics: TensorMetrics, thresholds: Thresholds, *, layer: bool = False) -> list[str]:
    """Return the reasons ``metrics`` fail ``thresholds`` (empty when they pass).

    With ``layer=True`` only ``cosine`` and ``snr_db`` apply: relative errors of single
    elements are too noisy inside a network (a BatchNorm output near zero under fp16
    shows 1 % mean relative error at 56 dB SNR) to say where the error begins.
    """
    if metrics.error:
        return [metrics.error]
    reasons = []
    if metrics.nonfinite_mismatch:
        reasons.append(
            f"{metrics.nonfinite_mismatch} NaN/inf values do not match the reference "
            f"(whose largest finite |value| is {metrics.ref_max_abs:.3g})"
        )
    t = thresholds
    upper = (
        [] if layer else [("max_abs", t.max_abs), ("mean_rel", t.mean_rel), ("max_rel", t.max_rel)]
    )
    lower = [("cosine", t.cosine), ("snr_db", t.snr_db)]
    if not layer:
        lower += [("top1", t.top1), ("top5", t.top5)]
    for name, limit in upper:
        value = getattr(metrics, name)
        if limit is not None and value is not None and not value <= limit:
            reasons.append(f"{name} {_fmt(value)} > {_fmt(limit)}")
    for name, limit in lower:
        value = getattr(metrics, name)
        if limit is not None and value is not None and not value >= limit:
            reasons.append(f"{name} {_fmt(value)} < {_fmt(limit)}")
    return reasons


def _classifier_scores(ref: np.ndarray, cand: np.ndarray):
    """``(N, classes)`` views of classifier-like outputs: 2-D once trailing 1s go, >= 10
    classes, floating point; else ``None``."""
    if ref.dtype.kind != "f" and not str(ref.dtype).startswith(("bfloat", "float")):
        return None
    shape = list(ref.shape)
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
    if len(shape) != 2 or shape[1] < _CLASSIFIER_MIN_CLASSES or shape[0] < 1:
        return None
    r, c = _as_float64(ref).reshape(shape), _as_float64(cand).reshape(shape)
    if not (np.isfinite(r).all() and np.isfinite(c).all()):
        return None
    return r, c


def _strings(array: np.ndarray) -> np.ndarray:
    """Text of each element: ONNX files hold bytes where runtimes return str."""
    decode = np.vectorize(
        lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    )
    return decode(array) if array.size else array.astype(str)


def _as_float64(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "c":  # compare real and imaginary parts alike
        return np.stack([array.real, array.imag], axis=-1).astype(np.float64)
    return array.astype(np.float64)  # always a copy


def _same_nonfinite(r: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (np.isnan(r) & np.isnan(c)) | (np.isinf(r) & (r == c))


def _cosine(signal: float, power: float, dot: float) -> float:
    if signal == 0.0 or power == 0.0:
        return 1.0 if signal == power else 0.0
    return float(np.clip(dot / math.sqrt(signal * power), -1.0, 1.0))


def _snr_db(signal: float, noise: float) -> float:
    if noise == 0.0:
        return SNR_CAP_DB
    if signal == 0.0:
        return -SNR_CAP_DB
    return float(np.clip(10.0 * math.log10(signal / noise), -SNR_CAP_DB, SNR_CAP_DB))


def _exact(elements: int) -> TensorMetrics:
    return TensorMetrics(
        elements=int(elements),
        max_abs=0.0,
        mean_abs=0.0,
        mean_rel=0.0,
        max_rel=0.0,
        cosine=1.0,
        snr_db=SNR_CAP_DB,
    )


def incomparable(elements: int, error: str) -> TensorMetrics:
    """Worst-case metrics for a pair that cannot be compared, with the reason."""
    return replace(_worst(elements), error=error)


def _worst(elements: int) -> TensorMetrics:
    return TensorMetrics(
        elements=int(elements),
        max_abs=math.inf,
        mean_abs=math.inf,
        mean_rel=math.inf,
        max_rel=math.inf,
        cosine=0.0,
        snr_db=-SNR_CAP_DB,
    )


def _shape(array: np.ndarray) -> str:
    return "x".join(str(d) for d in array.shape) or "scalar"


def _fmt(value: float) -> str:
    return f"{value:.4g}"
