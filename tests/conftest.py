"""Fixtures shared by the web, jobs, integration and browser tests.

Engine tests (tests/engine) need none of this and run without Django settings.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import onnx
import pytest

from workbench.server import uvicorn_command

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SQUEEZENET = LIGHT_DIR / "light_squeezenet.onnx"
ROOT = Path(__file__).resolve().parent.parent
# Parsed TVMScript templates (engine.fusion.winograd) go to this run's own directory, not
# the user's ~/.cache: shared by the run's tests and the workers and CLIs they start.
os.environ.setdefault("WORKBENCH_TVMSCRIPT_CACHE", tempfile.mkdtemp(prefix="wb-tvmscript-"))


def wait_until(predicate, *, timeout_s: float, interval_s: float = 0.1, what: str = "condition"):
    """Poll instead of sleeping: return the first truthy value, fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture(autouse=True)
def _own_channel_layer():
    """Each test gets its own channel layer object. The layer keeps asyncio locks bound to
    the event loop that first used them, and every ``async_to_sync`` runs a loop of its
    own: a lock an earlier test's consumer left held failed a later test with "bound to a
    different event loop" (CI, test_dashboard). A server has one loop per process."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _own_rate_limits():
    """Each test counts rate limits from zero (``workbench.limits`` keys carry the
    namespace), in its own process and in the servers and workers it starts."""
    from django.conf import settings as django_settings

    django_settings.RATE_NAMESPACE = uuid.uuid4().hex


@pytest.fixture(scope="session")
def real_model():
    """``real_model(name)``: the path of a model of the real-model set (torch exports of
    transformers and timm-style code; bench/real_models.py builds them once and caches)."""
    from bench.real_models import ensure_models

    def path(name: str) -> Path:
        return ensure_models([name])[name]

    return path


@pytest.fixture(scope="session")
def rpc_tracker():
    """One real TVM RPC tracker on loopback for the remote-device tests of every module
    (starting one and its devices costs seconds of TVM imports); a module adds the devices
    it needs with ``rpc_tracker.ensure_devices(key, count)``."""
    from tests.rpc_devices import loopback_tracker

    with loopback_tracker() as loop:
        yield loop


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-pass-123")


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user("mallory", password="mallory-pass-123")


@pytest.fixture(autouse=True)
def _media_root(request, tmp_path_factory):
    """Each test gets its own storage directory (only when Django is in play)."""
    if "settings" not in request.fixturenames and not request.node.get_closest_marker("django_db"):
        yield
        return
    settings = request.getfixturevalue("settings")
    media = tmp_path_factory.mktemp("media")
    settings.MEDIA_ROOT = str(media)
    yield media


class ServiceProcess:
    """A child process (worker, web server) in its own process group, with its log kept."""

    def __init__(self, name: str, args: list[str], env: dict, log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._log.close()


def service_env(settings, **extra: str) -> dict:
    """Environment for a child process that must see what the test sees: the test
    database pytest-django created, the same storage, queue and timing settings."""
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    if db["ENGINE"].endswith("postgresql"):
        env["DATABASE_URL"] = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
    else:
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    env["WORKBENCH_MEDIA_ROOT"] = str(settings.MEDIA_ROOT)
    env["WORKBENCH_QUEUE"] = settings.CELERY_TASK_DEFAULT_QUEUE
    env["WORKBENCH_HEARTBEAT_SECONDS"] = str(settings.RUN_HEARTBEAT_SECONDS)
    env["WORKBENCH_STALE_SECONDS"] = str(settings.RUN_STALE_SECONDS)
    env["WORKBENCH_PROGRESS_INTERVAL"] = str(settings.PROGRESS_MIN_INTERVAL_SECONDS)
    env["WORKBENCH_CANCEL_GRACE_SECONDS"] = str(settings.RUN_CANCEL_GRACE_SECONDS)
    env["WORKBENCH_SAMPLE_MODELS"] = "0"
    env["WORKBENCH_RATE_NAMESPACE"] = settings.RATE_NAMESPACE
    env.update(extra)
    return env


@pytest.fixture
def live_settings(settings):
    """Short heartbeats and a private queue, so worker tests are quick and isolated."""
    settings.CELERY_TASK_DEFAULT_QUEUE = f"test-{uuid.uuid4().hex[:8]}"
    settings.RUN_HEARTBEAT_SECONDS = 0.5
    settings.RUN_STALE_SECONDS = 5.0
    settings.PROGRESS_MIN_INTERVAL_SECONDS = 0.2
    settings.RUN_CANCEL_GRACE_SECONDS = 2.0
    return settings


@pytest.fixture
def start_worker(live_settings, transactional_db, tmp_path):
    """Start real Celery workers (prefork, one process) consuming the test's queue:
    ``start_worker(**env)`` one, ``start_worker.many(env, env, ...)`` several at once
    (each spends seconds importing the engine)."""
    started: list[ServiceProcess] = []

    def spawn(env: dict) -> ServiceProcess:
        worker = ServiceProcess(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "jobs",
                "worker",
                "-Q",
                live_settings.CELERY_TASK_DEFAULT_QUEUE,
                "-c",
                "1",
                "-l",
                "info",
                "-n",
                f"test-{uuid.uuid4().hex[:6]}@%h",
                "--without-gossip",
                "--without-mingle",
            ],
            service_env(live_settings, **env),
            tmp_path,
        )
        started.append(worker)
        return worker

    def many(*envs: dict) -> list[ServiceProcess]:
        workers = [spawn(env) for env in envs]
        for worker in workers:
            wait_until(
                lambda w=worker: "ready." in w.log() or w.proc.poll() is not None,
                timeout_s=60,
                what="the Celery worker to start",
            )
            assert worker.proc.poll() is None, f"worker exited:\n{worker.log()}"
        return workers

    def start(**env: str) -> ServiceProcess:
        (worker,) = many(env)
        return worker

    start.many = many
    yield start
    for worker in started:
        worker.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web_server(settings, log_dir: Path, **env: str) -> tuple[str, ServiceProcess]:
    """The web server (uvicorn, as `manage.py serve` runs it) on a free port, serving what
    ``settings`` configure (plus ``env``); returns its URL and process once it answers."""
    port = free_port()
    server = ServiceProcess(
        "web",
        # After a websocket session uvicorn can wait on its connection task at shutdown
        # ("Waiting for background tasks to complete") until stop() gives up after 20 s.
        uvicorn_command("127.0.0.1", port, "--timeout-graceful-shutdown", "2"),
        service_env(settings, **env),
        log_dir,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(url + "/accounts/login/", timeout=2)
            return True
        except OSError:
            assert server.proc.poll() is None, server.log()
            return False

    wait_until(answers, timeout_s=60, what="the web server")
    return url, server


@pytest.fixture
def web_server(live_settings, transactional_db, tmp_path):
    """The web server serving the test database on a free port; no worker."""
    url, server = start_web_server(live_settings, tmp_path)
    yield url
    server.stop()


@pytest.fixture
def web(start_worker, web_server):
    """The web server and a real worker: runs started in the browser complete."""
    start_worker()
    return web_server
