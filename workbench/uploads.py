"""Model uploads: stream to a temporary file with a size cap, validate, then keep the bytes
in storage (``workbench.storage``) under their sha256. Nothing is stored for a rejected
upload. The scratch file is on this machine (``MEDIA_ROOT/tmp``) whatever the storage:
the checks need a real path."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.db import IntegrityError, transaction

from engine.accuracy.inputs import describe_inputs_npz
from engine.errors import EngineError
from engine.graph import read_header
from engine.graph.tensors import TensorSpec
from workbench import limits
from workbench.models import InputData, OnnxModel
from workbench.storage import save_file


class UploadRejected(ValueError):
    def __init__(self, message: str, *, code: str = "invalid_upload", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MB"


def too_large_message(size: int | None = None) -> str:
    limit = settings.MAX_UPLOAD_BYTES
    seen = f" ({_mb(size)} or more)" if size else ""
    return (
        f"the file is larger than the upload limit of {_mb(limit)}{seen}. Simplify or "
        "quantize the model, or ask the administrator to raise WORKBENCH_MAX_UPLOAD_BYTES."
    )


class SizeLimitUploadHandler(FileUploadHandler):
    """Refuse an oversized upload while it streams in, before it fills the disk.

    First in settings.FILE_UPLOAD_HANDLERS: it passes chunks through to Django's default
    handlers and marks the request when the cap is crossed; views then call
    check_not_too_large().
    """

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        self.limit = settings.MAX_UPLOAD_BYTES
        self.seen = 0
        # Multipart overhead is small; a body much larger than the cap cannot fit.
        if content_length and content_length > self.limit + (1 << 20):
            self.request.upload_too_large = content_length
        return None

    def new_file(self, *args, **kwargs):
        self.seen = 0
        if getattr(self.request, "upload_too_large", None):
            raise SkipFile
        super().new_file(*args, **kwargs)

    def receive_data_chunk(self, raw_data, start):
        self.seen += len(raw_data)
        if self.seen > self.limit:
            self.request.upload_too_large = self.seen
            raise SkipFile
        return raw_data

    def file_complete(self, file_size):
        return None


def check_not_too_large(request) -> None:
    size = getattr(request, "upload_too_large", None)
    if size:
        raise UploadRejected(too_large_message(size), code="file_too_large", status=413)


def _limits() -> dict:
    return {
        "max_bytes": settings.MAX_UPLOAD_BYTES,
        "max_nodes": settings.MAX_MODEL_NODES,
        "max_tensor_elements": settings.MAX_TENSOR_ELEMENTS,
    }


IN_PROCESS_MAX_BYTES = 8 << 20
"""An upload larger than this is parsed in a child process (``workbench.header_check``):
parsing holds the whole model, and the web process must stay small whatever is uploaded."""
HEADER_CHECK_TIMEOUT_S = 300


def _read_header(path: str, size: int) -> dict:
    """The validated header of the model at ``path`` (``size`` bytes), as a dict; raises
    :class:`UploadRejected` with the check's reason."""
    if size <= IN_PROCESS_MAX_BYTES:
        try:
            return read_header(path, **_limits()).to_dict()
        except EngineError as e:
            raise UploadRejected(e.message, code=e.code) from e
    request = {"path": path, "limits": _limits(), "memory_bytes": (2 << 30) + 4 * size}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workbench.header_check"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=HEADER_CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UploadRejected(
            f"reading the model took longer than {HEADER_CHECK_TIMEOUT_S} s, so it was "
            "refused. Check that the file is a valid ONNX model.",
            code="model_limit",
        ) from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise UploadRejected(
            "the model could not be read: its check stopped "
            f"(exit {done.returncode}) before saying why. Check that the file is a valid "
            "ONNX model, or simplify it.",
            code="invalid_model",
        ) from None
    if "error" in answer:
        error = answer["error"]
        raise UploadRejected(error["message"], code=error["code"])
    return answer["header"]


def _blob_name(sha256: str) -> str:
    return f"models/{sha256[:2]}/{sha256}.onnx"


def _scratch_file(suffix: str) -> tuple[int, str]:
    scratch = Path(settings.MEDIA_ROOT) / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=scratch, suffix=suffix)


