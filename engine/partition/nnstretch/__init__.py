"""NN-Stretch (MobiSys '23): automatic model branching for parallel inference on a phone's
heterogeneous processors.

:func:`~engine.partition.nnstretch.planner.plan_nnstretch` is the entry point; the
partition stage runs it for the ``nn-stretch`` algorithm. Modules by responsibility:
:mod:`.structure` (stages, blocks, meeting-point candidates), :mod:`.pricing` (what ops
and meeting points cost on each processor), :mod:`.branch` (the graph transform F),
:mod:`.search` (the design space and its constraints), :mod:`.export` (the branched ONNX),
:mod:`.schedule` (the spatial schedule in the shared simulator) and :mod:`.measure` (the
branches in onnxruntime).
"""

from engine.partition.nnstretch.planner import plan_nnstretch

__all__ = ["plan_nnstretch"]
