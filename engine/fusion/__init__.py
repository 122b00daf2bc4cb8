"""Fusion planning, TVM compilation, tuning and the compiled artifact (stage fuse + compile).

Entry point: :func:`compile_model`. TVM is imported lazily, inside the functions that
need it, so importing this package stays light.
"""

from engine.fusion.compile import CompileConfig, CompileResult, compile_model

__all__ = ["CompileConfig", "CompileResult", "compile_model"]
