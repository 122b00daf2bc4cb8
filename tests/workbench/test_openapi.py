"""The REST API's OpenAPI schema and its docs page (issue 19).

The schema is generated without a warning, validates, and names every route and method
under /api/v1/; the docs page loads nothing from elsewhere; a list refuses an ordering, a
filter value or a parameter it does not know with the error body; and schemathesis, run
against a live server, finds no server error and no answer the schema does not describe."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.contrib.admindocs.views import simplify_regex
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.urls import URLResolver, get_resolver
from openapi_spec_validator import validate
from rest_framework.authtoken.models import Token

from engine.stages import RunOptions
from jobs.artifacts import save_artifact
from tests.conftest import LIGHT_DIR, start_web_server
from workbench import pipeline
from workbench.api.views import no_such_endpoint
from workbench.models import OnnxModel, Run, Status, Target
from workbench.targets import save_user_target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db

API = "/api/v1/"
# Not API operations: the API's index page (the browsable API), and the schema and its docs
# page themselves.
NOT_OPERATIONS = {API, f"{API}schema/", f"{API}docs/"}


def served_schema(client) -> dict:
    response = client.get(f"{API}schema/?format=json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("openapi") / "schema.yaml"
    # any warning (an untyped field, a view drf-spectacular cannot read) raises
    # SchemaGenerationError
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return path


def test_the_schema_is_generated_without_a_warning_and_validates(schema_file, client):
    schema = yaml.safe_load(schema_file.read_text())
    validate(schema)
    # the server serves the same document, to anyone
    assert served_schema(client)["paths"].keys() == schema["paths"].keys()


def api_routes() -> set[tuple[str, str]]:
    """(path template, method) of every route Django serves under /api/v1/, read from the
    URL patterns themselves (not from drf-spectacular's own walk)."""
    found = set()

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
                continue
            route = prefix + str(pattern.pattern)
            # the router's ".json" suffix twins; the catch-all 404 for any other path
            if "format" in route or pattern.callback is no_such_endpoint:
                continue
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", simplify_regex(route))
            path = path.replace("{pk}", "{id}")
            if not path.startswith(API) or path in NOT_OPERATIONS:
                continue
            view = pattern.callback
            if hasattr(view, "actions"):  # a viewset: its method -> action map
                methods = set(view.actions)
            else:
                view_class = view.view_class
                methods = {m for m in view_class.http_method_names if hasattr(view_class, m)}
            found.update((path, m.upper()) for m in methods - {"head", "options"})

    walk(get_resolver().url_patterns, "/")
    return found


def test_the_schema_names_every_api_route_and_method(client):
    schema = served_schema(client)
    documented = {
        (path, method.upper())
        for path, operations in schema["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    }
    routes = api_routes()
    assert routes, "no route found under /api/v1/"
    assert documented == routes


def test_every_operation_documents_the_error_body(schema_file):
    """401 wherever a token is needed, 404 wherever the path names an object; every error
    answer is the one error body (but a cancel's 409, which is the run as it is)."""
    schema = yaml.safe_load(schema_file.read_text())
    for route, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if operation.get("security") and {} not in operation["security"]:
                assert "401" in responses, (method, route)
            if "{" in route:
                assert "404" in responses, (method, route)
            for status, response in responses.items():
                if status.startswith("4") and not (route.endswith("/cancel/") and status == "409"):
                    body = response["content"]["application/json"]["schema"]
                    assert body == {"$ref": "#/components/schemas/Error"}, (method, route, status)
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]


def test_the_docs_page_loads_swagger_ui_from_our_own_static_files(client):
    page = client.get(f"{API}docs/")
    assert page.status_code == 200
    html = page.content.decode()
    urls = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert len(urls) >= 4  # icon, stylesheet, two bundles, the start-up script
    assert not re.search(r"https?://|//[a-z]", html), "the page names another host"
    for url in urls:
        assert url.startswith("/"), url
        if url.startswith("/static/"):
            assert finders.find(url.removeprefix("/static/")), f"{url} is not in our static files"
    # the start-up script is a file of its own, so the site's CSP needs no exception
    assert "<script>" not in html
    assert page["Content-Security-Policy"].startswith("default-src 'self'; script-src 'self';")
    script = client.get(next(url for url in urls if "script" in url))
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert f"{API}schema/" in script.content.decode()
    assert not re.search(r"https?://", script.content.decode())


def test_the_schema_is_public_even_with_a_stale_token(client):
    stale = client.get(f"{API}schema/", HTTP_AUTHORIZATION="Token no-such-token")
    assert stale.status_code == 200
    assert stale.content.startswith(b"openapi: 3.")


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("models/", "ordering=size", "ordering"),
        ("models/", "ordering=name,-owner", "ordering"),
        ("models/", "nmae=sq", "nmae"),
        ("runs/", "status=done", "status"),
        ("runs/", "status=", "status"),
        ("runs/", "model=abc", "model"),
        ("runs/", "model=99999999999999999999999", "model"),
        ("runs/", "target=" + "x" * 101, "target"),
        ("artifacts/", "stage=teleport", "stage"),
        ("artifacts/", "run=-1", "run"),
        ("targets/", "all_versions=maybe", "all_versions"),
        ("targets/", "kind=quantum", "kind"),
        ("models/", "limit=100000000000000000000000", "limit"),
        ("models/", "limit=0", "limit"),
        ("runs/", "offset=-5", "offset"),
        ("artifacts/", "offset=null", "offset"),
    ],
)
def test_a_list_refuses_what_it_does_not_know(api, path, query, field):
    response = api.get(f"{API}{path}?{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["detail"], error


def test_a_path_the_api_does_not_have_is_a_404_with_the_error_body(api):
    for path in ("models/1.5/", "runs/7/stages/AAA/", "nothing-here/"):
        response = api.post(f"{API}{path}")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_lists_filter_and_order_as_asked(api, user, model, enqueued):
    host = Target.objects.filter(name="host").latest("version")
    runs = [
        pipeline.create_run(
            owner=user, model=model, target=host, options=RunOptions.from_dict(["analyze"])
        )
        for _ in range(3)
    ]
    pipeline.cancel_run(runs[1])

    def ids(query: str, path: str = "runs/") -> list[int]:
        response = api.get(f"{API}{path}?{query}")
        assert response.status_code == 200, response.content
        return [item["id"] for item in response.json()["results"]]

    newest_first = [r.pk for r in reversed(runs)]
    assert ids("") == newest_first
    assert ids("ordering=created_at") == newest_first[::-1]
    assert ids("status=cancelled") == [runs[1].pk]
    assert ids(f"status=queued&model={model.pk}&target=host") == [runs[2].pk, runs[0].pk]
    assert ids(f"target={host.pk}&limit=1&offset=1") == [runs[1].pk]
    assert ids("model=999999") == []
    assert ids("ordering=") == newest_first  # no ordering: the default

    assert ids("name=SQ", "models/") == [model.pk]
    assert ids("name=resnet", "models/") == []

    profile = copy.deepcopy(Target.objects.filter(name__startswith="phone-").first().profile)
    profile.update(name="my-phone", version=1)
    save_user_target(user, profile)
    profile["units"][0]["mem_bw_gbps"] = 12.5
    newer = save_user_target(user, profile)
    assert ids("name=my-phone", "targets/") == [newer.pk]
    assert len(ids("name=my-phone&all_versions=true", "targets/")) == 2


# --- schemathesis against a live server -----------------------------------------------

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
]
EXAMPLES_PER_OPERATION = 20
# The rate limits and the active-run quota are raised for this server, so the fuzzer
# reaches the logic behind them (their 429s have tests of their own).
UNLIMITED = {
    "WORKBENCH_RATE_UPLOADS": "1000000/3600",
    "WORKBENCH_RATE_RUNS": "1000000/3600",
    "WORKBENCH_RATE_TOKEN": "1000000/60",
    "WORKBENCH_RATE_LOGIN_FAILURES": "1000000/900",
    "WORKBENCH_RATE_LOGIN_FAILURES_IP": "1000000/900",
    "WORKBENCH_MAX_ACTIVE_RUNS": "1000000",
}


