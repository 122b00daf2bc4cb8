"""REST client subcommands for CI pipelines: submit a model, wait for the run, gate on it,
compare runs.

Gates (``--gate``) are conditions on a run's headline figures, checked by
:mod:`engine.report.gates` on the figures the server reports (``GET runs/{id}/figures/``),
absolute or against a baseline run (``--baseline``). ``--junit`` writes one test case per
stage and per gate; ``--summary`` the whole report as JSON.

Exit codes: 0 success, 2 bad input or usage, 1 internal or connection error, 3 the run
failed, was cancelled, or broke a gate (so a CI job can tell them apart).
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
from datetime import datetime
from pathlib import Path

from cli.junit import junit_xml
from engine.report.gates import GateError, evaluate, parse_gate
from frontend.units import format_figure

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
        req = urllib.request.Request(self.base + path, method=method)
        if self.token:
            # not sent on to a redirect's target: a presigned storage link carries its own
            # signature and refuses a second one
            req.add_unredirected_header("Authorization", f"Token {self.token}")
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
        """Upload without the server's automatic analysis: submit starts its own run."""
        boundary = uuid.uuid4().hex
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="analyze"\r\n\r\nfalse\r\n'
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
    gates.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="EXPR",
        help="a condition on a result figure, e.g. 'accuracy.cosine>=0.999', "
        "'profile.latency_ms<=1.05*baseline', 'memory.arena_bytes<=64e6' (repeatable); "
        "the figures are listed by 'workbench figures RUN'",
    )
    gates.add_argument(
        "--baseline",
        type=_baseline_arg,
        metavar="RUN",
        help="the run 'baseline' means in gates: a run id, or 'pinned' for the model's "
        "pinned baseline run",
    )
    gates.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    gates.add_argument("--summary", type=Path, metavar="FILE", help="write the report as JSON")
    gates.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    gates.add_argument(
        "--max-latency-ms", type=float, help="short for --gate profile.latency_ms<=X"
    )
    gates.add_argument("--max-params", type=float, help="short for --gate analyze.params<=X")
    gates.add_argument("--max-macs", type=float, help="short for --gate analyze.macs<=X")

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

    figures = subparsers.add_parser(
        "figures", parents=[common], help="print a run's headline figures (what gates test)"
    )
    figures.add_argument("run", type=int)
    figures.set_defaults(func=_guard(_figures))

    compare = subparsers.add_parser(
        "compare", parents=[common], help="compare two or more runs (the first is the reference)"
    )
    compare.add_argument("runs", type=int, nargs="+", metavar="RUN")
    compare.add_argument("--csv", choices=["figures", "ops"], help="print that table as CSV")
    compare.set_defaults(func=_guard(_compare))


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
    gating = args.gate or args.baseline is not None or args.junit or args.summary
    gating = gating or any(
        getattr(args, f) is not None for f in ("max_latency_ms", "max_params", "max_macs")
    )
    if gating and not args.wait:
        raise ClientError("gates, --baseline, --junit and --summary need --wait")
    if args.wait:
        _gates(args)  # a gate that cannot be read stops us before the upload
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


def _gates(args) -> list:
    """The gates asked for, read before anything is uploaded: a typo is a usage error."""
    expressions = list(args.gate)
    for flag, key in (
        ("max_latency_ms", "profile.latency_ms"),
        ("max_params", "analyze.params"),
        ("max_macs", "analyze.macs"),
    ):
        value = getattr(args, flag)
        if value is not None:
            expressions.append(f"{key}<={value!r}")
    try:
        gates = [parse_gate(e) for e in expressions]
    except GateError as e:
        raise ClientError(str(e)) from e
    if any(g.baseline for g in gates) and args.baseline is None:
        raise ClientError("a gate compares with 'baseline': name the run with --baseline RUN")
    return gates


def _wait(args) -> int:
    gates = _gates(args)
    api = Api(args.url, args.token)
    baseline = None
    if args.baseline == "pinned":
        args.baseline = _pinned_baseline(api, args.run)
    if args.baseline is not None:
        baseline = _figure_map(api, args.baseline)
    deadline = time.monotonic() + args.timeout
    delay, shown, timed_out = 0.5, {}, False
    while True:
        run = api.request("GET", f"runs/{args.run}/")
        if not args.quiet:
            _show_progress(run, shown)
        if run["status"] in TERMINAL:
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
    report = {
        "run": run["id"],
        "status": "timeout" if timed_out else run["status"],
        "error": (
            f"still {run['status']} after {args.timeout:.0f} s"
            if timed_out
            else run["snapshot"].get("error_message") or None
        ),
        "stages": [_stage_entry(s) for s in run["snapshot"]["stages"]],
        "baseline": args.baseline,
        "gates": [],
    }
    if gates and not timed_out:
        figures = _figure_map(api, run["id"])
        report["gates"] = [evaluate(g, figures, baseline).to_dict() for g in gates]
    passed = run["status"] == "succeeded" and all(g["passed"] for g in report["gates"])
    report["passed"] = passed and not timed_out
    # The reports are written whatever happened: a CI job reads them to say why it failed.
    if args.junit:
        args.junit.write_bytes(junit_xml(report))
    if args.summary:
        args.summary.write_text(json.dumps(report, indent=2))
    if timed_out:
        raise ClientError(f"run {args.run} {report['error']}", EXIT_GATE)
    lines = [
        f"run {run['id']}: {run['status']}" + (f" ({report['error']})" if report["error"] else "")
    ]
    lines += [
        f"  {'PASS' if g['passed'] else 'FAIL'} {g['expression']}: {g['reason']}"
        for g in report["gates"]
    ]
    _emit(args, report, "\n".join(lines))
    return EXIT_OK if report["passed"] else EXIT_GATE


