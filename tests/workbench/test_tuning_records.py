"""The tuning store on the database: entries round-trip, a write merges into the stored
entry, reads are counted, and workers writing the same workload at once leave one row
with the fastest record."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from engine.fusion.tuning_store import RecordStore, open_store
from workbench.models import TuningRecord
from workbench.tuning_records import DatabaseStore


def entry(tuned_us: float | None = 9.5, budget_trials: int = 8) -> dict:
    return {
        "kernel": "matmul",
        "workload": '{"root": 1, "nodes": []}',
        "records": ['{"trace": []}'] if tuned_us is not None else [],
        "default_us": 12.0,
        "tuned_us": tuned_us,
        "budget_trials": budget_trials,
        "target": {"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
        "tvm": "0.27.0.post1",
    }


def test_the_database_store_is_a_record_store_for_the_engine():
    assert isinstance(DatabaseStore(), RecordStore)
    store = DatabaseStore()
    assert open_store(store) is store


@pytest.mark.django_db
def test_an_entry_round_trips_with_its_columns_filled():
    store = DatabaseStore()
    assert store.get("t1", "w1") is None
    store.put("t1", "w1", entry())
    assert store.get("t1", "w1") == entry()
    assert store.get("t2", "w1") is None  # another target
    row = TuningRecord.objects.get()
    assert (row.kernel, row.tvm_version, row.default_us, row.tuned_us, row.budget_trials) == (
        "matmul",
        "0.27.0.post1",
        12.0,
        9.5,
        8,
    )
    assert row.target["mcpu"] == "znver4"


@pytest.mark.django_db
def test_a_second_put_updates_the_entry_and_keeps_its_history():
    store = DatabaseStore()
    store.put("t1", "w1", entry(tuned_us=None))
    store.get("t1", "w1")
    store.get("t1", "w1")
    first = TuningRecord.objects.get()
    store.put("t1", "w1", entry(tuned_us=7.0, budget_trials=64))
    row = TuningRecord.objects.get()
    assert row.pk == first.pk and row.entry == entry(tuned_us=7.0, budget_trials=64)
    assert (row.tuned_us, row.budget_trials) == (7.0, 64)
    assert row.hits == 2  # reads before the rewrite still count
    assert row.created_at == first.created_at and row.updated_at > first.updated_at
    # A compile that left the kernel untuned under a smaller budget loses nothing.
    store.put("t1", "w1", entry(tuned_us=None, budget_trials=8))
    assert store.get("t1", "w1") == entry(tuned_us=7.0, budget_trials=64)


@pytest.mark.django_db(transaction=True)
def test_workers_writing_the_same_workload_at_once_leave_one_row():
    writers = 6
    ready = threading.Barrier(writers)
    errors = []

    def write(k: int) -> None:
        try:
            ready.wait(timeout=30)
            DatabaseStore().put("t1", "w1", entry(tuned_us=float(k)))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    row = TuningRecord.objects.get()
    assert row.entry == entry(tuned_us=0.0)  # the fastest record, whoever wrote last
