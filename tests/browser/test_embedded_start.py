"""The start command on embedded defaults (no PostgreSQL, RabbitMQ or Redis): it prints a
URL and an account, sample models are analyzed, and a newcomer can upload a model and
watch its run finish live in a browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import onnx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import profile_then_cancel
from tests.conftest import ROOT, SQUEEZENET, free_port, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.fixture
def embedded(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "REDIS_URL",
            "WORKBENCH_MEDIA_ROOT",
            "WORKBENCH_QUEUE",
            "DJANGO_SETTINGS_MODULE",
        }
    }
    env.update(WORKBENCH_VAR_DIR=str(tmp_path / "var"), WORKBENCH_SAMPLE_MODELS="1")
    port = free_port()
    log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def banner():
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        text = (tmp_path / "serve.log").read_text()
        return re.search(r"Sign in as '(\w+)' with password '([^']+)'", text) and text

    text = wait_until(banner, timeout_s=120, interval_s=0.3, what="the start banner")
    assert f"Workbench running at http://127.0.0.1:{port}/" in text
    username, password = re.search(r"Sign in as '(\w+)' with password '([^']+)'", text).groups()
    yield f"http://127.0.0.1:{port}", username, password, tmp_path
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
    log.close()


def test_start_command_serves_a_working_workbench(embedded, page):
    url, username, password, tmp_path = embedded
    page.goto(url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    # Signed in, the dashboard; the bundled sample models are there and get analyzed by
    # the embedded worker.
    expect(page.get_by_role("heading", name="Recent runs")).to_be_visible()
    page.goto(url + "/models/")
    expect(page.locator("table.grid tbody tr")).to_have_count(9)
    page.goto(url + "/runs/")
    wait_until(
        lambda: page.reload() or page.locator(".status-succeeded").count() == 9,
        timeout_s=120,
        interval_s=1,
        what="the sample analyses",
    )
    # A model of one's own: a copy of SqueezeNet with other bytes than the sample.
    model = onnx.load(str(SQUEEZENET))
    model.doc_string = "uploaded by the embedded start test"
    mine = tmp_path / "my_squeezenet.onnx"
    onnx.save(model, str(mine))
    page.goto(url + "/models/")
    page.set_input_files("#id_file", str(mine))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#fact-macs")).to_have_text("349.15 M", timeout=15_000)
    expect(page.locator("#fig-flops-type .main-svg").first).to_be_visible()
    # Live updates over the SQLite channel layer: a long profile shows moving progress.
    profile_then_cancel(page)
