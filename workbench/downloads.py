"""Artifact downloads, for the web page and the API alike (the caller checked the owner).

From local disk, and from S3 by default, the bytes stream through the web process as they
are read. With ``WORKBENCH_S3_PRESIGNED_DOWNLOADS`` the answer is a 302 to a presigned
link: the client fetches from the bucket and the web process carries nothing.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import FileResponse, Http404, HttpResponse, HttpResponseRedirect

from workbench.models import Artifact
from workbench.storage import download_url, open_stream


class StreamedFileResponse(FileResponse):
    """A FileResponse that streams over ASGI too. Django serves a synchronous iterator to an
    ASGI server by reading it whole into a list first (a 1 GB artifact, 1 GB of memory);
    here each chunk is read in a worker thread as the client takes it."""

    block_size = 256 << 10

    async def __aiter__(self):
        chunks = iter(self.streaming_content)
        while (
            chunk := await sync_to_async(next, thread_sensitive=False)(chunks, None)
        ) is not None:
            yield chunk


def artifact_response(artifact: Artifact) -> HttpResponse:
    """The artifact with its sha256 in a header, so clients can verify it. Always as bytes
    (``application/octet-stream``): a type guessed from the name would let a browser
    render an artifact (an HTML report, say) from our origin."""
    link = None
    if settings.STORAGE_PRESIGNED_DOWNLOADS:
        link = download_url(
            artifact.file.name, filename=artifact.name, expire_s=settings.STORAGE_PRESIGN_SECONDS
        )
    if link:
        response = HttpResponseRedirect(link)
    else:
        try:
            handle = open_stream(artifact.file.name, artifact.file.storage)
        except FileNotFoundError as e:
            raise Http404("the artifact's file is missing from storage") from e
        response = StreamedFileResponse(
            handle,
            as_attachment=True,
            filename=artifact.name,
            content_type="application/octet-stream",
        )
        if "Content-Length" not in response:  # a stream from S3 cannot say its length
            response["Content-Length"] = str(artifact.size_bytes)
    response["X-Content-SHA256"] = artifact.sha256
    return response
