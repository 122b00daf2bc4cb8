"""Server-rendered pages. Thin: authorize, validate, call a service, render."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from rest_framework.authtoken.models import Token

from engine.report.headlines import headline_figures
from frontend.comparison import comparison_context
from frontend.dashboard import verdicts, what_to_do
from frontend.figures.compare import history_lines
from frontend.figures.graph import merge_stage_graphs
from frontend.presenters import present
from frontend.units import format_figure
from workbench import pipeline, tokens
from workbench.authentication import expires_at
from workbench.compare import (
    CompareRejected,
    compare_for,
    figures_of,
    model_history,
    parse_run_ids,
    pin_baseline,
)
from workbench.devices import tracker_devices
from workbench.downloads import artifact_response
from workbench.exports import standalone_html
from workbench.forms import StartRunForm, UploadInputsForm, UploadModelForm
from workbench.graph_views import graph_context, run_graph
from workbench.models import Artifact, OnnxModel, Run, Target
from workbench.snapshots import light_stages, run_snapshot
from workbench.targets import (
    TargetRejected,
    delete_user_target,
    latest_versions,
    parse_profile,
    save_user_target,
    visible_targets,
)
from workbench.uploads import (
    UploadRejected,
    check_not_too_large,
    store_input_upload,
    store_model_upload,
)
from workbench.workers import serving_counts
from workbench.workers import worker_list as listed_workers


@login_required
def model_list(request):
    form = UploadModelForm()
    status = 200
    if request.method == "POST":
        try:
            form = UploadModelForm(request.POST, request.FILES)
            check_not_too_large(request)  # after FILES is parsed: the handler sets the flag
            if form.is_valid():
                model, created = store_model_upload(
                    form.cleaned_data["file"], owner=request.user, name=form.cleaned_data["name"]
                )
                if not created:
                    messages.info(request, f"You already uploaded this exact file as {model.name}.")
                    return redirect("model-detail", pk=model.pk)
                run = pipeline.start_analysis(request.user, model)
                messages.success(
                    request, f"Uploaded {model.name}; analysis started (run {run.pk})."
                )
                return redirect("run-detail", pk=run.pk)
            status = 400
        except UploadRejected as e:
            form.add_error("file", e.message)
            status = e.status
    models = OnnxModel.objects.filter(owner=request.user).prefetch_related("runs")
    return render(
        request, "workbench/model_list.html", {"models": models, "form": form}, status=status
    )


@login_required
def model_detail(request, pk: int):
    model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
    form = StartRunForm(
        user=request.user, model=model, initial={"target": pipeline.default_target()}
    )
    return _model_page(request, model, form)


def _model_page(request, model: OnnxModel, form: StartRunForm, status: int = 200):
    shown = present("analyze", model.analysis) or {}
    return render(
        request,
        "workbench/model_detail.html",
        {
            "model": model,
            "analysis": model.analysis,
            "figures": shown.get("figures", {}),
            "top_nodes": shown.get("top_nodes", []),
            "runs": model.runs.select_related("target")[:20],
            "form": form,
            "inputs_form": UploadInputsForm(),
            "input_sets": model.input_sets.all(),
            # The graph tab fetches the layout: the page itself stays light on big models.
            **graph_context(model),
            "history": history_lines(model_history(model)),
        },
        status=status,
    )


@login_required
@require_POST
def model_baseline(request, pk: int):
    """Pin a run of the model as its baseline, or unpin (an empty ``run``)."""
    model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
    raw = request.POST.get("run", "")
    try:
        run_id = int(raw) if raw else None
        if run_id is not None and not 0 < run_id < 2**63:
            raise ValueError
        pin_baseline(model, run_id)
    except (ValueError, CompareRejected) as e:
        message = e.message if isinstance(e, CompareRejected) else f"'{raw[:20]}' is not a run id"
        messages.error(request, f"Baseline not changed: {message}")
        return HttpResponseRedirect(reverse("model-detail", args=[model.pk]) + "#tab-runs")
    if run_id is None:
        messages.success(request, "No baseline pinned.")
    else:
        messages.success(request, f"Run {run_id} is this model's baseline.")
    return HttpResponseRedirect(reverse("model-detail", args=[model.pk]) + "#tab-runs")


@login_required
@require_POST
def inputs_upload(request, pk: int):
    model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
    form = UploadInputsForm(request.POST, request.FILES)
    try:
        check_not_too_large(request)
        if not form.is_valid():
            raise UploadRejected("attach an .npz file")
        data = store_input_upload(form.cleaned_data["file"], model=model)
        messages.success(
            request, f"Inputs {data.name} fit the model; pick them for an accuracy run."
        )
    except UploadRejected as e:
        messages.error(request, f"Inputs not kept: {e.message}")
    return redirect("model-detail", pk=model.pk)


@login_required
@require_POST
def model_delete(request, pk: int):
    model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
    for run in model.runs.filter(status__in=["queued", "running"]):
        pipeline.cancel_run(run)
    name = model.name
    model.delete()
    messages.success(request, f"Deleted {name}.")
    return redirect("model-list")


@login_required
@require_POST
def run_create(request, pk: int):
    model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
    form = StartRunForm(request.POST, user=request.user, model=model)
    if not form.is_valid():
        messages.error(request, "Could not start the run: see the fields marked below.")
        return _model_page(request, model, form, status=400)
    run = pipeline.create_run(
        owner=request.user,
        model=model,
        target=form.cleaned_data["target"],
        options=form.run_options,
    )
    return redirect("run-detail", pk=run.pk)


@login_required
def run_list(request):
    runs = Run.objects.filter(owner=request.user).select_related("model", "target")[:200]
    return render(request, "workbench/run_list.html", {"runs": runs})


@login_required
def run_detail(request, pk: int):
    run = get_object_or_404(
        Run.objects.select_related("model", "target"), pk=pk, owner=request.user
    )
    if run.is_active:
        pipeline.reap_stale_stages(run_ids=[run.pk])
        run.refresh_from_db()
    stages = list(run.stages.all())
    results = {s.stage: s.result for s in stages if s.status == "succeeded" and s.result}
    presentations = [p for p in (present(st, r, results) for st, r in results.items()) if p]
    # One graph view per page (its element ids are fixed): the latest stage's, with every
    # other stage's colours added to it; its levels fetched as they open (inline when the
    # page is saved as one file).
    with_graph = [shown for shown in presentations if shown.get("graph")]
    if with_graph:
        graph = merge_stage_graphs([shown.pop("graph") for shown in with_graph])
        inline = request.GET.get("export") == "html"
        with_graph[-1]["graph"] = run_graph(run.model, graph, inline=inline)
    figures = [f.to_dict() for f in headline_figures(results)]  # results are at hand
    context = {
        "run": run,
        "stages": stages,
        "answers": verdicts({f["key"]: f for f in figures}),
        "figure_rows": [{**f, "text": format_figure(f["value"], f["unit"])} for f in figures],
        "snapshot": run_snapshot(run),
        "presentations": presentations,
        "artifacts": run.artifacts.all(),
        "retries": run.retries.order_by("pk"),
    }
    if request.GET.get("export") == "html":
        return standalone_html(request, "workbench/run_detail.html", context, f"run-{run.pk}")
    return render(request, "workbench/run_detail.html", context)


@login_required
def artifact_download(request, pk: int):
    artifact = get_object_or_404(Artifact, pk=pk, run__owner=request.user)
    return artifact_response(artifact)


@login_required
@require_POST
def run_save_calibration(request, pk: int):
    """Keep the calibrated modeled copy of a measured profile as one of the user's targets."""
    run = get_object_or_404(Run, pk=pk, owner=request.user)
    stage = run.stages.filter(stage="profile", status="succeeded").first()
    calibration = (stage.result or {}).get("calibration") if stage else None
    if not calibration:
        raise Http404("this run has no calibrated profile")
    document = dict(calibration["profile"])
    document["name"] = f"{run.target.name}-calibrated"
    document["description"] = (
        f"{run.target.name} modeled with its measured roofs, calibrated on {run.model.name} "
        f"(run {run.pk})"
    )
    try:
        target = save_user_target(request.user, document)
    except TargetRejected as e:
        messages.error(request, f"Could not save the calibrated target: {e.message}")
        return redirect("run-detail", pk=run.pk)
    messages.success(request, f"Saved {target.name} v{target.version}.")
    return redirect("target-detail", pk=target.pk)


