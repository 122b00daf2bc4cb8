"""The S3 backend (``WORKBENCH_STORAGE=s3``): django-storages' S3 storage with streamed
reads and download links.

django-storages' S3 file downloads the whole object into a temporary file on the first
``read``: a 1 GB artifact would be copied to the web process's disk before its first byte
reached the client. :meth:`S3Storage.open_stream` reads the object's body as it arrives,
and :meth:`S3Storage.download_url` makes a presigned GET that names the file. Imported
only when the setting names it, so the local profile never loads boto3.
"""

from __future__ import annotations

from typing import BinaryIO

from botocore.exceptions import ClientError
from storages.backends import s3
from storages.utils import clean_name


class S3Storage(s3.S3Storage):
    """django-storages' S3 backend with streamed reads and download links."""

    def open_stream(self, name: str) -> BinaryIO:
        key = self._normalize_name(clean_name(name))
        try:
            return self.bucket.Object(key).get()["Body"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise FileNotFoundError(f"no object {key!r} in bucket {self.bucket_name}") from e
            raise

    def download_url(self, name: str, *, filename: str, expire_s: int) -> str:
        """A presigned GET valid ``expire_s`` seconds that saves as ``filename``, as bytes."""
        safe = filename.replace('"', "").replace("\\", "")
        return self.url(
            name,
            parameters={
                "ResponseContentDisposition": f'attachment; filename="{safe}"',
                "ResponseContentType": "application/octet-stream",
            },
            expire=expire_s,
        )
