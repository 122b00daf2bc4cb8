"""What one API request costs the web process, in-process and without the server: CPU time
and database queries per request for the three requests ``bench/load_bench.py`` makes (run
list, one run, model list), signed in with a token. A database of its own, dropped at the
end. The load bench measures the whole stack under concurrency; this says where a
request's time goes, so a change to it can be judged before the noisy load run.

    python bench/load_bench.py ... ; python bench/api_profile.py [--requests 300] [--top 25]

Prints one JSON object (``--out`` also writes it); ``--top N`` prints cProfile's N most
expensive functions (cumulative) to stderr.
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per path")
    parser.add_argument("--top", type=int, default=0, help="cProfile's top functions")
    parser.add_argument("--out")
    args = parser.parse_args()

    database = f"workbench_prof_{uuid.uuid4().hex[:6]}"
    env = environment(tempfile.mkdtemp(prefix="workbench-prof-"), database, "prof")
    os.environ.update(env)
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
        if args.top:
            profiler = cProfile.Profile()
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
