"""The graph view's built layouts, kept as JSON files under WORKBENCH_VAR_DIR/graphs so
that every web process shares them and a restart keeps them (a 50,000-node layout takes
about 7 s to build and 0.2 s to read back). The last few read stay in memory too.

Each entry is kept as JSON and gzipped JSON (sent as it is), named by a digest of what it
was built from, so a changed analysis or a new payload version never reads a stale one.
Nothing prunes old entries yet (0.3 MB for a typical model, 12.5 MB at 50,000 nodes);
the folder can be emptied at any time, the next view rebuilds what it needs.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings
from django.db.models import TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import MD5, Concat

from frontend.figures.graph import Metric
from frontend.figures.graph.metrics import metric_payload
from frontend.figures.graph.payload import PAYLOAD_VERSION, graph_base
from frontend.figures.graph.store import cached
from workbench.models import OnnxModel

log = logging.getLogger(__name__)
MEMORY_ENTRIES = 2  # a 50,000-node base is about 100 MB as Python objects


class FileStore:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._memory: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def gz_path(self, key: str) -> Path:
        return self.folder / f"{key}.json.gz"

    def get_gzip(self, key: str) -> bytes | None:
        """The stored JSON gzipped, for sending on without parsing it (a 50,000-node base
        is 11 MB of JSON, 1.5 MB gzipped)."""
        try:
            return self.gz_path(key).read_bytes()
        except FileNotFoundError:
            return None

    def get(self, key: str) -> dict | None:
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
        try:
            value = json.loads(self.path(key).read_text())
        except (FileNotFoundError, ValueError):
            return None
        self._remember(key, value)
        return value

    def put(self, key: str, value: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(value, separators=(",", ":")).encode()
        for data, path in ((text, self.path(key)), (gzip.compress(text, 6), self.gz_path(key))):
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # readers see the whole file or none
        self._remember(key, value)

    def _remember(self, key: str, value: dict) -> None:
        with self._lock:
            self._memory[key] = value
            self._memory.move_to_end(key)
            while len(self._memory) > MEMORY_ENTRIES:
                self._memory.popitem(last=False)


STORE = FileStore(settings.VAR_DIR / "graphs")


def model_key(model_pk: int) -> str | None:
    """A model's base key, from a fingerprint of its analysis the database reads without
    decoding it: the analysis's own duration, totals, inputs and preparation, which any
    new analysis changes (its duration alone is a float that never repeats). A digest of
    the whole analysis took 0.57 s on 50,000 nodes (converting 14 MB to text), decoding
    it in Python 0.6 s or more; this takes about 30 ms."""
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


def model_graph_gzip(model_pk: int, key: str) -> bytes | None:
    """The model's graph base under ``key``, gzipped. A stored one is sent without asking
    the database (its key names the model and what it was built from); a missing one is
    built if ``key`` is the model's current key (None otherwise)."""
    if not key.startswith(f"v{PAYLOAD_VERSION}-model-{model_pk}-"):
        return None
    body = STORE.get_gzip(key)
    if body is None and key == model_key(model_pk):
        warm_graph(model_pk)
        body = STORE.get_gzip(key)
    return body


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
    """Build the model's graph base now (the analyze stage calls this), so that no view of
    the graph waits for the layout: under the model's key for the graph page, and under
    the analysis's own for the run pages (which have the analysis as a dict)."""
    key = model_key(model_pk)
    if key is None:
        return
    analysis = OnnxModel.objects.filter(pk=model_pk).values_list("analysis", flat=True).first()
    try:
        base = cached(analysis, PAYLOAD_VERSION, graph_base)
    except Exception:  # a fault in drawing must not fail the analysis; the view shows it
        log.exception("graph layout of model %s failed", model_pk)
        return
    STORE.put(key, base)
