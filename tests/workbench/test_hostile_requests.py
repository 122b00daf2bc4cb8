"""The hostile-request corpus: every request here is refused with a 4xx that names what was
wrong, and leaves nothing behind (no model, input set, target, run or stage row, no file,
no task enqueued). Requests a hostile but legitimate user can send: malformed or
mistyped values, huge numbers, deep nesting, archives that lie, other users' ids."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SQUEEZENET
from workbench.models import InputData, OnnxModel, Run, StageResult, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


def npz_declaring(shape, body_bytes: int) -> bytes:
    """An .npz whose one member, ``data_0``, declares ``shape`` float32 in its header and
    holds ``body_bytes`` of deflated zeros."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("data_0.npy", "w", force_zip64=True) as f,
    ):
        header = {"descr": "<f4", "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(f, header)
        chunk = b"\0" * (1 << 20)
        for start in range(0, body_bytes, len(chunk)):
            f.write(chunk[: body_bytes - start])
    return buffer.getvalue()


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.fixture
def others(other_user):
    """Another user's model and run: ids a hostile user can guess."""
    model = store_model_file(SQUEEZENET, owner=other_user, name="theirs.onnx")
    run = Run.objects.create(
        owner=other_user,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze"]},
    )
    return model, run


def state(media: Path) -> dict:
    files = sorted(str(p) for p in media.rglob("*") if p.is_file()) if media.exists() else []
    return {
        "models": OnnxModel.objects.count(),
        "inputs": InputData.objects.count(),
        "targets": Target.objects.count(),
        "runs": Run.objects.count(),
        "stages": StageResult.objects.count(),
        "files": files,
    }


# (name, method, path, body, content type or "multipart", status, words in the error)
CORPUS = [
    (
        "npz header declaring 400 TB",
        "post",
        "/api/v1/models/{model}/inputs/",
        {"file": ("huge.npz", npz_declaring((100_000_000_000, 1000), 16))},
        "multipart",
        400,
        "array 'data_0' declares shape 100000000000x1000 float32",
    ),
    (
        "npz bomb: 60 MB of zeros in 60 KB, the wrong shape",
        "post",
        "/api/v1/models/{model}/inputs/",
        {"file": ("bomb.npz", npz_declaring((100, 3, 224, 224), 100 * 3 * 224 * 224 * 4))},
        "multipart",
        400,
        "input 'data_0' has shape 100x3x224x224, expected 1x3x224x224",
    ),
    (
        "npz member that is not an array",
        "post",
        "/api/v1/models/{model}/inputs/",
        {"file": ("x.npz", b"PK\x05\x06" + b"\0" * 18)},
        "multipart",
        400,
        "no array for input 'data_0'",
    ),
    (
        "run option of the wrong type",
        "post",
        "/api/v1/runs/",
        {"model": "{model}", "stages": ["profile"], "options": {"profile": {"window_s": "x"}}},
        "json",
        400,
        "expected a number, got 'x'",
    ),
    (
        "run option with 30 digits",
        "post",
        "/api/v1/runs/",
        {
            "model": "{model}",
            "stages": ["compile"],
            "options": {"compile": {"tune_trials": 10**30}},
        },
        "json",
        400,
        "must be at most 100000",
    ),
    (
        "input shape with 3,000 digits",
        "post",
        "/api/v1/runs/",
        {"model": "{model}", "input_shapes": {"data_0": [1, 3, int("9" * 3000), 224]}},
        "json",
        400,
        "every dimension must be a whole number from 1 to",
    ),
    (
        "a stage name that is a list",
        "post",
        "/api/v1/runs/",
        {"model": "{model}", "stages": [["analyze"]]},
        "json",
        400,
        "unknown stage(s): ['analyze']",
    ),
    (
        "a misspelt field, not silently ignored",
        "post",
        "/api/v1/runs/",
        {"model": "{model}", "stages": ["profile"], "profile": {"window_s": 1}},
        "json",
        400,
        "unknown field (known: model, target, stages",
    ),
    (
        "a model id with 30 digits",
        "post",
        "/api/v1/runs/",
        {"model": 10**30, "stages": ["analyze"]},
        "json",
        400,
        "less than or equal to 9223372036854775807",
    ),
    (
        "another user's model",
        "post",
        "/api/v1/runs/",
        {"model": "{their_model}", "stages": ["analyze"]},
        "json",
        400,
        "you have no model with id",
    ),
    (
        "a run body that is a list",
        "post",
        "/api/v1/runs/",
        [1, 2],
        "json",
        400,
        "Expected a dictionary, but got list",
    ),
    (
        "JSON nested 5,000 levels",
        "post",
        "/api/v1/runs/",
        deep(5000),
        "raw-json",
        400,
        "nested too deeply",
    ),
    (
        "a target id of superscript digits: isdigit() says yes, int() refuses",
        "post",
        "/api/v1/runs/",
        {"model": "{model}", "target": "\u00b2"},
        "json",
        400,
        "no target",
    ),
    (
        "a target profile whose network is a list",
        "post",
        "/api/v1/targets/",
        {"name": "x", "kind": "modeled", "units": [], "network": [None, None]},
        "json",
        400,
        "must be a mapping",
    ),
    (
        "a target profile that is a list",
        "post",
        "/api/v1/targets/",
        [1, 2, 3],
        "json",
        400,
        "a target profile is a JSON object",
    ),
    (
        "a target profile nested 5,000 levels",
        "post",
        "/api/v1/targets/",
        deep(5000),
        "raw-json",
        400,
        "nested too deeply",
    ),
    (
        "a target profile that is a string",
        "post",
        "/api/v1/targets/",
        "cpu",
        "json",
        400,
        "not a string",
    ),
    (
        "another user's run",
        "get",
        "/api/v1/runs/{their_run}/",
        None,
        None,
        404,
        "no such object",
    ),
    (
        "cancel another user's run",
        "post",
        "/api/v1/runs/{their_run}/cancel/",
        None,
        None,
        404,
        "no such object",
    ),
    (
        "a run id with 30 digits",
        "get",
        "/api/v1/runs/" + "9" * 30 + "/",
        None,
        None,
        404,
        "no such object",
    ),
    (
        "malformed JSON",
        "post",
        "/api/v1/runs/",
        "{bad",
        "raw-json",
        400,
        "JSON parse error",
    ),
]


def _fill(value, ids: dict):
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        key = value[1:-1]
        if key in ids:
            return ids[key]
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


@pytest.mark.parametrize(
    ("method", "path", "body", "kind", "status", "words"),
    [case[1:] for case in CORPUS],
    ids=[case[0] for case in CORPUS],
)
def test_a_hostile_request_is_refused_with_its_reason_and_leaves_nothing(
    api, model, others, enqueued, _media_root, method, path, body, kind, status, words
):
    their_model, their_run = others
    ids = {"model": model.pk, "their_model": their_model.pk, "their_run": their_run.pk}
    path = path.format(**ids)
    before = state(_media_root)
    send = getattr(api, method)
    if kind == "multipart":
        from django.core.files.uploadedfile import SimpleUploadedFile

        name, data = body["file"]
        response = send(path, {"file": SimpleUploadedFile(name, data)}, format="multipart")
    elif kind == "json":
        response = send(path, json.dumps(_fill(body, ids)), content_type="application/json")
    elif kind == "raw-json":
        response = send(path, body, content_type="application/json")
    else:
        response = send(path)
    assert response.status_code == status, response.content[:300]
    error = response.json()["error"]
    assert words in json.dumps(error), error
    assert state(_media_root) == before
    assert enqueued == []
