"""Where uploads, input sets and artifacts are kept: Django's ``STORAGES`` from the
environment.

``WORKBENCH_STORAGE=local`` (the default) keeps them under ``MEDIA_ROOT`` on this machine;
``WORKBENCH_STORAGE=s3`` keeps them in an S3-compatible bucket (AWS, MinIO, Ceph...), so
the web process and the workers share no directory. The S3 settings are checked here, when
the settings load, so a typo stops the process with a message instead of failing the
first upload.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

BACKENDS = ("local", "s3")
ADDRESSING_STYLES = ("auto", "path", "virtual")
STATICFILES = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}


def storages_setting(environ: Mapping[str, str]) -> dict:
    """Django's ``STORAGES`` for ``environ`` (raises ImproperlyConfigured with the reason)."""
    kind = environ.get("WORKBENCH_STORAGE", "local").strip().lower() or "local"
    if kind not in BACKENDS:
        raise ImproperlyConfigured(
            f"WORKBENCH_STORAGE={kind!r} is not a storage backend: use one of {', '.join(BACKENDS)}"
        )
    if kind == "local":
        # no OPTIONS: the location follows settings.MEDIA_ROOT
        default = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
    else:
        default = {"BACKEND": "workbench.s3storage.S3Storage", "OPTIONS": _s3_options(environ)}
    return {"default": default, "staticfiles": STATICFILES}


def _s3_options(environ: Mapping[str, str]) -> dict:
    def get(name: str) -> str:
        return environ.get(f"WORKBENCH_S3_{name}", "").strip()

    if importlib.util.find_spec("storages") is None or importlib.util.find_spec("boto3") is None:
        raise ImproperlyConfigured(
            "WORKBENCH_STORAGE=s3 needs django-storages and boto3: pip install -r requirements.txt"
        )
    bucket = get("BUCKET")
    if not bucket:
        raise ImproperlyConfigured(
            "WORKBENCH_STORAGE=s3 needs WORKBENCH_S3_BUCKET (the bucket name)"
        )
    endpoint = get("ENDPOINT_URL")
    if endpoint and (
        urlparse(endpoint).scheme not in {"http", "https"} or not urlparse(endpoint).netloc
    ):
        raise ImproperlyConfigured(
            f"WORKBENCH_S3_ENDPOINT_URL={endpoint!r} is not an http(s) URL "
            "(e.g. http://minio:9000; leave it unset for AWS)"
        )
    key, secret = get("ACCESS_KEY_ID"), get("SECRET_ACCESS_KEY")
    if bool(key) != bool(secret):
        raise ImproperlyConfigured(
            "set both WORKBENCH_S3_ACCESS_KEY_ID and WORKBENCH_S3_SECRET_ACCESS_KEY, or neither "
            "(then boto3 finds credentials itself: AWS_* variables, instance role...)"
        )
    style = get("ADDRESSING_STYLE").lower() or "auto"
    if style not in ADDRESSING_STYLES:
        raise ImproperlyConfigured(
            f"WORKBENCH_S3_ADDRESSING_STYLE={style!r}: use one of {', '.join(ADDRESSING_STYLES)}"
        )
    return {
        "bucket_name": bucket,
        "endpoint_url": endpoint or None,
        "region_name": get("REGION") or None,
        "access_key": key or None,
        "secret_key": secret or None,
        "addressing_style": style,
        "location": get("PREFIX").strip("/"),
        "signature_version": "s3v4",
        # names are content addresses or per-run paths: writing one again is a retry
        "file_overwrite": True,
        "default_acl": None,
        # a file opened whole (not streamed) spills to disk past this, never all in memory
        "max_memory_size": 8 << 20,
    }
