"""The model graph on a page of its own and as JSON (which the model page's graph tab
fetches too): the layout built once per analysis (kept by ``workbench.graph_store``) with
every stage's overlay from the model's latest result of that stage. Neither view decodes
the model's analysis when the layout is built already: on 50,000 nodes that alone took
longer than the 1 s the first view may take."""

from __future__ import annotations

import gzip

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from frontend.graph_overlays import OVERLAYS, stage_overlays
from workbench.graph_store import model_graph_gzip, model_key, overlays_payload
from workbench.models import OnnxModel, StageResult


def latest_results(model: OnnxModel) -> dict[str, dict]:
    """The model's latest succeeded result of each stage that has an overlay."""
    results = {}
    for stage in OVERLAYS:
        found = (
            StageResult.objects.filter(run__model=model, stage=stage, status="succeeded")
            .exclude(result=None)
            .order_by("-finished_at", "-pk")
            .values_list("result", flat=True)
            .first()
        )
        if found:
            results[stage] = found
    return results


@login_required
def model_graph_page(request, pk: int):
    model = get_object_or_404(OnnxModel.objects.defer("analysis"), pk=pk, owner=request.user)
    return render(request, "workbench/model_graph.html", {"model": model, **graph_context(model)})


def graph_context(model: OnnxModel) -> dict:
    """What a page showing the model's graph needs: the address of its base and the
    overlays (empty when the model has no analysis yet)."""
    key = model_key(model.pk)
    if key is None:
        return {}
    return {
        "graph_src": reverse("model-graph-data", args=[model.pk, key]),
        "graph_overlays": overlays_payload(stage_overlays(latest_results(model))),
    }


@login_required
def model_graph_data(request, pk: int, key: str):
    """The graph's base, gzipped; its address names what it was built from, so a browser
    keeps it until the analysis changes."""
    get_object_or_404(OnnxModel.objects.only("pk"), pk=pk, owner=request.user)
    body = model_graph_gzip(pk, key)
    if body is None:
        raise Http404("no such graph: the model was analyzed again, reload the page")
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(body, content_type="application/json")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(gzip.decompress(body), content_type="application/json")
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    response["Vary"] = "Accept-Encoding"
    return response
