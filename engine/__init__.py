"""The workbench's analysis and compilation core: pure Python, no web framework.

Entry points take plain data (a path, bytes or ``onnx.ModelProto``, a frozen config, an
optional progress callback) and return dataclasses with ``to_dict()``. Failures are
:class:`engine.errors.EngineError` subclasses.
"""
