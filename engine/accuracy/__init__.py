"""The accuracy stage: reference vs candidate comparison, per output and per layer."""

from engine.accuracy.candidates import (
    Candidate,
    OrtCandidate,
    ReferenceEvaluatorCandidate,
    available_candidates,
    make_candidate,
    register_candidate,
)
from engine.accuracy.check import AccuracyConfig, AccuracyReport, check_accuracy
from engine.accuracy.errors import CandidateError, InputDataError
from engine.accuracy.fp16 import DEFAULT_KEEP_FP32, Fp16Conversion, convert_to_fp16
from engine.accuracy.inputs import InputSet, generate_inputs, load_inputs_npz
from engine.accuracy.metrics import TensorMetrics, Thresholds, compare_tensors

__all__ = [
    "DEFAULT_KEEP_FP32",
    "AccuracyConfig",
    "AccuracyReport",
    "Candidate",
    "CandidateError",
    "Fp16Conversion",
    "InputDataError",
    "InputSet",
    "OrtCandidate",
    "ReferenceEvaluatorCandidate",
    "TensorMetrics",
    "Thresholds",
    "available_candidates",
    "check_accuracy",
    "compare_tensors",
    "convert_to_fp16",
    "generate_inputs",
    "load_inputs_npz",
    "make_candidate",
    "register_candidate",
]
