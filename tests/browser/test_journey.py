"""One person's whole journey in one headless Chromium session, on the bundled SqueezeNet:
sign in, upload, run every stage and watch it live, read every stage's tab, use the graph
(expand, search, colour, linked selection), compare with a second run, download the
compiled artifact, sign out. No console error or CSP violation on any page on the way
(the ``page`` fixture fails on a CSP violation, ``page_errors`` collects the rest)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from engine.graph.analyze import analyze_prepared
from engine.graph.prepare import prepare_model
from frontend.figures.graph.payload import graph_tree_of
from tests.browser.conftest import screenshot
from tests.browser.test_graph_view import (
    chain_of,
    click_node,
    page_errors,  # noqa: F401 - a fixture
)
from tests.browser.test_upload_flow import sign_in
from tests.conftest import SQUEEZENET

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(600),
]

ALL_STAGES = ("analyze", "profile", "partition", "memory", "compile", "accuracy")
TERMINAL = """() => {
  const run = document.getElementById("run");
  return run !== null && ["succeeded", "failed", "cancelled"].includes(run.dataset.status);
}"""
# How many of a figure's traces have points (in its JSON), and how many trace marks
# plotly.js drew of it.
DRAWN = """el => {
  const figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
  return {
    traces: figure.data.filter(t => (t.x || t.y || t.values || t.z || []).length > 0).length,
    marks: el.querySelectorAll(".trace, .hm, .pielayer .slice, canvas").length,
  };
}"""


def start_run(page, stages, **options: str | bool) -> None:
    """From the model page: tick these stages (only these), set options, start."""
    for box in page.locator("#run-form input[name=stages]").all():
        box.set_checked(box.get_attribute("value") in stages)
    for field, value in options.items():
        control = page.locator(f"#id_{field}")
        if isinstance(value, bool):
            control.set_checked(value)
        elif control.evaluate("el => el.tagName") == "SELECT":
            control.select_option(value)
        else:
            control.fill(value)
    page.click("#run-form button[type=submit]")
    expect(page.locator("#run")).to_be_visible()


def wait_for_success(page, timeout_ms: int) -> None:
    """Wait, bounded, for the run on the page to end; fail with its error unless it succeeded."""
    page.wait_for_function(TERMINAL, timeout=timeout_ms)
    status = page.locator("#run-status").inner_text()
    if status != "succeeded":
        stages = page.locator("table.stages").inner_text()
        error = page.locator("#run-error").inner_text()
        pytest.fail(f"the run {status}: {error}\n{stages}")


def check_every_tab_draws(page) -> None:
    """Every stage has a tab; each opens a panel with text, its figures drawn by Plotly and
    its tables with rows."""
    tabs = page.locator("#stage-tabs [role=tab]")
    stages = [tabs.nth(i).get_attribute("id").removeprefix("tab-") for i in range(tabs.count())]
    assert stages == list(ALL_STAGES), page.locator("table.stages").inner_text()
    for stage in stages:
        page.click(f"#tab-{stage}")
        panel = page.locator(f"#panel-{stage}")
        expect(panel).to_be_visible()
        assert panel.inner_text().strip(), f"the {stage} tab is empty"
        figures = panel.locator("[data-figure]")
        tables = panel.locator("table")
        assert figures.count() + tables.count() > 0, f"the {stage} tab has no figure or table"
        drawn = 0
        for i in range(figures.count()):
            figure = figures.nth(i)
            if "figure-empty" in (figure.get_attribute("class") or ""):
                # nothing to draw (an error histogram when every element is exact, or NaN
                # on both sides): the figure says why instead of drawing an empty frame
                assert figure.inner_text().strip().startswith("No "), figure.inner_text()
                continue
            expect(figure.locator(".main-svg").first).to_be_visible()
            shown = figure.evaluate(DRAWN)
            # a figure with points must show them
            assert shown["marks"] or not shown["traces"], f"{stage}: {figure.get_attribute('id')}"
            drawn += shown["marks"] > 0
        assert drawn or not figures.count(), f"the {stage} tab draws no figure with data"
        for i in range(tables.count()):
            rows = tables.nth(i).locator("tbody tr")
            assert rows.count() > 0, f"{stage}: table {i} has no rows"


def use_the_graph(page, analysis: dict) -> None:
    """The run's graph: collapse and expand a group, search, switch the colour, and the
    profile's op table and the graph select each other."""
    tree = graph_tree_of(analysis)
    names, innermost, parent = (
        tree["nodes"]["name"],
        tree["nodes"]["group"],
        tree["groups"]["parent"],
    )
    graph = page.locator("#graph")
    # One graph per page, in the last tab that has one: open it.
    panel_id = graph.evaluate("el => el.closest('[role=tabpanel]').id")
    page.click("#" + panel_id.replace("panel-", "tab-"))
    expect(graph).to_have_attribute("data-ready", "1", timeout=30_000)
    details = page.locator("#graph-details")

    # SqueezeNet is small enough to open with every group open: close them all, then
    # click the first node, drawn at its closed outermost group, to open that group.
    everything = int(graph.get_attribute("data-visible"))
    page.click("#graph-collapse-all")
    expect(graph).not_to_have_attribute("data-visible", str(everything))
    closed = int(graph.get_attribute("data-visible"))
    outermost = chain_of(innermost[0], parent)[-1]
    page.evaluate("name => window.workbenchGraph.centreOn(name)", names[0])
    click_node(page, names[0])
    expect(details.locator("h3")).to_have_text(tree["groups"]["label"][outermost])
    expect(details.get_by_role("button", name="Collapse").first).to_be_visible()
    assert int(graph.get_attribute("data-visible")) > closed

    # Search by op type counts the matches; Enter jumps to the first, opening its groups.
    concats = analysis["ops"]["Concat"]
    page.fill("#graph-search", "concat")
    expect(page.locator("#graph-search-status")).to_have_text(f"{concats} matches")
    page.press("#graph-search", "Enter")
    expect(page.locator("#graph-search-status")).to_have_text(f"1 of {concats}")
    expect(details.locator(".op")).to_contain_text("Concat")

    # Every stage's colour is there; a value scale and categories switch the legend.
    metrics = page.locator("#graph-metric option").evaluate_all("os => os.map(o => o.value)")
    assert {"latency_us", "unit", "kernel", "op_type", "flops"} <= set(metrics), metrics
    legend = page.locator("#graph-legend")
    page.select_option("#graph-metric", "latency_us")
    expect(legend).to_contain_text("latency, measured")
    expect(legend.locator(".colorbar")).to_be_visible()
    page.select_option("#graph-metric", "kernel")
    expect(legend.locator(".colorbar")).to_have_count(0)
    page.select_option("#graph-metric", "unit")
    expect(legend.locator(".colorbar")).to_have_count(0)

    # A row of the profile's op table lights its node up in the graph (opening the
    # graph's tab), and a node clicked in the graph lights its row up.
    conv = next(n["name"] for n in analysis["node_list"] if n["op_type"] == "Conv")
    page.click("#tab-profile")
    page.locator(f'#profile-ops tr[data-node="{conv}"] td').first.click()
    expect(page.locator(f"#{panel_id}")).to_be_visible()
    expect(details.locator("h3")).to_have_text(conv)
    expect(page.locator(f'#profile-ops tr[data-node="{conv}"]')).to_have_class("linked")
    relu = details.locator(".neighbours button").last.inner_text()
    click_node(page, relu)
    expect(details.locator("h3")).to_have_text(relu)
    expect(page.locator(f'#profile-ops tr[data-node="{relu}"]')).to_have_class("linked")
    expect(page.locator(f'#profile-ops tr[data-node="{conv}"]')).not_to_have_class("linked")