@login_required
@require_POST
def run_cancel(request, pk: int):
    run = get_object_or_404(Run, pk=pk, owner=request.user)
    if pipeline.cancel_run(run):
        messages.info(request, f"Run {run.pk} cancelled.")
    else:
        messages.warning(request, f"Run {run.pk} had already finished ({run.status}).")
    return HttpResponseRedirect(reverse("run-detail", args=[run.pk]))


@login_required
@require_POST
def run_retry(request, pk: int):
    run = get_object_or_404(Run, pk=pk, owner=request.user)
    try:
        new = pipeline.retry_run(run)
    except pipeline.RetryRefused as e:
        messages.warning(request, e.message)
        return HttpResponseRedirect(reverse("run-detail", args=[run.pk]))
    messages.info(request, f"Run {new.pk} retries run {run.pk}.")
    return HttpResponseRedirect(reverse("run-detail", args=[new.pk]))


@login_required
def target_list(request):
    targets = list(latest_versions(visible_targets(request.user)))
    serving = serving_counts(targets)
    for target in targets:
        target.live_workers = serving[target.pk]
    context = {"targets": targets, "trackers": tracker_devices(targets)}
    return render(request, "workbench/target_list.html", context)


@login_required
def target_detail(request, pk: int):
    target = get_object_or_404(visible_targets(request.user), pk=pk)
    history = Target.objects.filter(owner=target.owner, name=target.name).order_by("-version")
    return render(
        request,
        "workbench/target_detail.html",
        {
            "target": target,
            "history": history,
            "profile_json": json.dumps(target.profile, indent=2),
            "editable": target.owner_id == request.user.pk,
            "trackers": tracker_devices([target]),
        },
    )


