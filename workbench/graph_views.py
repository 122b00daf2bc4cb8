"""The model graph on a page of its own and as JSON (which the model page's graph tab
fetches too): the layout built once per analysis (kept by ``workbench.graph_store``) with
every stage's overlay from the model's latest result of that stage. Neither view decodes
the model's analysis when the layout is built already: on 50,000 nodes that alone took
longer than the 1 s the first view may take."""

from __future__ import annotations

import gzip

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from frontend.figures.graph import StageGraph, graph_payload
from frontend.figures.graph.kernels import kernel_analysis, kernel_metrics
from frontend.graph_overlays import OVERLAYS, stage_overlays
from workbench.graph_store import (
    model_graph_gzip,
    model_key,
    model_levels_gzip,
    overlays_payload,
    upload_key,
    upload_readable,
)
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
    results = latest_results(model)
    context = {"model": model, **graph_context(model, results)}
    if "compile" in results:
        context.update(kernel_context(model, results["compile"]))
    if context.get("graph_src"):
        context.update(upload_context(model))
    context.setdefault("graph_links", {"kernel_of": {}, "nodes_of": {}})
    return render(request, "workbench/model_graph.html", context)


def upload_context(model: OnnxModel) -> dict:
    """The model's own graph as uploaded, beside the prepared one (laid out when first
    asked for, then kept like the prepared graph's levels); none when its file is gone."""
    key = upload_key(model.pk)
    if key is None or not upload_readable(model):
        return {}
    return {
        "upload_graph": {
            "src": reverse("model-graph-data", args=[model.pk, key]),
            "levels": reverse("model-graph-levels", args=[model.pk, key]),
            "overlays": [],
            "node_count": model.node_count,
        }
    }


def kernel_context(model: OnnxModel, compile_result: dict) -> dict:
    """The compiled kernels' graph beside the model's, and which nodes each kernel runs
    (the page links a selection on one side to the other)."""
    analysis = OnnxModel.objects.filter(pk=model.pk).values_list("analysis", flat=True).first()
    kernels, nodes_of = kernel_analysis(analysis or {}, compile_result)
    if not kernels["node_list"]:
        return {}
    metrics = kernel_metrics(compile_result)
    initial = "kernel_us" if "kernel_us" in metrics else None
    kernel_of = {node: kernel for kernel, names in nodes_of.items() for node in names}
    return {
        "kernel_graph": graph_payload(kernels, metrics, initial=initial),
        "graph_links": {"kernel_of": kernel_of, "nodes_of": nodes_of},
        "folded_nodes": (analysis.get("preparation") or {}).get("folded_nodes"),
    }


def graph_context(model: OnnxModel, results: dict[str, dict] | None = None) -> dict:
    """What a page showing the model's graph needs: the address of its first view and of
    its levels, and the overlays of ``results`` (default: the model's latest of each
    stage); empty when the model has no analysis yet."""
    key = model_key(model.pk)
    if key is None:
        return {}
    return {
        "graph_src": reverse("model-graph-data", args=[model.pk, key]),
        "graph_levels": reverse("model-graph-levels", args=[model.pk, key]),
        "graph_overlays": overlays_payload(
            stage_overlays(latest_results(model) if results is None else results)
        ),
    }


def run_graph(model: OnnxModel, graph: StageGraph, *, inline: bool = False) -> dict:
    """A run page's graph. When the run's analysis is the model's current one, the page
    fetches the model's stored levels as they open (as the model page does) and gets only
    the stage overlays and the addresses; otherwise (the model was analyzed again since,
    or the page is saved as one file) every level comes inline."""
    if not inline and is_current_analysis(model.pk, graph.analysis):
        key = model_key(model.pk)
        if key is not None:
            return {
                "src": reverse("model-graph-data", args=[model.pk, key]),
                "levels": reverse("model-graph-levels", args=[model.pk, key]),
                "overlays": overlays_payload(graph.metrics),
                "initial_metric": graph.initial,
                "node_count": graph.analysis.get("nodes"),
            }
    return graph.payload()


def is_current_analysis(model_pk: int, analysis: dict) -> bool:
    """Whether ``analysis`` is the model's stored one, asked of the database without
    reading the stored one: its duration (a float that never repeats) and node count."""
    seconds = analysis.get("analysis_s")
    if seconds is None:
        return False
    return OnnxModel.objects.filter(
        pk=model_pk, analysis__analysis_s=seconds, analysis__nodes=analysis.get("nodes")
    ).exists()


@login_required
def model_graph_data(request, pk: int, key: str):
    """The graph's base, gzipped; its address names what it was built from, so a browser
    keeps it until the analysis changes."""
    get_object_or_404(OnnxModel.objects.only("pk"), pk=pk, owner=request.user)
    body = model_graph_gzip(pk, key)
    if body is None:
        raise Http404("no such graph: the model was analyzed again, reload the page")
    return gzipped_json(request, body)


MAX_GROUPS = 2000  # levels asked for at once by number; "all" asks for every one


@login_required
def model_graph_levels(request, pk: int, key: str):
    """Levels of the graph laid out on demand: ``?g=3,17`` (group numbers, -1 the top)
    or ``?g=all``; each one is laid out the first time it is asked for, then kept."""
    get_object_or_404(OnnxModel.objects.only("pk"), pk=pk, owner=request.user)
    asked = request.GET.get("g", "")
    try:
        groups = None if asked == "all" else [int(g) for g in asked.split(",")]
    except ValueError:
        return HttpResponseBadRequest("g: comma-separated group numbers, or all")
    if groups is not None and len(groups) > MAX_GROUPS:
        return HttpResponseBadRequest(f"g: at most {MAX_GROUPS} groups at once, or all")
    try:
        body = model_levels_gzip(pk, key, groups)
    except ValueError as e:
        return HttpResponseBadRequest(str(e))
    if body is None:
        raise Http404("no such graph: the model was analyzed again, reload the page")
    return gzipped_json(request, body)


def gzipped_json(request, body: bytes) -> HttpResponse:
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(body, content_type="application/json")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(gzip.decompress(body), content_type="application/json")
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    response["Vary"] = "Accept-Encoding"
    return response
