"""The model graph's page and data: the layout is built once per analysis (by the analyze
stage, or on first view) and served as stored, gzipped, at an address that names the
analysis; overlays of the model's stage results come with the page; anyone else gets 404."""

from __future__ import annotations

import gzip
import json

import pytest

from engine.graph import analyze_model
from frontend.figures.graph import store
from tests.conftest import SQUEEZENET
from workbench.graph_store import STORE, model_key, warm_graph
from workbench.models import OnnxModel, Run, StageResult, Status, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def model(user, tmp_path, monkeypatch) -> OnnxModel:
    monkeypatch.setattr(STORE, "folder", tmp_path / "graphs")
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    model.analysis = analyze_model(SQUEEZENET).to_dict()
    model.save(update_fields=["analysis"])
    return model


def profiled(model: OnnxModel) -> None:
    run = Run.objects.create(
        owner=model.owner,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["profile"]},
        status=Status.SUCCEEDED,
    )
    ops = [
        {"name": n["name"], "op_type": n["op_type"], "latency_us": 5.0}
        for n in model.analysis["node_list"]
    ]
    StageResult.objects.create(
        run=run,
        stage="profile",
        position=0,
        status=Status.SUCCEEDED,
        result={"measured": True, "ops": ops},
    )


def test_the_layout_is_built_once_and_served_gzipped(client, user, model, monkeypatch):
    built = []
    real = store.cached

    def counting(analysis, version, build):
        return real(analysis, version, lambda a: built.append(1) or build(a))

    monkeypatch.setattr("workbench.graph_store.cached", counting)
    warm_graph(model.pk)  # what the analyze stage does
    profiled(model)
    client.force_login(user)
    for _ in range(2):
        page = client.get(f"/models/{model.pk}/graph/")
        assert page.status_code == 200
        overlays = page.context["graph_overlays"]
        data = client.get(page.context["graph_src"], HTTP_ACCEPT_ENCODING="gzip")
        assert data["Content-Encoding"] == "gzip" and "immutable" in data["Cache-Control"]
        base = json.loads(gzip.decompress(data.content))
        assert base["nodes"]["name"] == [n["name"] for n in model.analysis["node_list"]]
    assert len(built) == 1
    (latency,) = overlays
    assert latency["label"] == "latency, measured (µs)" and set(latency["values"]) == {5.0}

    # A new analysis is a new address; the old one still names the old layout.
    old = page.context["graph_src"]
    model.analysis = {**model.analysis, "analysis_s": 123.0}
    model.save(update_fields=["analysis"])
    assert model_key(model.pk) not in old
    assert client.get(old).status_code == 200
    assert client.get(old.replace(old.split("-")[-1], "0" * 32 + ".json")).status_code == 404


def test_other_users_get_404(client, other_user, model):
    warm_graph(model.pk)
    src = f"/models/{model.pk}/graph/{model_key(model.pk)}.json"
    client.force_login(other_user)
    assert client.get(f"/models/{model.pk}/graph/").status_code == 404
    assert client.get(src).status_code == 404