def _copy_hashing(src: UploadedFile, dst) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    for chunk in src.chunks(1 << 20):
        size += len(chunk)
        if size > settings.MAX_UPLOAD_BYTES:
            raise UploadRejected(too_large_message(size), code="file_too_large", status=413)
        digest.update(chunk)
        dst.write(chunk)
    return digest.hexdigest(), size


def store_model_upload(uploaded: UploadedFile, *, owner, name: str = "") -> tuple[OnnxModel, bool]:
    """Validate an uploaded ONNX file and create the owner's OnnxModel for it.

    Returns (model, created): uploading the same bytes again returns the existing model, so
    a CI pipeline can submit on every commit without piling up copies."""
    if uploaded is None:
        raise UploadRejected("no file was sent: attach an .onnx file in the 'file' field")
    limits.hit("uploads", str(owner.pk))
    fd, tmp_path = _scratch_file(".onnx")
    try:
        with os.fdopen(fd, "wb") as tmp:
            sha256, size = _copy_hashing(uploaded, tmp)
        if size == 0:
            raise UploadRejected("the file is empty (0 bytes): upload an .onnx model file")
        existing = OnnxModel.objects.filter(owner=owner, sha256=sha256).first()
        if existing:
            return existing, False
        limits.check_storage(owner, size)
        header = _read_header(tmp_path, size)
        stored = save_file(_blob_name(sha256), Path(tmp_path), move=True)
        model = _create_model_row(
            owner, name or uploaded.name or "model.onnx", stored, sha256, size, header
        )
        return model, True
    finally:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)


def store_model_file(path: Path, *, owner, name: str, is_sample: bool = False) -> OnnxModel:
    """Register a model file from disk (sample models); same validation as an upload."""
    with path.open("rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    existing = OnnxModel.objects.filter(owner=owner, sha256=sha256).first()
    if existing:
        return existing
    header = read_header(str(path), **_limits()).to_dict()
    stored = save_file(_blob_name(sha256), path)
    size = path.stat().st_size
    return _create_model_row(owner, name, stored, sha256, size, header, is_sample=is_sample)


def _create_model_row(
    owner, name, file: str, sha256, size, info: dict, *, is_sample=False
) -> OnnxModel:
    try:
        with transaction.atomic():
            return OnnxModel.objects.create(
                owner=owner,
                name=name[:200],
                file=file,
                sha256=sha256,
                size_bytes=size,
                ir_version=info["ir_version"],
                opsets=info["opsets"],
                producer=info.get("producer", "")[:200],
                node_count=info["node_count"],
                inputs=info["inputs"],
                outputs=info["outputs"],
                is_sample=is_sample,
            )
    except IntegrityError:  # the same bytes uploaded twice at once: both get the one row
        return OnnxModel.objects.get(owner=owner, sha256=sha256)


def store_input_upload(
    uploaded: UploadedFile | None, *, model: OnnxModel, name: str = ""
) -> InputData:
    """Check an uploaded .npz against the model's inputs (names, ranks, dims, dtypes; no
    pickles) and keep it for accuracy runs. Nothing is kept when it does not fit."""
    if uploaded is None:
        raise UploadRejected("no file was sent: attach an .npz archive in the 'file' field")
    limits.hit("uploads", str(model.owner.pk))
    fd, tmp_path = _scratch_file(".npz")
    try:
        with os.fdopen(fd, "wb") as tmp:
            sha256, size = _copy_hashing(uploaded, tmp)
        limits.check_storage(model.owner, size)
        specs = [TensorSpec(**spec) for spec in model.inputs]
        try:
            # headers checked, members inflated in chunks and dropped: bounded memory
            tensors = describe_inputs_npz(tmp_path, specs)
        except EngineError as e:
            raise UploadRejected(e.message, code=e.code) from e
        stored = save_file(f"inputs/{sha256[:2]}/{sha256}.npz", Path(tmp_path), move=True)
        return InputData.objects.create(
            owner=model.owner,
            model=model,
            name=(name or uploaded.name or "inputs.npz")[:200],
            file=stored,
            sha256=sha256,
            size_bytes=size,
            tensors=tensors,
        )
    finally:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