@login_required
def target_edit(request, pk: int | None = None):
    """New target (optionally copied from ?from=<id>) or a new version of an owned one."""
    source_pk = pk or request.GET.get("from")
    source = get_object_or_404(visible_targets(request.user), pk=source_pk) if source_pk else None
    if pk is not None and source.owner_id != request.user.pk:
        raise Http404("built-in targets cannot be edited: copy them instead")
    document = dict(source.profile) if source else {"name": "", "kind": "modeled", "units": []}
    if source and pk is None:
        document.update(name=f"{source.name}-copy", kind="modeled", version=1, machine=None)
    text = (
        request.POST.get("profile") if request.method == "POST" else json.dumps(document, indent=2)
    )
    problems, error = [], ""
    if request.method == "POST":
        try:
            target = save_user_target(request.user, parse_profile(text))
            messages.success(request, f"Saved {target.name} v{target.version}.")
            return redirect("target-detail", pk=target.pk)
        except TargetRejected as e:
            error, problems = e.message, e.problems
    return render(
        request,
        "workbench/target_edit.html",
        {"source": source, "text": text, "error": error, "problems": problems, "editing": pk},
        status=400 if error else 200,
    )


@login_required
@require_POST
def target_delete(request, pk: int):
    target = get_object_or_404(Target, pk=pk, owner=request.user)
    try:
        delete_user_target(target)
    except TargetRejected as e:
        messages.error(request, e.message)
        return redirect("target-detail", pk=target.pk)
    messages.success(request, f"Deleted {target.name}.")
    return redirect("target-list")


@login_required
def api_token(request):
    token = Token.objects.filter(user=request.user).first()
    if request.method == "POST":
        if request.POST.get("action") == "revoke":
            Token.objects.filter(user=request.user).delete()
            token = None
            messages.success(request, "The API token was revoked; it no longer works.")
        else:
            token = tokens.replace_token(request.user)
            messages.success(request, "A new API token was made; the old one no longer works.")
    context = {"token": token, "days": settings.API_TOKEN_DAYS}
    if token is not None:
        context["expires_at"] = expires_at(token)
        context["expired"] = context["expires_at"] <= timezone.now()
    return render(request, "workbench/token.html", context)


@login_required
def compare(request):
    """``/compare/?runs=12,15``: the runs side by side (a permalink); ``&export=html`` gives
    the page as one self-contained file that works offline."""
    if "runs" not in request.GET and request.GET.getlist("run"):
        # the run list's ticked boxes: on to the permalink
        ticked = ",".join(request.GET.getlist("run"))
        return redirect(f"{reverse('compare')}?{urlencode({'runs': ticked}, safe=',')}")
    try:
        comparison = compare_for(request.user, parse_run_ids(request.GET.get("runs")))
    except CompareRejected as e:
        if e.status == 404:
            raise Http404(e.message) from e
        messages.error(request, f"cannot compare: {e.message}")
        return redirect("run-list")
    context = comparison_context(comparison)
    if request.GET.get("export") == "html":
        name = "compare-" + context["ids"].replace(",", "-")
        return standalone_html(request, "workbench/compare.html", context, name)
    return render(request, "workbench/compare.html", context)


DASHBOARD_RUNS = 20


def _dashboard_row(run: Run) -> dict:
    figures = {f["key"]: f for f in figures_of(run)}
    stages = run.stages.all()
    current = next(
        (f"{s.stage}: {s.message or s.status}" for s in stages if s.status == "running"),
        # nothing running: a stage whose target no live worker serves says so
        next((f"{s.stage}: {s.message}" for s in stages if _waits(s)), ""),
    )
    return {
        "run": run,
        "verdicts": verdicts(figures),
        "to_do": what_to_do(run.error_code),
        "current": current,
    }


def _waits(stage) -> bool:
    return stage.status == "queued" and stage.message.startswith("waiting")


@login_required
def worker_list(request):
    """``/workers/``: every worker, its targets, load and current stage (staff only)."""
    if not request.user.is_staff:
        raise PermissionDenied("the worker list is for staff accounts")
    context = {"workers": listed_workers(), "stale_s": settings.RUN_STALE_SECONDS}
    return render(request, "workbench/worker_list.html", context)


@login_required
def dashboard(request):
    """``/``: the latest runs with their answers, live progress and what to do on failure."""
    runs = list(
        Run.objects.filter(owner=request.user)
        .select_related("model", "target")
        .prefetch_related(light_stages())[:DASHBOARD_RUNS]
    )
    return render(
        request,
        "workbench/dashboard.html",
        {
            "rows": [_dashboard_row(r) for r in runs],
            "form": UploadModelForm(),
        },
    )


@login_required
def dashboard_row(request, pk: int):
    """One dashboard row, for the page to swap in when a run changes state."""
    run = get_object_or_404(
        Run.objects.select_related("model", "target").prefetch_related(light_stages()),
        pk=pk,
        owner=request.user,
    )
    return render(request, "workbench/_dashboard_row.html", {"row": _dashboard_row(run)})
