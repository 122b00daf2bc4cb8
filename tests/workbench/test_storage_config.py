"""WORKBENCH_STORAGE and WORKBENCH_S3_*: a wrong setting stops the start with its reason."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured

from workbench.storage_config import storages_setting

S3 = {
    "WORKBENCH_STORAGE": "s3",
    "WORKBENCH_S3_BUCKET": "models",
    "WORKBENCH_S3_ENDPOINT_URL": "http://minio:9000",
    "WORKBENCH_S3_ACCESS_KEY_ID": "key",
    "WORKBENCH_S3_SECRET_ACCESS_KEY": "secret",
}


def test_local_disk_is_the_default():
    default = storages_setting({})["default"]
    assert default == {"BACKEND": "django.core.files.storage.FileSystemStorage"}


def test_s3_is_configured_from_the_environment():
    setting = storages_setting({**S3, "WORKBENCH_S3_ADDRESSING_STYLE": "path"})
    default = setting["default"]
    assert default["BACKEND"] == "workbench.s3storage.S3Storage"
    assert default["OPTIONS"]["bucket_name"] == "models"
    assert default["OPTIONS"]["endpoint_url"] == "http://minio:9000"
    assert default["OPTIONS"]["addressing_style"] == "path"
    assert setting["staticfiles"]["BACKEND"].endswith("StaticFilesStorage")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"WORKBENCH_STORAGE": "ftp"}, "is not a storage backend"),
        ({"WORKBENCH_S3_BUCKET": ""}, "needs WORKBENCH_S3_BUCKET"),
        ({"WORKBENCH_S3_ENDPOINT_URL": "minio:9000"}, "is not an http(s) URL"),
        ({"WORKBENCH_S3_SECRET_ACCESS_KEY": ""}, "or neither"),
        ({"WORKBENCH_S3_ADDRESSING_STYLE": "sideways"}, "use one of auto, path, virtual"),
    ],
)
def test_a_wrong_setting_says_what_is_wrong(change, reason):
    with pytest.raises(ImproperlyConfigured, match=re.escape(reason)):
        storages_setting({**S3, **change})
