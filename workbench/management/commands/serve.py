"""Run the whole workbench on this machine: database set-up, presets, a demo account,
the web server (uvicorn), a Celery worker and its beat scheduler, supervised together."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from workbench.presets import ensure_presets
from workbench.server import uvicorn_command


class Command(BaseCommand):
    help = "Start web + worker on embedded defaults (or on whatever the environment configures)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("WORKBENCH_HOST", "127.0.0.1"))
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("WORKBENCH_PORT", "8000"))
        )
        parser.add_argument("--concurrency", type=int, default=1, help="worker processes")
        parser.add_argument("--no-demo-user", action="store_true")

    def handle(self, *args, host: str, port: int, concurrency: int, no_demo_user: bool, **kw):
        call_command("migrate", interactive=False, verbosity=0)
        ensure_presets()
        credentials = None if no_demo_user else self._demo_user()
        var = settings.VAR_DIR
        (var / "log").mkdir(parents=True, exist_ok=True)
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        procs = {
            "worker": _spawn(
                "worker",
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "jobs",
                    "worker",
                    "-B",
                    "-s",
                    str(var / "celerybeat-schedule"),
                    "-Q",
                    queue,
                    "-c",
                    str(concurrency),
                    "-l",
                    "info",
                ],
            ),
            "web": _spawn("web", uvicorn_command(host, port)),
        }
        url = f"http://{host}:{port}/"
        stop = {"now": False}

        def _stop(*_args) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        try:
            self._wait_for(url, procs)
            self.stdout.write(self.style.SUCCESS(f"Workbench running at {url}"))
            if credentials:
                self.stdout.write(f"Sign in as {credentials[0]!r} with password {credentials[1]!r}")
            self.stdout.write(f"Logs: {var / 'log'}. Stop with Ctrl-C.")
            while not stop["now"]:
                for name, proc in procs.items():
                    if proc.poll() is not None:
                        self.stderr.write(
                            f"the {name} process exited ({proc.returncode}); stopping"
                        )
                        stop["now"] = True
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()

    def _demo_user(self) -> tuple[str, str]:
        username = os.environ.get("WORKBENCH_DEMO_USER", "demo")
        secret_file = settings.VAR_DIR / "demo_password"
        if not secret_file.exists():
            secret_file.write_text(
                os.environ.get("WORKBENCH_DEMO_PASSWORD") or secrets.token_urlsafe(9)
            )
            secret_file.chmod(0o600)
        password = secret_file.read_text().strip()
        users = get_user_model()
        user = users.objects.filter(username=username).first()
        if user is None:
            users.objects.create_user(username=username, password=password)
        elif not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        return username, password

    def _wait_for(self, url: str, procs: dict, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"the {name} process failed to start; see var/log/{name}.log")
            try:
                urllib.request.urlopen(url + "accounts/login/", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"the web server did not answer at {url} within {timeout_s:.0f} s")


def _spawn(name: str, command: list[str]) -> subprocess.Popen:
    log = open(settings.VAR_DIR / "log" / f"{name}.log", "ab")  # noqa: SIM115 - child owns it
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
