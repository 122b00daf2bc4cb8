"""Deleting rows removes the files only they used; ``manage.py orphans`` finds the rest."""

from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
from django.core.management import call_command

from tests.conftest import SQUEEZENET
from workbench.models import Artifact, InputData, Run, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


def test_a_file_goes_with_the_last_row_that_uses_it(
    user, other_user, _media_root, django_capture_on_commit_callbacks
):
    mine = store_model_file(SQUEEZENET, owner=user, name="a.onnx")
    theirs = store_model_file(SQUEEZENET, owner=other_user, name="b.onnx")
    blob = _media_root / str(mine.file)
    assert str(mine.file) == str(theirs.file) and blob.exists()
    inputs_file = _media_root / "inputs" / "ab" / "x.npz"
    inputs_file.parent.mkdir(parents=True, exist_ok=True)
    np.savez(inputs_file, data_0=np.zeros((1, 3, 224, 224), np.float32))
    InputData.objects.create(
        owner=user, model=mine, name="x", file="inputs/ab/x.npz", sha256="x", size_bytes=1
    )
    run = Run.objects.create(
        owner=user, model=mine, target=Target.objects.get(name="host"), config={}
    )
    artifact_file = _media_root / f"artifacts/run-{run.pk}/compile/model.tar.gz"
    artifact_file.parent.mkdir(parents=True)
    artifact_file.write_bytes(b"compiled")
    Artifact.objects.create(
        run=run,
        stage="compile",
        kind="compiled_library",
        file=f"artifacts/run-{run.pk}/compile/model.tar.gz",
        name="model.tar.gz",
        sha256="y",
        size_bytes=8,
    )
    with django_capture_on_commit_callbacks(execute=True):
        mine.delete()  # cascades to its input set, run and artifact
    assert blob.exists(), "the other account's model still uses the bytes"
    assert not inputs_file.exists() and not artifact_file.exists()
    assert not (_media_root / f"artifacts/run-{run.pk}").exists()  # empty folders go too
    with django_capture_on_commit_callbacks(execute=True):
        theirs.delete()
    assert not blob.exists()


def test_the_orphans_command_reports_then_removes_what_nothing_uses(
    user, _media_root, settings, tmp_path
):
    settings.VAR_DIR = tmp_path / "var"
    kept = store_model_file(SQUEEZENET, owner=user, name="a.onnx")
    prepared = settings.VAR_DIR / "prepared"
    prepared.mkdir(parents=True)
    for sha, key in ((kept.sha256, "live"), ("f" * 64, "dead")):
        (prepared / f"{key}.json").write_text(f'{{"source_sha256": "{sha}"}}')
        (prepared / f"{key}.onnx").write_bytes(b"p")
    stray = _media_root / "models" / "zz" / "stray.onnx"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"x" * 1000)
    scratch = _media_root / "tmp" / "tmpabc.onnx"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    scratch.write_bytes(b"y" * 500)
    fresh = _media_root / "tmp" / "tmpnew.onnx"
    fresh.write_bytes(b"z")
    old = time.time() - 3 * 24 * 3600
    os.utime(scratch, (old, old))
    out = io.StringIO()
    call_command("orphans", stdout=out)
    report = out.getvalue()
    assert "models/zz/stray.onnx" in report and str(scratch) in report
    assert str(fresh) not in report  # an upload may be streaming into it
    assert str(prepared / "dead.onnx") in report and str(prepared / "live.onnx") not in report
    assert "4 orphaned file(s)" in report and "run with --delete" in report
    assert stray.exists()
    out = io.StringIO()
    call_command("orphans", "--delete", stdout=out)
    assert "removed" in out.getvalue()
    assert not stray.exists() and not scratch.exists() and fresh.exists()
    assert (_media_root / str(kept.file)).exists() and (prepared / "live.onnx").exists()
    assert not (prepared / "dead.onnx").exists()
