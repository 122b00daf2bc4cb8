"""A run's options are validated when it is created, by the engine's own Options: a bad
option is a 400 naming the field, at the API and in the form, and nothing is enqueued."""

from __future__ import annotations

import pytest

from workbench.models import Run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"options": {"profile": {"window_s": "soon"}}}, "options.profile.window_s", "a number"),
        ({"options": {"profile": {"window_s": 1e9}}}, "options.profile.window_s", "at most 120"),
        ({"profile_window_s": True}, "options.profile.window_s", "expected a number"),
        ({"options": {"profile": {"threads": 2.5}}}, "options.profile.threads", "whole number"),
        ({"options": {"profile": {"speed": 1}}}, "options.profile.speed", "unknown option"),
        (
            {"options": {"partition": {"objective": "cheap"}}},
            "options.partition.objective",
            "is not one of latency, energy, weighted",
        ),
        (
            {"options": {"partition": {"latency_cap_ms": -5}}},
            "options.partition.latency_cap_ms",
            "must be at least",
        ),
        ({"options": {"teleport": {}}}, "options.teleport", "unknown stage"),
        ({"options": {"memory": []}}, "options.memory", "expected an object"),
        ({"options": []}, "options", "expected an object"),
        ({"stages": ["teleport"]}, "stages", "unknown stage(s): teleport"),
        ({"stages": "analyze"}, "stages", "a list of stage names"),
        ({"input_shapes": {"data_0": [1, 3, 10**400]}}, "input_shapes", "from 1 to"),
        ({"input_shapes": {"data_0": [1, -3]}}, "input_shapes", "from 1 to"),
        ({"input_shapes": "data_0=1x3xbig"}, "input_shapes", "is not NAME=DIMS"),
        (
            {"stages": ["accuracy"], "options": {"accuracy": {"candidate": "partitioned"}}},
            "stages",
            "accuracy needs the partition stage",
        ),
        (
            {"options": {"accuracy": {"candidate": "other"}}},
            "options.accuracy.other_model",
            "choose the model",
        ),
        (
            {
                "stages": ["accuracy"],
                "options": {"accuracy": {"candidate": "other", "other_model": 999999}},
            },
            "options.accuracy.other_model",
            "no model with id 999999",
        ),
    ],
)
def test_a_bad_option_is_a_400_naming_the_field_and_nothing_is_enqueued(
    api, model, enqueued, body, field, words
):
    response = api.post("/api/v1/runs/", {"model": model.pk, **body}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["detail"], error["detail"]
    assert words in str(error["detail"][field])
    assert not Run.objects.exists() and not enqueued


def test_a_valid_run_stores_every_option_with_its_default(
    api, model, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/v1/runs/",
            {
                "model": model.pk,
                "stages": ["memory", "profile"],
                "input_shapes": "data_0=1x3x224x224",
                "options": {"memory": {"in_place": True}},
                "profile_window_s": 2,
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    config = Run.objects.get().config
    assert config["stages"] == ["analyze", "profile", "memory"]
    assert config["input_shapes"] == {"data_0": [1, 3, 224, 224]}
    assert config["options"]["memory"]["in_place"] is True
    assert config["options"]["memory"]["order_search"] is True  # the engine's default
    assert config["options"]["profile"]["window_s"] == 2.0
    assert [s.stage for s in enqueued] == ["analyze"]


def test_the_form_shows_the_engines_defaults_and_refuses_a_bad_value(client, user, model, enqueued):
    client.force_login(user)
    page = client.get(f"/models/{model.pk}/").content.decode()
    assert 'name="profile_window_s"' in page and 'value="5.0"' in page
    assert "seconds of repeated runs per measurement" in page  # the option's own help
    response = client.post(
        f"/models/{model.pk}/runs/",
        {"target": "", "stages": ["profile"], "profile_window_s": "1000"},
    )
    assert response.status_code == 400
    assert not Run.objects.exists() and not enqueued
    response = client.post(
        f"/models/{model.pk}/runs/",
        {"stages": ["profile"], "profile_window_s": "1000", "target": _host(client, model)},
    )
    assert response.status_code == 400
    text = response.content.decode()
    assert "Ensure this value is less than or equal to 120" in text
    assert not Run.objects.exists() and not enqueued


def test_the_form_starts_a_run_with_the_options_it_shows(
    client, user, model, enqueued, django_capture_on_commit_callbacks
):
    client.force_login(user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/models/{model.pk}/runs/",
            {
                "target": _host(client, model),
                "stages": ["memory"],
                "memory_in_place": "on",
                "memory_order_search": "on",
                "memory_compare_tvm": "on",
                "profile_window_s": "5.0",
                "profile_threads": "0",
                "compile_tune_minutes": "0",
                "accuracy_candidate": "fp16",
                "partition_time_limit_s": "20",
                "partition_objective": "latency",
                "input_shapes": "data_0=1x3x224x224",
            },
        )
    assert response.status_code == 302, response.content.decode()[-2000:]
    config = Run.objects.get().config
    assert config["options"]["memory"]["in_place"] is True
    assert config["input_shapes"] == {"data_0": [1, 3, 224, 224]}
    assert [s.stage for s in enqueued] == ["analyze"]


def _host(client, model) -> str:
    from workbench.models import Target

    return str(Target.objects.filter(name="host").order_by("-version").first().pk)
