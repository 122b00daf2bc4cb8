"""Fixtures the web tests share: a stand-in for the broker, a model, a token client."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import SQUEEZENET
from workbench.uploads import store_model_file


@pytest.fixture
def enqueued(monkeypatch):
    """Stages sent to the broker, recorded instead of sent."""
    sent = []
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", sent.append)
    return sent


@pytest.fixture
def model(user):
    return store_model_file(SQUEEZENET, owner=user, name="sq.onnx")


@pytest.fixture
def api(user):
    """An API client signed in with the user's token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client
