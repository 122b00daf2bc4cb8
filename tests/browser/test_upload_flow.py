"""A person's path through the workbench in headless Chromium: sign in, upload a model,
watch the run progress live, read the analysis; a bad file gets a readable error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import (
    accessibility_problems,
    interactive_ms,
    keep_timings,
    profile_then_cancel,
    screenshot,
)
from tests.conftest import SQUEEZENET

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def sign_in(page, url: str) -> None:
    page.goto(url + "/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", name="Upload a model")).to_be_visible()


def test_upload_a_model_and_watch_the_run_finish(user, web, page):
    sign_in(page, web)
    page.set_input_files("#id_file", str(SQUEEZENET))
    page.click("#upload-form button[type=submit]")
    # The run page opens at once and follows the run over the websocket.
    expect(page.locator("#run")).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
    # On success the page shows the analysis with its figures drawn by plotly.js.
    expect(page.locator("#fact-params")).to_have_text("1.24 M", timeout=15_000)
    # The figures are of the prepared model (its Dropout and 38 of its 39 ConstantOfShape
    # weight generators folded away); the upload's own count stands beside it.
    expect(page.locator("#fact-nodes")).to_have_text("66")
    expect(page.locator("#fact-nodes-uploaded")).to_have_text("105")
    expect(page.locator("#fig-ops .main-svg").first).to_be_visible()
    expect(page.locator("#fig-flops-node .main-svg").first).to_be_visible()
    assert "Counted from the graph" in page.locator("#analysis .provenance").inner_text()
    # The page runs under its Content-Security-Policy (the page fixture fails on any
    # violation); deleting asks first, from a script file, not an inline handler.
    page.click("#run h1 a")
    csp = page.evaluate(
        "() => fetch(location.href).then(r => r.headers.get('content-security-policy'))"
    )
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp
    questions = []
    page.once("dialog", lambda d: (questions.append(d.message), d.dismiss()))
    page.click("button.danger")
    assert questions == ["Delete this model and its runs?"]
    assert "/models/" in page.url  # dismissed: still here
    page.once("dialog", lambda d: d.accept())
    page.click("button.danger")
    expect(page.locator(".messages")).to_contain_text("Deleted light_squeezenet.onnx")


def test_progress_updates_live_and_cancel_works(user, web, page):
    sign_in(page, web)
    # The dashboard in a second tab follows every run without a reload.
    second = page.context.browser.new_context()
    second.add_cookies(page.context.cookies())  # the same signed-in session
    dashboard = second.new_page()
    dashboard.goto(web + "/")
    expect(dashboard.locator("#live")).to_have_text("live")
    page.set_input_files("#id_file", str(SQUEEZENET))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
    first = dashboard.locator("#dashboard-runs tbody tr").first
    expect(first.locator(".status")).to_have_text("succeeded", timeout=20_000)
    # Start a long profile from the model page and cancel it while it runs.
    profile_then_cancel(page)
    expect(dashboard.locator("#dashboard-runs tbody tr")).to_have_count(2)
    expect(dashboard.locator("#dashboard-runs tbody tr").first.locator(".status")).to_have_text(
        "cancelled", timeout=20_000
    )
    latest = dashboard.locator("#dashboard-runs tbody tr").first
    expect(latest.locator("text=What to do")).to_be_visible()
    # Every page says when a run ends while it is open.
    expect(dashboard.locator("#notices")).to_contain_text("cancelled")
    expect(dashboard.locator("#notices")).to_contain_text("succeeded")
    screenshot(dashboard, "dashboard")
    assert accessibility_problems(dashboard) == []  # with a failure, a Retry and notices


def test_a_non_onnx_file_gets_a_readable_error(user, web, page, tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("definitely not a protobuf\n" * 20)
    sign_in(page, web)
    page.set_input_files("#id_file", str(bad))
    page.click("#upload-form button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("not an ONNX model")
    expect(page.locator("text=No models yet")).to_be_visible()


def test_profile_and_memory_show_the_tvm_build_next_to_ours(user, web, page):
    sign_in(page, web)
    page.set_input_files("#id_file", str(SQUEEZENET))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
    page.click("#run h1 a")
    page.check("input[value=profile]")
    page.check("input[value=memory]")
    page.fill("#id_profile_window_s", "1")
    page.click("#run-form button[type=submit]")
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=240_000)
    # The answers first, each saying what it is; then a tab per stage.
    expect(page.locator("#answers .verdict").first).to_contain_text("latency")
    assert "measured on" in page.locator("#answers .verdict").first.get_attribute("title")
    expect(page.locator("#stage-tabs [role=tab]")).to_have_count(3)
    expect(page.locator("#panel-memory")).to_be_hidden()
    page.click("#tab-profile")
    # Profile: every TVM kernel timed on the worker, drawn next to onnxruntime's nodes.
    expect(page.locator("#fig-profile-tvm-kernels .main-svg").first).to_be_visible()
    rows = page.locator("#profile-tvm-kernels tbody tr")
    expect(rows.first).to_be_visible()
    assert rows.count() >= 20
    assert "Measured on this machine" in page.locator("#profile").inner_text()
    # Memory: TVM's static allocations next to our plan of the same tensors. The arrow key
    # moves to the next tab, and the address remembers it.
    page.locator("#tab-profile").press("ArrowRight")
    expect(page.locator("#panel-profile")).to_be_hidden()
    assert page.url.endswith("#tab-memory")
    expect(page.locator("#memory-tvm-bytes")).to_contain_text("MB")
    expect(page.locator("#fig-memory-tvm .main-svg").first).to_be_visible()
    screenshot(page, "run")
    # WCAG 2 A/AA by axe-core: no serious or critical violation on the main pages.
    assert accessibility_problems(page) == []
    timings = {"run page": interactive_ms(page)}
    # The artifact downloads with the sha256 the page shows.
    sha = page.locator("#artifacts td.mono").first.inner_text().strip()
    with page.expect_download() as download:
        page.locator("#artifacts a").first.click()
    data = Path(download.value.path()).read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha
    page.click("#run h1 a")
    # the model page: overview, graph and runs tabs; the history lives with the runs
    page.click("#tab-runs")
    expect(page.locator("#history")).to_be_visible()
    timings["model page"] = interactive_ms(page)
    assert accessibility_problems(page) == []
    screenshot(page, "model")
    page.goto(web + "/")
    expect(page.locator("#dashboard-runs")).to_be_visible()
    timings["dashboard"] = interactive_ms(page)
    assert accessibility_problems(page) == []
    # Measured, not asserted (STYLE: speed is for benchmarks): kept with the screenshots.
    print(f"page timings (ms until interactive, this machine, under the suite's load): {timings}")
    keep_timings(timings)
    # Sign out: the pages are closed again.
    page.click("form.logout button")
    page.goto(web + "/")
    expect(page.locator("#id_username")).to_be_visible()
