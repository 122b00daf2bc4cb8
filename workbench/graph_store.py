"""The graph view's built levels, kept as files under WORKBENCH_VAR_DIR/graphs so that
every web process shares them and a restart keeps them.

One folder per entry, named by a digest of what it was built from (a changed analysis or
a new payload version never reads a stale one). A model's entry holds its tree (the
hierarchy, no layout: marshal, read back in about 0.1 s at 50,000 nodes), its first view
(gzipped JSON, sent as it is) and each level laid out so far (JSON text, joined into one
response without decoding). The analyze stage builds the first view and the levels one
click away (``warm_graph``); any other level is laid out when first asked for. Entries of
pages that hand the graph over inline (``frontend.figures.graph.store``) live beside them.

Pruning (``prune``): a model's entries go when the model is deleted or analyzed again,
and the oldest-used entries go while the folder is over ``GRAPH_STORE_MAX_BYTES``. The
folder can also be emptied at any time: the next view rebuilds what it needs.
"""

from __future__ import annotations

import gc
import gzip
import json
import logging
import marshal
import os
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
from django.conf import settings
from django.db import connection
from django.db.models import TextField, Value
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import MD5, Concat
from django.db.models.signals import post_delete
from django.dispatch import receiver

from frontend.figures.graph import Metric
from frontend.figures.graph.levels import ROOT, level
from frontend.figures.graph.metrics import metric_payload
from frontend.figures.graph.payload import PAYLOAD_VERSION, first_view, graph_tree_of
from frontend.figures.graph.upload import upload_analysis
from workbench.models import OnnxModel
from workbench.storage import open_stream

log = logging.getLogger(__name__)
MEMORY_ENTRIES = 2  # a 50,000-node tree is about 100 MB as Python objects
MAX_BYTES = getattr(settings, "GRAPH_STORE_MAX_BYTES", 2 * 1024**3)
MODEL_KEY = re.compile(r"^v(\d+)-(model|upload)-(\d+)-([0-9a-f]{32})$")


class FileStore:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._memory: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def entry(self, key: str) -> Path:
        return self.folder / key

    # -- files of an entry ---------------------------------------------------------------

    def read(self, key: str, name: str) -> bytes | None:
        try:
            path = self.entry(key) / name
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        _touch(self.entry(key))
        return data

    def write(self, key: str, name: str, data: bytes) -> None:
        folder = self.entry(key)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, folder / name)  # readers see the whole file or none

    # -- whole values (frontend.figures.graph.store's protocol, and trees) ---------------

    def get(self, key: str, name: str = "value.json") -> dict | None:
        memo = f"{key}/{name}"
        with self._lock:
            if memo in self._memory:
                self._memory.move_to_end(memo)
                return self._memory[memo]
        data = self.read(key, name)
        if data is None:
            return None
        gc.disable()  # millions of small lists: collections during the load took 1-2 s of 2
        try:
            value = marshal.loads(data) if name.endswith(".marshal") else json.loads(data)
        except (ValueError, EOFError, TypeError):
            return None
        finally:
            gc.enable()
        self._remember(memo, value)
        return value

    def put(self, key: str, value: dict, name: str = "value.json") -> None:
        if name.endswith(".marshal"):
            data = marshal.dumps(value)
        else:
            data = json.dumps(value, separators=(",", ":")).encode()
        self.write(key, name, data)
        self._remember(f"{key}/{name}", value)

    def forget(self, key: str) -> None:
        with self._lock:
            for memo in [m for m in self._memory if m.startswith(f"{key}/")]:
                del self._memory[memo]
        shutil.rmtree(self.entry(key), ignore_errors=True)

    def _remember(self, memo: str, value: dict) -> None:
        with self._lock:
            self._memory[memo] = value
            self._memory.move_to_end(memo)
            while len(self._memory) > MEMORY_ENTRIES:
                self._memory.popitem(last=False)

    def entries(self) -> list[tuple[str, float, int]]:
        """(key, last used, bytes) of every entry."""
        found = []
        if not self.folder.is_dir():
            return found
        for folder in self.folder.iterdir():
            if not folder.is_dir():
                continue
            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            found.append((folder.name, folder.stat().st_mtime, size))
        return found


def _touch(folder: Path) -> None:
    """Mark an entry used (its folder's time), at most once a minute."""
    try:
        if time.time() - folder.stat().st_mtime > 60:
            os.utime(folder)
    except OSError:
        pass


STORE = FileStore(settings.VAR_DIR / "graphs")


_KEYS: OrderedDict[tuple[int, str], str] = OrderedDict()  # (model, row version) -> key
KNOWN_KEYS = 1000


