"""The accuracy stage through the pipeline: candidates, uploaded inputs, verdicts."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from engine.accuracy.weights import perturb_weight, randomize_fills
from engine.stages import RunOptions
from jobs.tasks import run_stage
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import InputData, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def trained_like(tmp_path):
    """SqueezeNet with random weights in a sane range (the shipped fills overflow fp16)."""
    path = tmp_path / "squeezenet_random.onnx"
    model = randomize_fills(onnx.load(str(SQUEEZENET)), seed=0)
    for i, node in enumerate(model.graph.node):  # the shipped nodes have no names
        node.name = f"{node.op_type.lower()}_{i}"
    onnx.save(model, str(path))
    return path


def run_all(user, model, stages, options, target, enqueued, capture):
    with capture(execute=True):
        run = pipeline.create_run(
            owner=user, model=model, target=target, options=RunOptions.from_dict(stages, options)
        )
    for i in range(len(run.config["stages"])):
        with capture(execute=True):
            run_stage.apply(args=[enqueued[i].pk])
    run.refresh_from_db()
    return run


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_fp16_of_the_shipped_squeezenet_fails_and_names_the_layer(
    user, enqueued, django_capture_on_commit_callbacks, client
):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    host = Target.objects.get(name="host")
    run = run_all(
        user,
        model,
        ["accuracy"],
        {"accuracy": {"candidate": "fp16"}},
        host,
        enqueued,
        django_capture_on_commit_callbacks,
    )
    assert run.status == "succeeded"  # the check ran; its verdict is the finding
    report = run.stages.get(stage="accuracy").result
    assert report["verdict"] == "fail"
    assert report["first_divergent_node"]
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "FAIL" in page and 'id="accuracy-first-divergent"' in page


def test_a_perturbed_copy_fails_at_the_perturbed_layer(
    user, enqueued, django_capture_on_commit_callbacks, trained_like, tmp_path
):
    model = store_model_file(trained_like, owner=user, name="sq-random.onnx")
    original = onnx.load(str(trained_like))
    conv = [n for n in original.graph.node if n.op_type == "Conv"][8]  # mid-network
    broken_path = tmp_path / "broken.onnx"
    onnx.save(perturb_weight(original, conv.input[1], factor=1.5), str(broken_path))
    other = store_model_file(broken_path, owner=user, name="sq-broken.onnx")
    run = run_all(
        user,
        model,
        ["accuracy"],
        {"accuracy": {"candidate": "other", "other_model": other.pk}},
        Target.objects.get(name="host"),
        enqueued,
        django_capture_on_commit_callbacks,
    )
    report = run.stages.get(stage="accuracy").result
    assert report["verdict"] == "fail"
    assert report["first_divergent_node"] == conv.name


def test_partitioned_execution_passes_against_the_whole_model(
    user, enqueued, django_capture_on_commit_callbacks, trained_like
):
    model = store_model_file(trained_like, owner=user, name="sq-random.onnx")
    phone = Target.objects.filter(name__startswith="phone-").first()
    run = run_all(
        user,
        model,
        ["partition", "accuracy"],
        {"partition": {"algorithms": ["heft"]}, "accuracy": {"candidate": "partitioned"}},
        phone,
        enqueued,
        django_capture_on_commit_callbacks,
    )
    assert run.status == "succeeded", run.error_message
    report = run.stages.get(stage="accuracy").result
    assert report["verdict"] == "pass", report["reason"]
    assert report["candidate"]["kind"] == "partitioned"


def test_uploaded_inputs_are_checked_and_used(
    user, enqueued, django_capture_on_commit_callbacks, _media_root
):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    api = APIClient()
    api.force_authenticate(user)
    url = f"/api/v1/models/{model.pk}/inputs/"
    data = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)

    def post(payload: bytes, name="in.npz"):
        return api.post(url, {"file": SimpleUploadedFile(name, payload)}, format="multipart")

    wrong_name = post(npz_bytes(image=data))
    assert wrong_name.status_code == 400 and "data_0" in wrong_name.json()["error"]["message"]
    wrong_shape = post(npz_bytes(data_0=data[:, :, :100]))
    assert wrong_shape.status_code == 400 and "224" in wrong_shape.json()["error"]["message"]
    wrong_dtype = post(npz_bytes(data_0=data.astype(np.float64)))
    assert wrong_dtype.status_code == 400 and "float" in wrong_dtype.json()["error"]["message"]
    corrupted = post(b"PK\x03\x04 this is not a zip archive")
    assert corrupted.status_code == 400
    pickled = post(npz_bytes(data_0=np.array([{"evil": 1}], dtype=object)))
    assert pickled.status_code == 400 and "pickle" in pickled.json()["error"]["message"].lower()
    assert InputData.objects.count() == 0
    assert (
        not list((_media_root / "inputs").rglob("*.npz"))
        if (_media_root / "inputs").exists()
        else True
    )

    good = post(npz_bytes(data_0=data))
    assert good.status_code == 201, good.json()
    assert good.json()["tensors"] == [
        {"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}
    ]
    run = run_all(
        user,
        model,
        ["accuracy"],
        {"accuracy": {"candidate": "simplified", "inputs": good.json()["id"]}},
        Target.objects.get(name="host"),
        enqueued,
        django_capture_on_commit_callbacks,
    )
    report = run.stages.get(stage="accuracy").result
    assert report["inputs"]["source"] == "npz:" + InputData.objects.get().file.name.split("/")[-1]
    assert report["verdict"] == "pass", report["reason"]


def test_other_users_input_sets_cannot_be_named(user, other_user, _media_root):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    theirs = store_model_file(SQUEEZENET, owner=other_user, name="sq.onnx")
    api = APIClient()
    api.force_authenticate(user)
    response = api.post(
        "/api/v1/runs/",
        {
            "model": model.pk,
            "stages": ["accuracy"],
            "options": {"accuracy": {"candidate": "other", "other_model": theirs.pk}},
        },
        format="json",
    )
    assert response.status_code == 400
    assert "no model" in str(response.json()["error"]["detail"])
