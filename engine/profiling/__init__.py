"""Profiling: measured on the worker's CPU, or predicted from a target's cost model."""

from engine.profiling.latency import LatencyConfig, LatencyProfile, measure_latency

__all__ = ["LatencyConfig", "LatencyProfile", "measure_latency"]
