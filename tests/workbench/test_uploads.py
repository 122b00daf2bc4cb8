"""Uploads through the API and the browser form: good files stored once, bad files refused
with a message and nothing kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.conftest import SQUEEZENET
from workbench.models import OnnxModel, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def upload(api, data: bytes, name: str = "m.onnx"):
    return api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile(name, data), "name": name},
        format="multipart",
    )


def stored_files(media: Path) -> list[Path]:
    return (
        [p for p in (media / "models").rglob("*") if p.is_file()]
        if (media / "models").exists()
        else []
    )


def test_upload_stores_model_content_addressed_and_once(api, _media_root):
    data = SQUEEZENET.read_bytes()
    first = upload(api, data, "squeezenet.onnx")
    assert first.status_code == 201, first.json()
    body = first.json()
    assert body["node_count"] == 105
    assert body["inputs"][0]["shape"] == [1, 3, 224, 224]
    assert body["opsets"] == {"ai.onnx": 9}
    again = upload(api, data, "copy.onnx")
    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    files = stored_files(_media_root)
    assert [f.name for f in files] == [f"{body['sha256']}.onnx"]
    # As on the web page, a new upload is analyzed at once (the same bytes again are not).
    run = Run.objects.get(pk=body["analysis_run"])
    assert run.model_id == body["id"] and run.config["stages"] == ["analyze"]
    assert run.target.name == "host" and again.json()["analysis_run"] is None


def test_an_api_upload_can_skip_the_analysis_and_a_limit_keeps_the_upload(api, settings):
    quiet = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile("a.onnx", SQUEEZENET.read_bytes()), "analyze": "false"},
        format="multipart",
    )
    assert quiet.status_code == 201 and quiet.json()["analysis_run"] is None
    assert Run.objects.count() == 0
    bad = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile("a.onnx", b"x"), "analyze": "maybe"},
        format="multipart",
    )
    assert bad.status_code == 400 and "analyze must be" in bad.json()["error"]["message"]
    settings.MAX_ACTIVE_RUNS = 0
    inception = SQUEEZENET.parent / "light_inception_v1.onnx"
    limited = upload(api, inception.read_bytes(), "inception.onnx")
    assert limited.status_code == 201 and limited.json()["analysis_run"] is None
    assert "runs queued or running" in limited.json()["analysis_not_started"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "the file is empty (0 bytes): upload an .onnx model file"),
        (
            b"this is a text file, not a model\n" * 10,
            "not an ONNX model: the file does not parse as an ONNX protobuf",
        ),
        (  # truncated mid-graph
            SQUEEZENET.read_bytes()[:7000],
            "not an ONNX model: the file does not parse as an ONNX protobuf",
        ),
    ],
    ids=["empty", "not-onnx", "truncated"],
)
def test_bad_files_are_refused_with_a_message_and_nothing_kept(api, _media_root, data, fragment):
    response = upload(api, data)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(fragment), error
    assert OnnxModel.objects.count() == 0
    assert stored_files(_media_root) == []


def test_oversized_upload_is_refused_before_it_is_kept(api, settings, _media_root):
    settings.MAX_UPLOAD_BYTES = 4096
    response = upload(api, SQUEEZENET.read_bytes())
    assert response.status_code == 413
    assert "upload limit" in response.json()["error"]["message"]
    assert OnnxModel.objects.count() == 0
    assert stored_files(_media_root) == []


def test_missing_file_field_is_a_clear_error(api):
    response = api.post("/api/v1/models/", {"name": "x"}, format="multipart")
    assert response.status_code == 400
    assert "no file" in response.json()["error"]["message"]


def test_a_name_with_a_nul_byte_is_refused_not_a_server_error(api, _media_root):
    response = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile("m.onnx", SQUEEZENET.read_bytes()), "name": "a\x00b"},
        format="multipart",
    )
    assert response.status_code == 400
    assert "name" in response.json()["error"]["detail"]
    assert OnnxModel.objects.count() == 0


def test_browser_upload_shows_the_error_on_the_page(client, user, _media_root):
    client.force_login(user)
    response = client.post("/models/", {"file": SimpleUploadedFile("notes.onnx", b"garbage" * 100)})
    assert response.status_code == 400
    assert "not an ONNX model" in response.content.decode()
    assert OnnxModel.objects.count() == 0


def test_browser_oversized_upload_shows_the_limit(client, user, settings):
    settings.MAX_UPLOAD_BYTES = 1000
    client.force_login(user)
    response = client.post("/models/", {"file": SimpleUploadedFile("big.onnx", b"x" * 50_000)})
    assert response.status_code == 413
    assert "upload limit" in response.content.decode()


def test_browser_upload_starts_an_analysis_run(
    client, user, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", sent.append)
    client.force_login(user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/models/", {"file": SimpleUploadedFile("sq.onnx", SQUEEZENET.read_bytes())}
        )
    assert response.status_code == 302
    model = OnnxModel.objects.get()
    run = model.runs.get()
    assert response["Location"] == f"/runs/{run.pk}/"
    assert [s.stage for s in sent] == ["analyze"]


def test_a_large_model_is_checked_in_a_process_of_its_own(api, _media_root, monkeypatch):
    """Over ``IN_PROCESS_MAX_BYTES`` the header is read by ``workbench.header_check`` in a
    child process (the web process never parses it); the result is the same."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import workbench.uploads

    weight = numpy_helper.from_array(np.ones((1024, 5120), np.float32), "w")  # 20 MB
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5120])],
        [weight],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = data.SerializeToString()
    assert len(data) > workbench.uploads.IN_PROCESS_MAX_BYTES
    in_process = []
    monkeypatch.setattr(workbench.uploads, "read_header", lambda *a, **k: in_process.append(a))
    response = upload(api, data, "big.onnx")
    assert response.status_code == 201, response.json()
    assert in_process == []
    body = response.json()
    assert body["node_count"] == 1
    assert body["inputs"] == [{"name": "x", "shape": ["batch", 1024], "dtype": "float32"}]
    refused = upload(api, data[: len(data) // 2], "truncated.onnx")
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "invalid_model",
        "message": "not an ONNX model: the file does not parse as an ONNX protobuf "
        "(Error parsing message with type 'onnx.ModelProto')",
    }
    assert in_process == []
