"""Fixtures the integration tests share."""

from __future__ import annotations

import pytest

from tests.conftest import SQUEEZENET
from workbench.uploads import store_model_file


@pytest.fixture
def model(user):
    return store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
