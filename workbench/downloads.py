from __future__ import annotations

from django.http import FileResponse, Http404

from workbench.models import Artifact


def artifact_response(artifact: Artifact) -> FileResponse:
    """Stream an artifact with its sha256 in a header, so clients can verify it. Always as
    bytes (``application/octet-stream``): a type guessed from the name would let a browser
    render an artifact (an HTML report, say) from our origin."""
    try:
        handle = artifact.file.open("rb")
    except FileNotFoundError as e:
        raise Http404("the artifact's file is missing from storage") from e
    response = FileResponse(
        handle,
        as_attachment=True,
        filename=artifact.name,
        content_type="application/octet-stream",
    )
    response["X-Content-SHA256"] = artifact.sha256
    return response
