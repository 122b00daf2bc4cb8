"""Files in an S3-compatible object store (moto's server on loopback): upload, runs on two
workers that share no directory, artifact download (streamed and by presigned link),
deletion and orphan removal, all through the bucket."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import boto3
import pytest
from django.core.management import call_command
from moto.server import ThreadedMotoServer
from rest_framework.authtoken.models import Token

from cli.client import Api
from engine.stages import RunOptions
from jobs.artifacts import save_artifact
from tests.conftest import ROOT, SQUEEZENET, free_port, start_web_server, wait_until
from tests.integration.test_web_limits import status_kb
from workbench import pipeline
from workbench.models import Artifact, OnnxModel, Run, Target
from workbench.storage_config import storages_setting

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BUCKET = "workbench-test"
MB = 1 << 20


@pytest.fixture
def s3_env():
    """A bucket on an S3-compatible server of its own, and the settings that point at it."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "WORKBENCH_STORAGE": "s3",
        "WORKBENCH_S3_BUCKET": BUCKET,
        "WORKBENCH_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "WORKBENCH_S3_REGION": "us-east-1",
        "WORKBENCH_S3_ACCESS_KEY_ID": "test-key",
        "WORKBENCH_S3_SECRET_ACCESS_KEY": "test-secret",
        "WORKBENCH_S3_ADDRESSING_STYLE": "path",
    }
    bucket_client(env).create_bucket(Bucket=BUCKET)
    yield env
    server.stop()


