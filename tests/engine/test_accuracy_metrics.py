"""Error metrics and thresholds on hand-computed tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.accuracy.metrics import (
    SNR_CAP_DB,
    Thresholds,
    compare_tensors,
    error_histogram,
    judge,
    topk_agreement,
)


def test_metrics_of_one_wrong_element():
    m = compare_tensors(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0, 5.0]))
    assert m.max_abs == 1.0
    assert m.mean_abs == 0.25
    assert m.max_rel == 0.25 and m.mean_rel == pytest.approx(0.0625)
    assert m.snr_db == pytest.approx(10 * math.log10(30 / 1))  # 14.77 dB
    assert m.cosine == pytest.approx(34 / math.sqrt(30 * 39))
    assert m.top1 is None  # 1-D: not a classifier


def test_identical_tensors_are_exact_and_clamped():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = compare_tensors(x, x.copy())
    assert (m.max_abs, m.mean_rel, m.cosine, m.snr_db) == (0.0, 0.0, 1.0, SNR_CAP_DB)
    assert judge(m, Thresholds()) == []


def test_relative_error_is_floored_at_the_tensor_scale():
    # 1e-9 instead of 0 next to a value of 1.0: judged against 1e-3 * 1.0, not against 0
    m = compare_tensors(np.array([1.0, 0.0]), np.array([1.0, 1e-9]))
    assert m.max_rel == pytest.approx(1e-6)


def test_nonfinite_values_match_by_kind():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])
    same = compare_tensors(ref, ref.copy())
    assert same.nonfinite_mismatch == 0 and same.max_abs == 0.0
    overflow = compare_tensors(ref, np.array([np.nan, np.inf, -np.inf, np.inf, 2.0]))
    assert overflow.nonfinite_mismatch == 1
    reasons = judge(overflow, Thresholds())
    assert reasons == [
        "1 NaN/inf values do not match the reference (whose largest finite |value| is 2)"
    ]


def test_a_candidate_with_nothing_finite_is_not_an_exact_match():
    """fp16 overflowing a whole output (SqueezeNet: 1000 NaN/inf) used to read as max
    error 0, cosine 1, SNR 300 dB beside a failing verdict."""
    ref = np.array([1.0, -2.0, 3.0])
    overflowed = compare_tensors(ref, np.array([np.nan, np.inf, np.nan]))
    assert overflowed.nonfinite_mismatch == 3
    assert overflowed.max_abs == np.inf and overflowed.cosine == 0.0 and overflowed.snr_db < 0
    assert overflowed.to_dict()["max_abs"] is None  # shown as unknown, never as 0
    assert judge(overflowed, Thresholds())
    both = np.array([np.nan, np.inf])  # the same non-finite values on both sides: exact
    assert compare_tensors(both, both.copy()).max_abs == 0.0
    assert compare_tensors(np.zeros(0), np.zeros(0)).max_abs == 0.0


def test_shape_mismatch_is_incomparable_and_json_safe():
    m = compare_tensors(np.zeros((2, 3)), np.zeros((3, 2)))
    assert m.error == "shape 3x2 instead of 2x3"
    assert judge(m, Thresholds()) == ["shape 3x2 instead of 2x3"]
    assert m.to_dict()["max_abs"] is None


def test_strings_compare_exactly_bytes_or_str():
    ref = np.array([b"abc", b"de"], dtype=object)
    assert compare_tensors(ref, np.array(["abc", "de"], dtype=object)).error is None
    assert compare_tensors(ref, np.array(["abc", "xx"], dtype=object)).error == "strings differ"


def test_integer_and_bool_outputs_compare_exactly():
    assert compare_tensors(np.array([1, 2, 3]), np.array([1, 2, 3])).max_abs == 0.0
    assert compare_tensors(np.array([True, False]), np.array([True, True])).max_abs == 1.0


def test_top_k_agreement_and_ties():
    ref = np.array([[0.0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
    swapped_top = ref.copy()
    swapped_top[0, [8, 9]] = [9, 8]
    assert topk_agreement(ref, swapped_top) == (0.0, 1.0)
    sixth_in = ref.copy()
    sixth_in[0, 4] = 100.0  # class 4 jumps into the candidate's top five, class 5 drops out
    assert topk_agreement(ref, sixth_in) == (0.0, 0.8)
    uniform = np.full((2, 1000), 1e-3)  # the light models' softmax: all classes tie
    noisy = uniform + np.random.default_rng(0).normal(0, 1e-12, uniform.shape)
    assert topk_agreement(uniform, noisy) == (1.0, 1.0)


def test_classifier_like_outputs_get_top_k_even_with_trailing_ones():
    ref = np.random.default_rng(0).normal(size=(2, 10, 1, 1))
    m = compare_tensors(ref, ref.copy())
    assert (m.top1, m.top5) == (1.0, 1.0)
    assert compare_tensors(ref[:, :9], ref[:, :9]).top1 is None  # fewer than 10 classes


def test_judge_names_every_failed_threshold():
    ref = np.linspace(1.0, 2.0, 100)
    m = compare_tensors(ref, ref * 1.1)  # 10 % off everywhere: 20 dB
    reasons = judge(m, Thresholds(max_abs=0.1))
    assert reasons == ["max_abs 0.2 > 0.1", "mean_rel 0.1 > 0.05", "snr_db 20 < 30"]
    # layers: scale-free checks only
    assert judge(m, Thresholds(max_abs=0.1), layer=True) == ["snr_db 20 < 30"]


def test_default_thresholds_pass_fp32_noise_and_fail_a_broken_tensor():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=10_000).astype(np.float32)
    fp32_noise = ref * (1 + rng.normal(0, 1e-7, ref.shape)).astype(np.float32)
    assert judge(compare_tensors(ref, fp32_noise), Thresholds()) == []
    fp16 = ref.astype(np.float16)
    assert judge(compare_tensors(ref, fp16), Thresholds()) == []
    broken = ref.copy()
    broken[:2000] *= 1.5  # one channel in five scaled
    assert "snr_db" in " ".join(judge(compare_tensors(ref, broken), Thresholds()))


def test_thresholds_loosen_to_the_precision_of_narrow_types():
    strict = Thresholds.strict()
    assert strict.for_precision(np.float32) is strict
    half = strict.for_precision(np.float16)
    assert half.max_rel == pytest.approx(4 * 2**-10)
    assert half.snr_db == pytest.approx(-20 * math.log10(4 * 2**-10))  # 48.2 dB
    assert Thresholds.from_dict({"snr_db": 20.0}).snr_db == 20.0
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds.from_dict({"psnr": 20.0})


def test_error_histogram_counts_every_element():
    ref = np.zeros(100)
    cand = np.concatenate([np.zeros(40), np.logspace(-6, -2, 60)])
    hist = error_histogram(ref, cand, bins=10)
    assert hist["zeros"] == 40
    assert sum(hist["counts"]) == 60 and len(hist["edges"]) == 11
    assert hist["edges"][0] == pytest.approx(1e-6) and hist["edges"][-1] == pytest.approx(1e-2)