@pytest.fixture
def seeded(user, monkeypatch, tmp_path) -> dict[str, list[int]]:
    """The user's objects for the operations to find: an analyzed model with a queued run
    (which has an artifact) and a failed one (to retry), and an own target."""
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", lambda stage: None)
    model = store_model_file(LIGHT_DIR / "light_squeezenet.onnx", owner=user, name="sq")
    OnnxModel.objects.filter(pk=model.pk).update(analysis={"nodes": 66})
    host = Target.objects.filter(name="host").latest("version")
    queued, failed = (
        pipeline.create_run(
            owner=user, model=model, target=host, options=RunOptions.from_dict(["analyze"])
        )
        for _ in range(2)
    )
    Run.objects.filter(pk=failed.pk).update(status=Status.FAILED)
    failed.stages.update(status=Status.FAILED, error_code="worker_lost")
    plan = tmp_path / "plan.json"
    plan.write_text('{"arena_bytes": 76}')
    artifact = save_artifact(queued.stages.get(), "memory_plan", plan)
    profile = copy.deepcopy(Target.objects.filter(name__startswith="phone-").first().profile)
    own = save_user_target(user, {**profile, "name": "my-phone", "version": 1})
    return {
        "models": [model.pk],
        "runs": [queued.pk, failed.pk],
        "artifacts": [artifact.pk],
        "targets": [own.pk, host.pk],
    }


