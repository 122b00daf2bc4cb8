"""Browser fixtures: Debian's Chromium driven by Playwright, headless."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

# Pages wait on a web server and a worker sharing two cores with the rest of the suite;
# Playwright's 5 s default is too short for a loaded machine, not for a working page.
expect.set_options(timeout=20_000)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def screenshot(page, name: str) -> None:
    """Keep a full-page screenshot as ``$WORKBENCH_SCREENSHOTS/<name>.png`` when that is set
    (the README's pictures: ``WORKBENCH_SCREENSHOTS=docs/screenshots bin/test tests/browser``)."""
    folder = os.environ.get("WORKBENCH_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)


def accessibility_problems(page, impacts=("serious", "critical")) -> list[str]:
    """axe-core's WCAG 2 A/AA violations of the page at these impacts, one line each."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, options={"runOnly": ["wcag2a", "wcag2aa"]})
    return [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])}x): {v['help']}: "
        + "; ".join(str(n["target"]) for n in v["nodes"][:3])
        for v in results.response["violations"]
        if v["impact"] in impacts
    ]


def interactive_ms(page) -> int:
    """How long the page took to become interactive (navigation start to domInteractive)."""
    return int(
        page.evaluate("Math.round(performance.getEntriesByType('navigation')[0].domInteractive)")
    )


def keep_timings(timings: dict) -> None:
    """Add page timings to ``$WORKBENCH_SCREENSHOTS/timings.json`` when that is set."""
    folder = os.environ.get("WORKBENCH_SCREENSHOTS")
    if folder:
        path = Path(folder) / "timings.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**kept, **timings}, indent=1))


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (bin/test installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # Every page must run under its Content-Security-Policy: a violation is a console
        # error ("Refused to ... because it violates ... Content Security Policy").
        violations: list[str] = []
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        yield page
        browser.close()
        assert not violations, f"Content-Security-Policy violations: {violations[:5]}"


def profile_then_cancel(page) -> None:
    """From a run page: start a long profile of the same model, see its progress move
    without a reload (pushed over the websocket), then cancel it."""
    page.click("#run h1 a")  # the model's name links back to its page
    page.check("input[value=profile]")
    # The longest window the form accepts: the stage outlasts every wait below.
    page.fill("#id_profile_window_s", "120")
    page.click("#run-form button[type=submit]")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    row = page.locator("tr[data-stage=profile]")
    expect(row.locator("[data-field=status]")).to_have_text("running", timeout=60_000)
    expect(row.locator("[data-field=pct]")).not_to_have_text("0%", timeout=60_000)
    page.click("#cancel-button")
    expect(page.locator("#run-status")).to_have_text("cancelled", timeout=30_000)
