"""The model graph's page and data: the layout is built once per analysis (by the analyze
stage, or on first view) and served as stored, gzipped, at an address that names the
analysis; overlays of the model's stage results come with the page; anyone else gets 404."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from engine.graph import analyze_model
from tests.conftest import SQUEEZENET
from workbench import graph_store
from workbench.graph_store import STORE, model_key, prune, warm_graph
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
    real = graph_store.first_view

    def counting(tree):
        built.append(1)
        return real(tree)

    monkeypatch.setattr("workbench.graph_store.first_view", counting)
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
        assert base["levels"][0]["group"] == -1
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


def levels_of(client, model, query: str):
    key = model_key(model.pk)
    return client.get(f"/models/{model.pk}/graph/{key}/levels.json?g={query}")


def test_a_level_is_laid_out_when_first_asked_for_then_kept(client, user, model, monkeypatch):
    warm_graph(model.pk)
    client.force_login(user)
    tree = STORE.get(model_key(model.pk), "tree.marshal")
    parent = tree["groups"]["parent"]
    deep = (
        next(g for g, p in enumerate(parent) if p >= 0 and parent[p] >= 0)
        if any(p >= 0 and parent[p] >= 0 for p in parent)
        else len(parent) - 1
    )
    laid = []
    real = graph_store.level
    monkeypatch.setattr("workbench.graph_store.level", lambda t, g: laid.append(g) or real(t, g))
    for _ in range(2):
        response = levels_of(client, model, f"{deep},-1")
        assert response.status_code == 200
        sent = json.loads(response.content)["levels"]
        assert [lv["group"] for lv in sent] == [deep, -1]
    assert laid.count(deep) <= 1 and -1 not in laid  # the top was laid out by warm_graph
    everything = json.loads(levels_of(client, model, "all").content)["levels"]
    assert len(everything) == len(parent) + 1


@pytest.mark.parametrize("query", ["", "x", "1,,2", "99999", "-2"])
def test_a_bad_level_request_is_a_400(client, user, model, query):
    warm_graph(model.pk)
    client.force_login(user)
    assert levels_of(client, model, query).status_code == 400


def test_levels_of_a_stale_key_are_404_and_other_users_get_404(client, other_user, model):
    warm_graph(model.pk)
    key = model_key(model.pk)
    client.force_login(other_user)
    assert client.get(f"/models/{model.pk}/graph/{key}/levels.json?g=-1").status_code == 404


def test_stored_layouts_go_with_their_model_and_the_store_is_bounded(user, other_user, model):
    warm_graph(model.pk)
    first = model_key(model.pk)
    assert STORE.entry(first).is_dir()
    # Analyzed again: the old entry is pruned, the new one kept.
    model.analysis = {**model.analysis, "analysis_s": 123.0}
    model.save(update_fields=["analysis"])
    warm_graph(model.pk)  # prunes
    second = model_key(model.pk)
    assert not STORE.entry(first).exists() and STORE.entry(second).is_dir()
    # Over the bound: the least recently used go first.
    other = OnnxModel.objects.create(
        owner=other_user,
        name="again.onnx",
        file=model.file.name,
        sha256=model.sha256,
        size_bytes=model.size_bytes,
        ir_version=model.ir_version,
        node_count=model.node_count,
        analysis={**model.analysis, "analysis_s": 7.0},
    )
    warm_graph(other.pk)
    newest = model_key(other.pk)
    os.utime(STORE.entry(second), (1, 1))
    size = sum(f.stat().st_size for f in STORE.entry(newest).iterdir())
    assert prune(max_bytes=size) == [second]
    assert STORE.entry(newest).is_dir()
    # A deleted model's entries go with it.
    other.delete()
    assert not STORE.entry(newest).exists()
    assert prune() == []


def analyzed_and_profiled(model: OnnxModel, analysis: dict) -> Run:
    """A run with an analyze result (``analysis``) and a measured profile."""
    profiled(model)
    run = Run.objects.get(model=model)
    profile = run.stages.get(stage="profile")
    for op in profile.result["ops"]:
        op.update(flops=0, bytes=0, status="ok")  # what the profile tab prints
    profile.save(update_fields=["result"])
    result = {"macs": 0, **analysis}
    StageResult.objects.create(
        run=run, stage="analyze", position=1, status=Status.SUCCEEDED, result=result
    )
    return run


def test_a_run_page_fetches_the_models_levels_and_sends_only_its_overlays(client, user, model):
    warm_graph(model.pk)
    run = analyzed_and_profiled(model, model.analysis)
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/")
    html = page.content.decode()
    key = model_key(model.pk)
    assert f'data-src="/models/{model.pk}/graph/{key}.json"' in html
    assert f'data-levels="/models/{model.pk}/graph/{key}/levels.json"' in html
    assert 'data-initial="latency_us"' in html
    assert 'id="graph-data"' not in html  # no layout inline
    overlays = html.split('id="graph-overlays"')[1].split(">", 1)[1].split("</script>")[0]
    (latency,) = json.loads(overlays)
    assert latency["key"] == "latency_us" and set(latency["values"]) == {5.0}
    assert len(html) < 200_000
    # The page saved as one file carries every level.
    saved = client.get(f"/runs/{run.pk}/?export=html").content.decode()
    assert 'id="graph-data"' in saved and "data-levels" not in saved


def test_a_run_of_an_older_analysis_carries_its_own_graph_inline(client, user, model):
    warm_graph(model.pk)
    run = analyzed_and_profiled(model, {**model.analysis, "analysis_s": 0.000123})
    client.force_login(user)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="graph-data"' in html and "data-levels" not in html


def test_the_upload_s_own_graph_is_laid_out_on_first_view_and_kept(client, user, model):
    warm_graph(model.pk)
    client.force_login(user)
    page = client.get(f"/models/{model.pk}/graph/")
    upload = page.context["upload_graph"]
    key = graph_store.upload_key(model.pk)
    assert upload["src"] == f"/models/{model.pk}/graph/{key}.json"
    assert 'id="upload"' in page.content.decode()
    assert not STORE.entry(key).is_dir()  # laid out when the browser first asks
    data = client.get(upload["src"], HTTP_ACCEPT_ENCODING="gzip")
    assert data.status_code == 200
    names = json.loads(gzip.decompress(data.content))["nodes"]["name"]
    prepared = {n["name"] for n in model.analysis["node_list"]}
    assert len(names) == model.node_count and set(names) >= prepared
    levels = client.get(upload["levels"] + "?g=-1")
    assert json.loads(levels.content)["levels"][0]["group"] == -1
    assert STORE.entry(key).is_dir()
    assert key not in prune()  # the upload's layout stays while its model does
    model.delete()
    assert not STORE.entry(key).is_dir()


def test_no_upload_graph_when_the_file_is_gone(client, user, model):
    warm_graph(model.pk)
    model.file.storage.delete(model.file.name)
    client.force_login(user)
    page = client.get(f"/models/{model.pk}/graph/")
    assert "upload_graph" not in page.context
    assert 'id="upload"' not in page.content.decode()


def test_kernels_and_the_upload_share_the_right_hand_side_as_two_tabs(client, user, model):
    warm_graph(model.pk)
    nodes = model.analysis["node_list"]
    kernels = [
        {"id": f"k{i}", "nodes": [n["name"] for n in nodes[j : j + 3]], "time_us": 1.0}
        for i, j in enumerate(range(0, len(nodes), 3))
    ]
    run = Run.objects.create(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["compile"]},
        status=Status.SUCCEEDED,
    )
    StageResult.objects.create(
        run=run, stage="compile", position=0, status=Status.SUCCEEDED, result={"kernels": kernels}
    )
    client.force_login(user)
    html = client.get(f"/models/{model.pk}/graph/").content.decode()
    for part in ('id="kernels"', 'id="upload"', 'id="tab-kernels"', 'id="tab-upload"'):
        assert part in html
    assert "workbench/tabs.js" in html and "workbench/graph-sides.js" in html
