"""Fusion planning, TVM compilation, tuning and the compiled artifact (stage fuse + compile).

Entry point: :func:`compile_model`. TVM is imported lazily, inside the functions that
need it, so importing this package stays light.
"""

# first: TVM's pool reads its spin count when it starts (engine.fusion.threadpool)
import engine.fusion.threadpool  # noqa: F401, I001
from engine.fusion.compile import CompileConfig, CompileResult, compile_model

__all__ = ["CompileConfig", "CompileResult", "compile_model"]