def model_key(model_pk: int) -> str | None:
    """A model's key, from a fingerprint of its analysis the database reads without
    decoding it: the analysis's own duration, totals, inputs and preparation, which any
    new analysis changes (its duration alone is a float that never repeats). A digest of
    the whole analysis took 0.57 s on 50,000 nodes (converting 14 MB to text), decoding
    it in Python 0.6 s or more; the fingerprint 30-150 ms (PostgreSQL still reads the
    whole value). On PostgreSQL it is computed once per version of the row (its xmin and
    ctid: every update writes a new tuple, even within one transaction; reading them reads
    no column), then remembered."""
    version = None
    if connection.vendor == "postgresql":
        version = (
            OnnxModel.objects.filter(pk=model_pk, analysis__isnull=False)
            .annotate(row_version=RawSQL("xmin::text || ctid::text", ()))
            .values_list("row_version", flat=True)
            .first()
        )
        if version is None:
            return None
        known = _KEYS.get((model_pk, version))
        if known:
            return known
    key = _fingerprint_key(model_pk)
    if key and version is not None:
        _KEYS[(model_pk, version)] = key
        while len(_KEYS) > KNOWN_KEYS:
            _KEYS.popitem(last=False)
    return key


def _fingerprint_key(model_pk: int) -> str | None:
    parts = [KT(f"analysis__{key}") for key in FINGERPRINT]
    joined = Concat(*[p for part in parts for p in (part, Value("|"))], output_field=TextField())
    digest = (
        OnnxModel.objects.filter(pk=model_pk, analysis__isnull=False)
        .annotate(digest=MD5(joined))
        .values_list("digest", flat=True)
        .first()
    )
    return f"v{PAYLOAD_VERSION}-model-{model_pk}-{digest}" if digest else None


FINGERPRINT = ("analysis_s", "nodes", "flops", "params", "inputs", "preparation")


def _ours(model_pk: int, key: str) -> bool:
    found = MODEL_KEY.match(key)
    return bool(found) and found[1] == str(PAYLOAD_VERSION) and found[3] == str(model_pk)


def upload_key(model_pk: int) -> str | None:
    """The key of the model's own graph as uploaded: its file's digest never changes."""
    sha = OnnxModel.objects.filter(pk=model_pk).values_list("sha256", flat=True).first()
    return f"v{PAYLOAD_VERSION}-upload-{model_pk}-{sha[:32]}" if sha else None


def _current(model_pk: int, key: str) -> bool:
    """Whether ``key`` is one the model has now (its analysis's, or its upload's)."""
    if "-upload-" in key:
        return key == upload_key(model_pk)
    return key == model_key(model_pk)


def _warm(model_pk: int, key: str) -> None:
    if "-upload-" in key:
        warm_upload(model_pk)
    else:
        warm_graph(model_pk)


def model_graph_gzip(model_pk: int, key: str) -> bytes | None:
    """The model's first view under ``key``, gzipped. A stored one is sent without asking
    the database (its key names the model and what it was built from); a missing one is
    built if ``key`` is the model's current key (None otherwise)."""
    if not _ours(model_pk, key):
        return None
    body = STORE.read(key, "first.json.gz")
    if body is None and _current(model_pk, key):
        _warm(model_pk, key)
        body = STORE.read(key, "first.json.gz")
    if body is not None:  # levels further in are laid out from the tree: read it meanwhile
        threading.Thread(target=STORE.get, args=(key, "tree.marshal"), daemon=True).start()
    return body


def model_levels_gzip(model_pk: int, key: str, groups: Sequence[int] | None) -> bytes | None:
    """The levels of ``groups`` (None: every group) under ``key``, as one gzipped JSON
    ``{"levels": [...]}``; each is laid out when first asked for, then kept. None when
    ``key`` names no stored tree; ValueError for a group the model does not have."""
    if not _ours(model_pk, key):
        return None
    if groups is None:
        body = STORE.read(key, "all.json.gz")
        if body is not None:
            return body
    else:  # laid out already: no need for the tree
        texts = [STORE.read(key, f"L{g}.json") for g in dict.fromkeys(groups)]
        if all(texts):
            return _levels_body(key, texts, False)
    tree = STORE.get(key, "tree.marshal")
    if tree is None:
        if not _current(model_pk, key):
            return None
        _warm(model_pk, key)
        tree = STORE.get(key, "tree.marshal")
        if tree is None:
            return None
    count = len(tree["groups"]["parent"])
    wanted = [ROOT, *range(count)] if groups is None else list(dict.fromkeys(groups))
    bad = [g for g in wanted if not ROOT <= g < count]
    if bad:
        raise ValueError(f"no group {bad[0]} in this graph (it has {count})")
    # Every level at once: kept as one bundle, not as thousands of files.
    gc.disable()  # as in FileStore.get: millions of small objects made and dropped
    try:
        texts = [_level_text(key, tree, g, keep=groups is not None) for g in wanted]
    finally:
        gc.enable()
    return _levels_body(key, texts, groups is None)


