"""The tuning store of the compile stage on the workbench's database.

Implements ``engine.fusion.tuning_store.RecordStore`` over :class:`TuningRecord`, so that
every worker on the database shares what any of them tuned: a second compile that meets
the same workloads on the same target applies their records instead of tuning.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from engine.fusion.tuning_store import merge_entries
from workbench.models import TuningRecord


class DatabaseStore:
    """A ``RecordStore`` on the ``TuningRecord`` table."""

    def get(self, target_key: str, workload_key: str) -> dict | None:
        rows = TuningRecord.objects.filter(target_key=target_key, workload_key=workload_key)
        entry = rows.values_list("entry", flat=True).first()
        if entry is not None:
            rows.update(hits=F("hits") + 1)
        return entry

    def put(self, target_key: str, workload_key: str, entry: dict) -> None:
        """Merge into the stored entry under a row lock. The row is first made to exist
        (``INSERT ... ON CONFLICT DO NOTHING``), so that two workers writing a new
        workload at once queue on the same row instead of colliding."""
        key = {"target_key": target_key, "workload_key": workload_key}
        with transaction.atomic():
            TuningRecord.objects.bulk_create([TuningRecord(**key, entry={})], ignore_conflicts=True)
            row = TuningRecord.objects.select_for_update().get(**key)
            row.entry = merged = merge_entries(row.entry or None, entry)
            row.kernel = str(merged.get("kernel") or "")[:200]
            row.target = merged.get("target") or {}
            row.tvm_version = str(merged.get("tvm") or "")[:64]
            row.default_us = merged.get("default_us")
            row.tuned_us = merged.get("tuned_us")
            row.budget_trials = int(merged.get("budget_trials") or 0)
            row.save()
