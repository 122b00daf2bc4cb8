"""ONNX loading and validation, the graph IR, and shape / FLOP / byte analysis."""

from engine.graph.analyze import AnalysisConfig, ModelAnalysis, analyze_model
from engine.graph.loader import ModelHeader, load_model
from engine.graph.upload import read_header

__all__ = [
    "AnalysisConfig",
    "ModelAnalysis",
    "ModelHeader",
    "analyze_model",
    "load_model",
    "read_header",
]
