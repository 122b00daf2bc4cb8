"""TVM's thread pool in the engine's own process (the worker, a benchmark).

The engine runs TVM builds and onnxruntime sessions one after the other in one process:
compiled segments beside onnxruntime ones, onnxruntime's per-node profile after TVM's
kernels ran, a kernel split against the build it would replace. TVM's pool workers spin
after each parallel kernel for tens of milliseconds by default, on the cores onnxruntime's
threads then need (a SqueezeNet split measured 7.99 ms against 3.79 for the build without
it, and 3.65 against 4.68 once they stopped spinning sooner). So this process uses the spin
count an artifact's runner uses for a mix (``standalone.SPIN_COUNT``), set before any TVM
pool starts: importing ``engine.fusion`` does it.

A process that runs an artifact's runner for a measurement must not inherit it: the runner
picks the count for its artifact as it does for a user (TVM's default for a model on TVM
alone), and what is timed must be what ships (:func:`runner_environment`).
"""

from __future__ import annotations

import os

from engine.fusion.standalone import SPIN_COUNT

_NAME, _VALUE = SPIN_COUNT
SET_HERE = _NAME not in os.environ
"""This process set the spin count (else the user's own stands, and their children keep
it)."""
os.environ.setdefault(_NAME, _VALUE)


def runner_environment(**extra: str) -> dict[str, str]:
    """This process's environment with ``extra``, for a process that runs an artifact's
    runner: without the spin count this process set for itself."""
    env = dict(os.environ, **extra)
    if SET_HERE:
        env.pop(_NAME, None)
    return env