def _levels_body(key: str, texts: list[bytes], everything: bool) -> bytes:
    body = gzip.compress(b'{"levels":[' + b",".join(texts) + b"]}", 1 if everything else 6)
    if everything:
        STORE.write(key, "all.json.gz", body)
    return body


def _level_text(key: str, tree: dict, g: int, keep: bool = True) -> bytes:
    name = f"L{g}.json"
    text = STORE.read(key, name)
    if text is None:
        text = json.dumps(level(tree, g), separators=(",", ":")).encode()
        if keep:
            STORE.write(key, name, text)
    return text


def overlays_payload(overlays: Mapping[str, Metric]) -> list[dict]:
    return [overlay_payload(k, metric) for k, metric in overlays.items()]


def overlay_payload(key: str, metric: Metric) -> dict:
    """A metric by node name (categories as codes); groups are aggregated in the browser."""
    if not isinstance(metric.values, Mapping) or callable(metric.aggregate):
        raise ValueError(f"overlay {key!r}: values by node name and a named aggregate")
    names = list(metric.values)
    payload = metric_payload(key, metric, names, None)
    payload["names"] = names
    return payload


def warm_graph(model_pk: int) -> None:
    """Build the model's tree, first view and the levels one click away from it now (the
    analyze stage calls this), so that no view of the graph waits for a layout."""
    key = model_key(model_pk)
    if key is None:
        return
    analysis = OnnxModel.objects.filter(pk=model_pk).values_list("analysis", flat=True).first()
    if _store_view(key, analysis):
        prune()


def _store_view(key: str, analysis: dict) -> bool:
    """Lay out and keep the tree, the first view and the levels one click away."""
    gc.disable()  # as in FileStore.get: the tree is millions of small objects
    try:
        tree = graph_tree_of(analysis)
        view = first_view(tree)
        STORE.put(key, tree, "tree.marshal")
        for shown in view["levels"]:
            STORE.write(key, f"L{shown['group']}.json", json.dumps(shown).encode())
        STORE.write(key, "first.json.gz", gzip.compress(json.dumps(view).encode(), 6))
        parent = tree["groups"]["parent"]
        opened = {ROOT, *view["open"]}
        for g in (c for c, p in enumerate(parent) if p in opened and c not in opened):
            _level_text(key, tree, g)
    except Exception:  # a fault in drawing must not fail the analysis; the view shows it
        log.exception("graph layout of %s failed", key)
        return False
    finally:
        gc.enable()
    return True


def upload_readable(model: OnnxModel) -> bool:
    """Whether the model's uploaded file is in storage (its graph can be drawn)."""
    try:
        return bool(model.file.name) and model.file.storage.exists(model.file.name)
    except OSError:
        return False


def warm_upload(model_pk: int) -> None:
    """Lay out the model's own graph as uploaded (read from its file), the first time the
    graph page asks for it."""
    key = upload_key(model_pk)
    model = OnnxModel.objects.filter(pk=model_pk).only("pk", "file").first()
    if key is None or model is None or not upload_readable(model):
        return
    try:
        with open_stream(model.file.name) as f:
            proto = onnx.load_model(f, load_external_data=False)
        analysis = upload_analysis(proto)
        del proto
    except Exception:  # an unreadable upload has no graph; the page says so
        log.exception("reading the upload of model %s failed", model_pk)
        return
    if _store_view(key, analysis):
        prune()


def prune(max_bytes: int | None = None) -> list[str]:
    """Remove the entries of models that are gone or were analyzed again, then the least
    recently used entries while the store holds more than ``max_bytes``. Returns the keys
    removed."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = STORE.entries()
    by_model: dict[int, list[str]] = {}
    for key, _used, _size in entries:
        found = MODEL_KEY.match(key)
        if found:
            by_model.setdefault(int(found[3]), []).append(key)
    current = {pk: (model_key(pk), upload_key(pk)) for pk in by_model}
    removed = [
        key
        for pk, keys in by_model.items()
        for key in keys
        if key not in current[pk]  # deleted (None), analyzed again, or an older payload version
    ]
    total = sum(size for key, _used, size in entries if key not in removed)
    for key, _used, size in sorted(entries, key=lambda e: e[1]):
        if total <= limit:
            break
        if key not in removed:
            removed.append(key)
            total -= size
    for key in removed:
        STORE.forget(key)
    return removed


@receiver(post_delete, sender=OnnxModel, dispatch_uid="graph-store-prune")
def _model_deleted(sender, instance: OnnxModel, **kwargs) -> None:
    for key, _used, _size in STORE.entries():
        found = MODEL_KEY.match(key)
        if found and found[3] == str(instance.pk):
            STORE.forget(key)
