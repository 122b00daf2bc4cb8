"""Profiling: measured on the worker's CPU, or predicted from a target's cost model."""

from engine.profiling.calibrate import Calibration, calibrate, cross_validate, modeled_copy
from engine.profiling.findings import Finding, find_all
from engine.profiling.latency import LatencyConfig, LatencyProfile, measure_latency
from engine.profiling.nodes import NodeProfile, NodeProfileConfig, profile_nodes
from engine.profiling.predicted import PredictedProfile, predict_profile
from engine.profiling.roofs import Roofs, measure_roofs
from engine.profiling.sweeps import Sweep, sweep_batch, sweep_threads

__all__ = [
    "Calibration",
    "Finding",
    "LatencyConfig",
    "LatencyProfile",
    "NodeProfile",
    "NodeProfileConfig",
    "PredictedProfile",
    "Roofs",
    "Sweep",
    "calibrate",
    "cross_validate",
    "find_all",
    "measure_latency",
    "measure_roofs",
    "modeled_copy",
    "predict_profile",
    "profile_nodes",
    "sweep_batch",
    "sweep_threads",
]