def toml(value) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are TOML's too."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def schemathesis_config(ids: dict[str, list[int]], token: str) -> str:
    """A schemathesis.toml: the token on every request, a fixed seed, bounded examples,
    and the seeded ids mixed into the generated ones (half of the time), so that the
    operations on one object get past the 404 of an id nobody has."""
    lines = [
        "seed = 19",
        "request-timeout = 30",
        "workers = 1",
        f"headers = {toml({'Authorization': f'Token {token}'})}",
        f"generation = {toml({'max-examples': EXAMPLES_PER_OPERATION})}",
    ]
    lines += [f"dictionaries.{name} = {toml({'values': values})}" for name, values in ids.items()]
    # An entry applies to the operations it names ("METHOD /path"); no two entries name
    # the same one (schemathesis OR-s the filters of an entry and merges the entries).
    operations = [
        # Revoking the token the run signs in with would make every later request a 401.
        {"include-name": f"DELETE {API}auth/token/", "enabled": False},
        {"include-name-regex": r"/models/\{id\}/", "parameters": {"path.id": "models"}},
        {"include-name-regex": r"/targets/\{id\}/$", "parameters": {"path.id": "targets"}},
        {"include-name-regex": r"/runs/\{id\}/", "parameters": {"path.id": "runs"}},
        {"include-name-regex": r"/artifacts/\{id\}/", "parameters": {"path.id": "artifacts"}},
        {"include-name": f"GET {API}runs/", "parameters": {"query.model": "models"}},
        {"include-name": f"POST {API}runs/", "parameters": {"body.model": "models"}},
        {"include-name": f"GET {API}artifacts/", "parameters": {"query.run": "runs"}},
    ]
    for operation in operations:
        parameters = operation.get("parameters", {})
        for name, dictionary in parameters.items():
            parameters[name] = {"dictionary": dictionary, "probability": 0.5}
        lines.append("[[operations]]")
        lines.extend(f"{json.dumps(key)} = {toml(value)}" for key, value in operation.items())
    return "\n".join(lines) + "\n"


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_schemathesis_finds_no_server_error_and_no_answer_off_the_schema(
    live_settings, user, seeded, tmp_path
):
    url, server = start_web_server(live_settings, tmp_path, **UNLIMITED)
    config = tmp_path / "schemathesis.toml"
    config.write_text(schemathesis_config(seeded, Token.objects.create(user=user).key))

    def run(*selection: str) -> str:
        command = [
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
            "--no-color", "run", f"{url}{API}schema/", "--checks", ",".join(CHECKS),
            "--phases", "coverage,fuzzing", *selection,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=200, cwd=tmp_path)
        output = done.stdout + done.stderr
        print(output[output.find("SUMMARY") - 40 :])  # operations, test cases, failures
        assert done.returncode == 0, output[-20000:]
        assert re.search(r"(\d+) generated, \1 passed", output), output[-3000:]
        return output

    try:
        # Deleting comes last: schemathesis reuses the ids it saw in earlier answers, and
        # a model deleted early would leave the other operations nothing but 404s.
        run("--exclude-method", "DELETE")
        run("--include-method", "DELETE")
    finally:
        server.stop()