def _baseline_arg(text: str) -> int | str:
    if text == "pinned":
        return text
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a run id or 'pinned', got '{text}'")


def _pinned_baseline(api: Api, run_id: int) -> int:
    model = api.request("GET", f"runs/{run_id}/")["model"]
    pinned = api.request("GET", f"models/{model}/")["baseline_run"]
    if pinned is None:
        raise ClientError(
            f"model {model} has no pinned baseline run: pin one on the model's page or with "
            f'PUT /api/v1/models/{model}/baseline/ {{"run": RUN}}'
        )
    return pinned


def _figure_map(api: Api, run_id: int) -> dict[str, dict]:
    body = api.request("GET", f"runs/{run_id}/figures/")
    return {f["key"]: f for f in body["figures"]}


def _stage_entry(stage: dict) -> dict:
    duration = None
    if stage.get("started_at") and stage.get("finished_at"):
        started = datetime.fromisoformat(stage["started_at"])
        duration = (datetime.fromisoformat(stage["finished_at"]) - started).total_seconds()
    return {
        "stage": stage["stage"],
        "status": stage["status"],
        "duration_s": duration,
        "error": stage.get("error_message") or None,
    }


def _show_progress(run: dict, shown: dict) -> None:
    """One line on stderr whenever a stage's status, or its progress by a tenth, changes."""
    for stage in run["snapshot"]["stages"]:
        step = (stage["status"], int(stage["progress"] * 10))
        if shown.get(stage["stage"]) == step:
            continue
        shown[stage["stage"]] = step
        message = stage.get("error_message") or stage.get("message") or ""
        print(
            f"run {run['id']} {stage['stage']:<9} {stage['status']:<9} "
            f"{stage['progress']:>4.0%} {message}".rstrip(),
            file=sys.stderr,
            flush=True,
        )


def _figures(args) -> int:
    api = Api(args.url, args.token)
    body = api.request("GET", f"runs/{args.run}/figures/")
    lines = [f"{f['key']:<32} {_value(f):>16}  {f['basis']}" for f in body["figures"]]
    _emit(args, body, "\n".join(lines) or f"run {args.run} has no results yet")
    return EXIT_OK


def _compare(args) -> int:
    if len(args.runs) < 2:
        raise ClientError("compare needs two or more runs")
    api = Api(args.url, args.token)
    query = "compare/?runs=" + ",".join(str(r) for r in args.runs)
    if args.csv:
        sys.stdout.write(api.request_bytes("GET", f"{query}&table={args.csv}").decode())
        return EXIT_OK
    comparison = api.request("GET", query)
    runs = comparison["runs"]
    lines = [f"reference: {runs[0]['label']}"] + [f"vs        {r['label']}" for r in runs[1:]]
    lines.append("")
    for row in comparison["figures"]:
        values = ["-" if v is None else _value({**v, "unit": row["unit"]}) for v in row["values"]]
        deltas = [
            d["direction"] if d["pct"] is None else f"{d['pct']:+.1f}% {d['direction']}"
            for d in row["deltas"]
        ]
        lines.append(
            f"{row['key']:<32} " + "  ".join(f"{v:>14}" for v in values) + "  " + ", ".join(deltas)
        )
    ops = comparison["ops"]
    if ops["rows"]:
        lines.append("")
        lines.append(f"slowest ops (aligned {ops['method']}):")
        for row in ops["rows"][:10]:
            times = "  ".join("-" if v is None else f"{v:10.1f}" for v in row["latency_us"])
            lines.append(f"  {row['name'][:30]:<30} {row['op_type'][:16]:<16} {times} us")
    for u in ops["unaligned"]:
        lines.append(f"not aligned in run {u['run']}: {len(u['ops'])} ops")
    if ops.get("note"):
        lines.append(ops["note"])
    kernels = comparison["kernels"]["rows"]
    if kernels:
        lines.append("")
        lines.append("TVM kernels (us per call):")
        for k in kernels[:10]:
            times = "  ".join("-" if v is None else f"{v:10.1f}" for v in k["us_per_call"])
            lines.append(f"  {k['kernel'][:40]:<40} {times}")
    _emit(args, comparison, "\n".join(lines))
    return EXIT_OK


def _value(figure: dict) -> str:
    return format_figure(figure.get("value"), figure.get("unit", ""))


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