def bucket_client(env: dict):
    return boto3.client(
        "s3",
        endpoint_url=env["WORKBENCH_S3_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="test-key",
        aws_secret_access_key="test-secret",
    )


def keys(env: dict) -> set[str]:
    listed = bucket_client(env).list_objects_v2(Bucket=BUCKET)
    return {entry["Key"] for entry in listed.get("Contents", ())}


def files_under(path) -> list[str]:
    return [str(p) for p in path.rglob("*") if p.is_file()] if path.exists() else []


def run_on_worker(user, model: OnnxModel) -> Run:
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(["analyze", "memory"], {"memory": {"compare_tvm": False}}),
    )
    wait_until(
        lambda: not Run.objects.get(pk=run.pk).is_active,
        timeout_s=300,
        interval_s=0.5,
        what=f"run {run.pk} to end",
    )
    run.refresh_from_db()
    stages = {s.stage: (s.status, s.error_message) for s in run.stages.all()}
    assert run.status == "succeeded", stages
    return run


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_upload_run_and_download_through_s3_with_workers_sharing_no_directory(
    s3_env, live_settings, start_worker, user, other_user, tmp_path, client
):
    live_settings.STORAGES = storages_setting(s3_env)  # this process: the web side's view
    dirs = {name: tmp_path / name for name in ("web", "web-presigning", "worker-a", "worker-b")}
    machine = {  # each process its own var/ and media/: nothing on a disk is shared
        name: {"WORKBENCH_VAR_DIR": str(d / "var"), "WORKBENCH_MEDIA_ROOT": str(d / "media")}
        for name, d in dirs.items()
    }
    url, web = start_web_server(live_settings, tmp_path, **s3_env, **machine["web"])
    presigning_url, presigning = start_web_server(
        live_settings,
        tmp_path,
        **s3_env,
        **machine["web-presigning"],
        WORKBENCH_S3_PRESIGNED_DOWNLOADS="1",
    )
    try:
        token = Token.objects.create(user=user).key
        uploaded = Api(url, token).upload(SQUEEZENET, "sq.onnx")
        model = OnnxModel.objects.get(pk=uploaded["id"])
        sha = hashlib.sha256(SQUEEZENET.read_bytes()).hexdigest()
        assert model.sha256 == sha and keys(s3_env) == {str(model.file)}

        # one run on worker A, then (A stopped) one on worker B: each fetches the model
        # from the bucket itself and stores its artifact there
        worker_a = start_worker(**s3_env, **machine["worker-a"])
        first = run_on_worker(user, model)
        worker_a.stop()
        start_worker(**s3_env, **machine["worker-b"])
        second = run_on_worker(user, model)
        ran_on = [{s.worker for s in run.stages.all()} for run in (first, second)]
        assert all(len(w) == 1 for w in ran_on) and ran_on[0] != ran_on[1], ran_on
        for name in ("worker-a", "worker-b"):
            cached = dirs[name] / "var" / "blobs" / sha[:2] / f"{sha}.onnx"
            assert hashlib.sha256(cached.read_bytes()).hexdigest() == sha, name
        artifacts = [Artifact.objects.get(run=run, stage="memory") for run in (first, second)]
        assert {str(a.file) for a in artifacts} <= keys(s3_env)
        for name in dirs:
            assert files_under(dirs[name] / "media") == [], f"{name} kept files on its disk"

        # with presigned downloads the API answers with a link to the bucket, the CLI
        # follows it; without, the web server streams the object: the same bytes either way
        artifact = artifacts[1]
        opener = urllib.request.build_opener(NoRedirect)
        request = urllib.request.Request(
            f"{presigning_url}/api/v1/artifacts/{artifact.pk}/download/",
            headers={"Authorization": f"Token {token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            opener.open(request, timeout=30)
        assert answer.value.code == 302
        assert answer.value.headers["Location"].startswith(s3_env["WORKBENCH_S3_ENDPOINT_URL"])
        assert answer.value.headers["X-Content-SHA256"] == artifact.sha256
        for server in (presigning_url, url):
            out = tmp_path / "downloaded" / server.rsplit(":", 1)[1]
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "download", str(second.pk), "--out", str(out)]
                + ["--url", server, "--token", token, "--json"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            [saved] = json.loads(done.stdout)["artifacts"]
            data = (out / artifact.name).read_bytes()
            assert saved["sha256"] == hashlib.sha256(data).hexdigest() == artifact.sha256

        # the web page's link, for the owner only
        client.force_login(user)
        response = client.get(f"/artifacts/{artifacts[0].pk}/download/")
        assert response.status_code == 200 and response.streaming
        body = b"".join(response.streaming_content)
        assert hashlib.sha256(body).hexdigest() == artifacts[0].sha256
        assert int(response["Content-Length"]) == len(body) == artifacts[0].size_bytes
        client.force_login(other_user)
        assert client.get(f"/artifacts/{artifacts[0].pk}/download/").status_code == 404

        # deleting the model (in the web process) empties the bucket; a stray object is an
        # orphan the command finds and removes
        Api(url, token).request("DELETE", f"models/{model.pk}/")
        wait_until(lambda: keys(s3_env) == set(), timeout_s=30, what="the bucket to empty")
        bucket_client(s3_env).put_object(Bucket=BUCKET, Key="models/zz/stray.onnx", Body=b"x")
        report = io.StringIO()
        call_command("orphans", "--delete", stdout=report)
        assert "models/zz/stray.onnx" in report.getvalue() and keys(s3_env) == set()
    finally:
        web.stop()
        presigning.stop()


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_large_download_streams_through_the_web_process_in_bounded_memory(
    backend, live_settings, user, tmp_path, monkeypatch, request
):
    """Served by uvicorn, a 200 MB artifact does not pass through the web process's memory
    (Django's FileResponse alone would read it whole into a list under ASGI)."""
    env = request.getfixturevalue("s3_env") if backend == "s3" else {}
    live_settings.STORAGES = storages_setting(env)
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", lambda stage: None)
    model = OnnxModel.objects.create(
        owner=user,
        name="m",
        file="models/m.onnx",
        sha256="0" * 64,
        size_bytes=1,
        ir_version=8,
        node_count=1,
    )
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(["analyze"]),
    )
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        for _ in range(200):
            f.write(os.urandom(MB))
    artifact = save_artifact(run.stages.get(), "report", big)
    big.unlink()
    url, server = start_web_server(live_settings, tmp_path, **env)
    try:
        pid = server.proc.pid
        rss_before_kb = status_kb(pid, "VmRSS")
        download = urllib.request.Request(
            f"{url}/api/v1/artifacts/{artifact.pk}/download/",
            headers={"Authorization": f"Token {Token.objects.create(user=user).key}"},
        )
        digest = hashlib.sha256()
        with urllib.request.urlopen(download, timeout=120) as response:
            while chunk := response.read(MB):
                digest.update(chunk)
        assert digest.hexdigest() == artifact.sha256
        growth_mb = (status_kb(pid, "VmHWM") - rss_before_kb) / 1024
        print(f"web process: {rss_before_kb / 1024:.0f} MB before, grew {growth_mb:.1f} MB")
        # (boto3's own import and client take ~30 MB; the artifact alone would be 200)
        assert growth_mb < 100, f"the web process grew by {growth_mb:.0f} MB"
    finally:
        server.stop()
