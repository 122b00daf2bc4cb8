"""REST client subcommands for CI pipelines: submit a model, wait for the run, gate on it.

Exit codes: 0 success, 2 bad input or usage, 1 internal or connection error, 3 the run
failed, was cancelled, or broke a --max-* threshold (so a CI job can tell them apart).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_GATE = 0, 1, 2, 3
TERMINAL = {"succeeded", "failed", "cancelled"}


class ClientError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Api:
    def __init__(self, url: str, token: str | None) -> None:
        self.base = url.rstrip("/") + "/api/v1/"
        self.token = token

    def request(self, method: str, path: str, *, body: bytes | None = None, content_type=None):
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read()).get("error", {})
            except ValueError:
                error = {}
            message = error.get("message") or e.reason
            detail = error.get("detail")
            if detail:
                message += f": {json.dumps(detail)}"
            code = EXIT_INTERNAL if e.code >= 500 else EXIT_BAD_INPUT
            raise ClientError(f"{method} {path} -> HTTP {e.code}: {message}", code) from e
        except urllib.error.URLError as e:
            raise ClientError(
                f"cannot reach the workbench at {self.base}: {e.reason}", EXIT_INTERNAL
            ) from e

    def request_bytes(self, method: str, path: str) -> bytes:
        headers = {"Authorization": f"Token {self.token}"} if self.token else {}
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            raise ClientError(f"{method} {path} -> HTTP {e.code}", EXIT_BAD_INPUT) from e
        except urllib.error.URLError as e:
            raise ClientError(f"cannot reach the workbench: {e.reason}", EXIT_INTERNAL) from e

    def post_json(self, path: str, payload: dict):
        return self.request(
            "POST", path, body=json.dumps(payload).encode(), content_type="application/json"
        )

    def upload(self, path: Path, name: str) -> dict:
        boundary = uuid.uuid4().hex
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        body = head + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        return self.request(
            "POST", "models/", body=body, content_type=f"multipart/form-data; boundary={boundary}"
        )


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register submit, wait, result and download on the `workbench` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("WORKBENCH_URL", "http://127.0.0.1:8000"))
    common.add_argument(
        "--token",
        default=os.environ.get("WORKBENCH_TOKEN"),
        help="API token (default: $WORKBENCH_TOKEN)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON object")

    gates = argparse.ArgumentParser(add_help=False)
    gates.add_argument("--timeout", type=float, default=3600, help="seconds to wait (default 3600)")
    gates.add_argument("--max-latency-ms", type=float, help="fail if the measured median is higher")
    gates.add_argument("--max-params", type=float, help="fail if the model has more parameters")
    gates.add_argument("--max-macs", type=float, help="fail if the model needs more MACs")

    submit = subparsers.add_parser(
        "submit",
        parents=[common, gates],
        help="upload a model to a workbench server and start a run",
    )
    submit.add_argument("model", type=Path)
    submit.add_argument("--name", help="model name (default: the file name)")
    submit.add_argument("--target", default="host")
    submit.add_argument("--stages", default="analyze", help="comma-separated, e.g. analyze,profile")
    submit.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224")
    submit.add_argument("--wait", action="store_true", help="wait for the run and apply the gates")
    submit.set_defaults(func=_guard(_submit))

    wait = subparsers.add_parser(
        "wait", parents=[common, gates], help="wait for a run to finish, then apply the gates"
    )
    wait.add_argument("run", type=int)
    wait.set_defaults(func=_guard(_wait))

    download = subparsers.add_parser(
        "download", parents=[common], help="download a run's artifacts, verifying their sha256"
    )
    download.add_argument("run", type=int)
    download.add_argument("--stage", help="only this stage's artifacts")
    download.add_argument("--out", type=Path, default=Path("."), help="directory (default .)")
    download.set_defaults(func=_guard(_download))

    result = subparsers.add_parser(
        "result", parents=[common], help="print one stage's result JSON of a run"
    )
    result.add_argument("run", type=int)
    result.add_argument("stage")
    result.add_argument("--out", type=Path, help="write the JSON to this file")
    result.set_defaults(func=_guard(_result))


def _download(args) -> int:
    api = Api(args.url, args.token)
    artifacts = api.request("GET", f"runs/{args.run}/artifacts/")
    wanted = [a for a in artifacts if not args.stage or a["stage"] == args.stage]
    if not wanted:
        raise ClientError(
            f"run {args.run} has no artifacts" + (f" from {args.stage}" if args.stage else "")
        )
    args.out.mkdir(parents=True, exist_ok=True)
    saved = []
    for artifact in wanted:
        data = api.request_bytes("GET", f"artifacts/{artifact['id']}/download/")
        digest = hashlib.sha256(data).hexdigest()
        if digest != artifact["sha256"]:
            raise ClientError(
                f"{artifact['name']}: sha256 mismatch ({digest} != {artifact['sha256']})",
                EXIT_INTERNAL,
            )
        path = args.out / artifact["name"]
        path.write_bytes(data)
        saved.append(
            {
                "name": artifact["name"],
                "path": str(path),
                "sha256": digest,
                "stage": artifact["stage"],
            }
        )
    _emit(
        args,
        {"run": args.run, "artifacts": saved},
        "\n".join(f"{a['path']}  sha256 {a['sha256']}" for a in saved),
    )
    return EXIT_OK


def _submit(args) -> int:
    if not args.model.is_file():
        raise ClientError(f"{args.model}: no such file")
    api = Api(args.url, args.token)
    model = api.upload(args.model, args.name or args.model.name)
    run = api.post_json(
        "runs/",
        {
            "model": model["id"],
            "target": args.target,
            "stages": [s.strip() for s in args.stages.split(",") if s.strip()],
            "input_shapes": ";".join(args.shape),
        },
    )
    if not args.wait:
        _emit(
            args,
            {"model": model["id"], "run": run["id"], "status": run["status"]},
            f"started run {run['id']} of model {model['id']}",
        )
        return EXIT_OK
    args.run = run["id"]
    return _wait(args)


def _wait(args) -> int:
    api = Api(args.url, args.token)
    deadline = time.monotonic() + args.timeout
    delay = 0.5
    while True:
        run = api.request("GET", f"runs/{args.run}/")
        if run["status"] in TERMINAL:
            break
        if time.monotonic() > deadline:
            raise ClientError(
                f"run {args.run} still {run['status']} after {args.timeout:.0f} s", EXIT_GATE
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
    report = {
        "run": run["id"],
        "status": run["status"],
        "gates": [],
        "error": run["snapshot"].get("error_message") or None,
    }
    if run["status"] == "succeeded":
        report["gates"] = _check_gates(api, args, run)
    passed = run["status"] == "succeeded" and all(g["passed"] for g in report["gates"])
    report["passed"] = passed
    lines = [
        f"run {run['id']}: {run['status']}" + (f" ({report['error']})" if report["error"] else "")
    ]
    lines += [
        f"  {'PASS' if g['passed'] else 'FAIL'} {g['name']}: {g['value']} (limit {g['limit']}, {g['kind']})"
        for g in report["gates"]
    ]
    _emit(args, report, "\n".join(lines))
    return EXIT_OK if passed else EXIT_GATE


def _check_gates(api: Api, args, run: dict) -> list[dict]:
    gates = []
    wanted_analysis = args.max_params is not None or args.max_macs is not None
    if wanted_analysis:
        analysis = api.request("GET", f"runs/{run['id']}/stages/analyze/")["result"]
        for name, limit in (("params", args.max_params), ("macs", args.max_macs)):
            if limit is not None:
                gates.append(
                    {
                        "name": name,
                        "value": analysis[name],
                        "limit": limit,
                        "kind": "counted from shapes",
                        "passed": analysis[name] <= limit,
                    }
                )
    if args.max_latency_ms is not None:
        if "profile" not in run["config"]["stages"]:
            raise ClientError(
                "--max-latency-ms needs a run with the profile stage (--stages analyze,profile)"
            )
        profile = api.request("GET", f"runs/{run['id']}/stages/profile/")["result"]
        median = profile["latency_ms"]
        if profile["measured"]:
            machine = profile["environment"]["machine"]["cpu_model"]
            kind = f"measured on {machine}, {profile['runs']} runs"
        else:
            kind = f"predicted by {profile['model']} for {profile['target']}"
        gates.append(
            {
                "name": "latency_ms (median)" if profile["measured"] else "latency_ms",
                "value": None if median is None else round(median, 4),
                "limit": args.max_latency_ms,
                "kind": kind,
                # Unknown is not within a limit: the gate fails and says so.
                "passed": median is not None and median <= args.max_latency_ms,
            }
        )
    return gates


def _result(args) -> int:
    api = Api(args.url, args.token)
    stage = api.request("GET", f"runs/{args.run}/stages/{args.stage}/")
    text = json.dumps(stage["result"], indent=2)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return EXIT_OK


def _emit(args, payload: dict, text: str) -> None:
    print(json.dumps(payload) if args.json else text)


def _guard(handler):
    def run(args) -> int:
        try:
            return handler(args)
        except ClientError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        except Exception as e:  # noqa: BLE001 - the CLI's last line of defence
            print(f"error: internal error: {type(e).__name__}: {e}", file=sys.stderr)
            return EXIT_INTERNAL

    return run
