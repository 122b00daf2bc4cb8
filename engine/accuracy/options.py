"""Options of the accuracy stage (light: the web form and the API validate with it)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

CANDIDATES = ("fp16", "fp16-scaled", "simplified", "partitioned", "tvm", "ort", "other")
DISTRIBUTIONS = ("normal", "uniform")
THRESHOLDS = ("max_abs", "mean_rel", "max_rel", "cosine", "snr_db", "top1", "top5", "rel_floor")
"""The limits of ``engine.accuracy.metrics.Thresholds`` (a test checks the two agree)."""


@dataclass(frozen=True)
class AccuracyOptions(StageOptions):
    stage = "accuracy"

    candidate: str = option(
        "fp16",
        "what to compare with onnxruntime fp32: an fp16 conversion, fp16 with "
        "power-of-two precision scaling (also compared with plain fp16), the prepared "
        "(simplified) model, the partitioned execution (needs the Partition stage), the "
        "TVM build, onnxruntime itself, or another model",
        choices=CANDIDATES,
        label="Candidate",
    )
    other_model: int | None = option(
        None,
        "the other model (candidate 'other'): a model id on the server; on the command "
        "line 0, the file given with --other",
        public=False,
        server_id=True,
    )
    inputs: int | None = option(
        None,
        "id of an uploaded .npz input set (default: generated from the input specs)",
        public=False,
        server_id=True,
    )
    seed: int = option(0, "seed of the generated inputs", min=0, max=2**31 - 1, public=False)
    distribution: str = option(
        "normal", "distribution of the generated inputs", choices=DISTRIBUTIONS, public=False
    )
    layers: bool = option(True, "locate the first divergent layer", public=False)
    thresholds: dict[str, float | None] = option(
        {},
        'limits that override the defaults, e.g. {"cosine": 0.9999}; null switches a check off',
        choices=THRESHOLDS,
        public=False,
    )

    def check(self) -> None:
        if self.candidate == "other" and self.other_model is None:
            raise self.invalid("other_model", "choose the model to compare against")
