"""The exported comparison opens from a file with the network off and draws every figure."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.browser.conftest import accessibility_problems, screenshot
from tests.conftest import SQUEEZENET
from tests.workbench.test_compare import finished_run
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.browser, pytest.mark.django_db]


@pytest.fixture
def exported(user, tmp_path):
    """The export, made before the browser starts (Playwright's event loop and Django's
    database calls do not share a thread)."""
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    a = finished_run(user, model, 8.0, 500.0, 6_000_000)
    b = finished_run(user, model, 6.0, 300.0, 5_000_000)
    client = Client()
    client.force_login(user)
    path = tmp_path / "compare.html"
    path.write_bytes(client.get(f"/compare/?runs={a.pk},{b.pk}&export=html").content)
    return path


def test_exported_comparison_draws_offline(exported, page):
    requested: list[str] = []
    page.context.set_offline(True)
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("file://")
            else (requested.append(route.request.url), route.abort())
        ),
    )
    page.goto(exported.as_uri())
    figures = page.locator("[data-figure]")
    assert figures.count() == 2
    for i in range(figures.count()):
        # Plotly drew it: its SVG and at least one trace are in the element.
        figures.nth(i).locator(".main-svg").first.wait_for(timeout=20_000)
        assert figures.nth(i).locator(".trace").count() >= 2
    assert "-25.0% better" in page.locator("#compare-figures").inner_text()
    assert requested == []
    assert accessibility_problems(page) == []
    screenshot(page, "compare")