def download_the_compiled_artifact(page) -> None:
    row = page.locator("#artifacts tbody tr").filter(has_text="compile").first
    name = row.locator("a").inner_text().strip()
    assert name.endswith(".tar.gz"), name
    sha = row.locator("td.mono").inner_text().strip()
    with page.expect_download() as download:
        row.locator("a").click()
    data = Path(download.value.path()).read_bytes()
    assert data[:2] == b"\x1f\x8b" and hashlib.sha256(data).hexdigest() == sha
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert any(member.size > 0 for member in tar.getmembers())


def test_a_whole_journey_through_the_workbench(user, web, page, page_errors):  # noqa: F811
    # The analysis the analyze stage makes of the upload, here for the graph's names.
    analysis = analyze_prepared(prepare_model(SQUEEZENET)).to_dict()

    # Sign in and upload: the upload's first run (analyze) opens and finishes.
    sign_in(page, web)
    page.set_input_files("#id_file", str(SQUEEZENET))
    page.click("#upload-form button[type=submit]")
    wait_for_success(page, 120_000)

    # A run of every stage, options at their defaults except four. The profile's timing
    # window (5 s a measurement) and the partition ILP's time limit (20 s) take small values
    # that keep the run short. The host target has one compute unit, so partitioning needs
    # a network to consider offloading over (the page's own advice): the fastest, wifi.
    # Compile ships TVM's build whatever this machine measures faster, so that the tab has
    # kernels to draw and the artifact is a compiled one: with the default choice of
    # backends this busy 2-core machine measured onnxruntime faster and shipped it alone.
    page.click("#run h1 a")
    start_run(
        page,
        ALL_STAGES,
        profile_window_s="1",
        partition_time_limit_s="2",
        partition_network="wifi",
        compile_choose_backends=False,
    )
    first_run = page.locator("#run").get_attribute("data-run-id")
    # Progress arrives over the websocket: a stage finishes while the page stays as it is.
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    page.evaluate("window.journeyMark = 1")
    expect(page.locator("tr[data-stage=analyze] [data-field=status]")).to_have_text(
        "succeeded", timeout=120_000
    )
    assert page.evaluate("window.journeyMark") == 1  # not reloaded
    wait_for_success(page, 300_000)
    check_every_tab_draws(page)
    use_the_graph(page, analysis)
    page.click("#tab-analyze")
    screenshot(page, "run-all-stages")

    download_the_compiled_artifact(page)

    # A second, shorter run, then the two compared from the model's run list.
    page.click("#run h1 a")
    start_run(page, ("analyze", "profile"), profile_window_s="1")
    second_run = page.locator("#run").get_attribute("data-run-id")
    wait_for_success(page, 180_000)
    page.click("#run h1 a")
    page.click("#tab-runs")
    page.check(f'#compare-form input[name=run][value="{first_run}"]')
    page.check(f'#compare-form input[name=run][value="{second_run}"]')
    page.click("#compare-form #compare-button")
    header = page.locator("#compare-figures thead")
    expect(header.locator(f'a[href="/runs/{first_run}/"]')).to_be_visible()
    expect(header.locator(f'a[href="/runs/{second_run}/"]')).to_be_visible()
    assert page.locator("#compare-figures tbody tr").count() > 0
    # Both runs profiled: their per-op latencies are drawn side by side.
    figures = page.locator("main [data-figure]")
    assert figures.count() > 0
    for i in range(figures.count()):
        expect(figures.nth(i).locator(".main-svg").first).to_be_visible()
        assert figures.nth(i).evaluate(DRAWN)["marks"] > 0
    screenshot(page, "compare-two-runs")

    # Sign out: a protected page sends to the sign-in page again.
    page.click("form.logout button")
    page.goto(f"{web}/runs/{first_run}/")
    expect(page.locator("#id_username")).to_be_visible()
    assert "/accounts/login/" in page.url
    assert not page_errors, page_errors
