"""What one API request costs the web process, in-process and without the server: CPU time
and database queries per request for the three requests ``bench/load_bench.py`` makes (run
list, one run, model list), signed in with a token. A database of its own, dropped at the
end. The load bench measures the whole stack under concurrency; this says where a
request's time goes, so a change to it can be judged before the noisy load run.

Two paths: ``test_client``, Django's test client (the middleware and the view, in this
thread), and ``asgi``, the application uvicorn serves (``workbench.asgi``) called as uvicorn
calls it, ``--concurrency`` requests at a time: what the server adds on top (thread hops,
request signals, connections to the database pool and Redis per request). The web server's
CPU per request in the load bench is close to the ``asgi`` figure plus HTTP parsing.

    python bench/load_bench.py ... ; python bench/api_profile.py [--requests 300] [--top 25]

Prints one JSON object (``--out`` also writes it); ``--top N`` prints cProfile's N most
expensive functions (cumulative CPU time, test-client path) to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load_bench import create_database, environment, setup_accounts  # noqa: E402


def measure(client, path: str, requests: int) -> dict:
    from django.db import connection

    client.get(path)  # warm: first-request imports and caches are not the per-request cost
    queries: list[str] = []

    def record(execute, sql, params, many, context):
        queries.append(sql[:160])
        return execute(sql, params, many, context)

    # (CaptureQueriesContext saw none: the request's own signals reset its log)
    with connection.execute_wrapper(record):
        response = client.get(path)
    assert response.status_code == 200, (path, response.status_code, response.content[:200])
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        client.get(path)
    return {
        "path": path,
        "queries_per_request": len(queries),
        "queries": queries,
        "cpu_ms_per_request": round((time.process_time() - cpu) * 1e3 / requests, 2),
        "wall_ms_per_request": round((time.perf_counter() - wall) * 1e3 / requests, 2),
    }


class ASGIClient:
    """GET requests straight into an ASGI application, as uvicorn makes them."""

    def __init__(self, app, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(b"host", b"127.0.0.1")]
        self.headers += [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def get(self, url: str) -> tuple[int, bytes]:
        # in a context of its own, as uvicorn runs each request: what one request leaves in
        # a context variable (Django's per-context cache backends) the next does not see
        return await asyncio.create_task(self._get(url), context=contextvars.Context())

    async def _get(self, url: str) -> tuple[int, bytes]:
        path, _, query = url.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": self.headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        messages = [{"type": "http.request", "body": b"", "more_body": False}]
        disconnected = asyncio.Event()
        sent: list[dict] = []

        async def receive():
            if messages:
                return messages.pop()
            await disconnected.wait()  # the client stays connected until the answer is out
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await self.app(scope, receive, send)
        disconnected.set()
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], body


def measure_asgi(client: ASGIClient, path: str, requests: int, concurrency: int) -> dict:
    async def run() -> tuple[float, float]:
        status, body = await client.get(path)  # warm
        assert status == 200, (path, status, body[:200])
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(requests // concurrency):
            await asyncio.gather(*(client.get(path) for _ in range(concurrency)))
        done = requests // concurrency * concurrency
        return (time.process_time() - cpu) / done, (time.perf_counter() - wall) / done

    connections = redis_connections()
    cpu_s, wall_s = asyncio.run(run())
    return {
        "path": path,
        "concurrency": concurrency,
        "cpu_ms_per_request": round(cpu_s * 1e3, 2),
        "wall_ms_per_request": round(wall_s * 1e3, 2),
        # the Redis server's count, so other clients of it add to this
        "redis_connections_per_request": round((redis_connections() - connections) / requests, 2),
    }


def redis_connections() -> int:
    """Connections the Redis server has accepted so far."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return client.info("stats")["total_connections_received"] - 1  # this one
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per path")
    parser.add_argument("--top", type=int, default=0, help="cProfile's top functions")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="requests at a time on the asgi path"
    )
    parser.add_argument("--out")
    args = parser.parse_args()

    database = f"workbench_prof_{uuid.uuid4().hex[:6]}"
    env = environment(tempfile.mkdtemp(prefix="workbench-prof-"), database, "prof")
    os.environ.update(env)
    # the settings the web server runs with (workbench/asgi.py): the database pool
    os.environ["WORKBENCH_ASGI"] = "1"
    create_database(env["DATABASE_URL"], database)
    try:
        import subprocess

        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        [account] = setup_accounts(1)
        from django.conf import settings
        from rest_framework.test import APIClient

        settings.DEBUG = False
        client = APIClient(HTTP_AUTHORIZATION=f"Token {account['token']}")
        paths = ["/api/v1/runs/?limit=20", f"/api/v1/runs/{account['run']}/"]
        paths.append("/api/v1/models/?limit=20")
        results = [measure(client, path, args.requests) for path in paths]
        from workbench.asgi import application

        asgi = ASGIClient(application, {"Authorization": f"Token {account['token']}"})
        asgi_results = [measure_asgi(asgi, path, args.requests, args.concurrency) for path in paths]
        if args.top:
            profiler = cProfile.Profile(time.process_time)  # CPU, not waiting on I/O
            profiler.enable()
            for _ in range(args.requests):
                for path in paths:
                    client.get(path)
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.top)
            print(text.getvalue(), file=sys.stderr)
        report = {
            "command": " ".join(sys.argv),
            "requests_per_path": args.requests,
            "mean_cpu_ms_per_request": round(
                sum(r["cpu_ms_per_request"] for r in results) / len(results), 2
            ),
            "paths": results,
            "asgi_mean_cpu_ms_per_request": round(
                sum(r["cpu_ms_per_request"] for r in asgi_results) / len(asgi_results), 2
            ),
            "asgi_paths": asgi_results,
        }
    finally:
        from django.db import connections

        connections.close_all()
        create_database(env["DATABASE_URL"], database, drop=True)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
