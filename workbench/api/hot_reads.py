"""The API's hot reads in SQL written once per process: a user's runs and models in the
lists' default order, and one run, each with what its serializer reads.

Every CI job polls these (``workbench wait``), and the ORM compiled their SQL anew on every
request, joins, ordering, the snapshot's deferred stage fields and all: a third of such a
request's CPU (``bench/api_profile.py``, cProfile). The statements below are built from the
models' own column names when this module loads and run with parameters only; rows become
model instances through Django's raw queries (field converters, JSON included, applied as
the ORM applies them), so the serializers read the same objects as before.

Only the plain requests take this path (the views check: no filter, no ordering); anything
else goes through the ORM as before. ``tests/workbench/test_api_fast_paths.py`` checks the
two give the same answers.
"""

from __future__ import annotations

from itertools import groupby

from workbench.models import OnnxModel, Run, StageResult, Target
from workbench.snapshots import SNAPSHOT_STAGE_FIELDS


def _table(model) -> str:
    return f'"{model._meta.db_table}"'


def _columns(model, alias: str, exclude: tuple[str, ...] = ()) -> str:
    return ", ".join(
        f'{alias}."{field.column}"'
        for field in model._meta.concrete_fields
        if field.name not in exclude
    )


def _column(model, name: str, alias: str = "") -> str:
    return f'{alias + "." if alias else ""}"{model._meta.get_field(name).column}"'


_RUNS = (
    f'SELECT {_columns(Run, "r")}, t.{_column(Target, "name")} AS "target_name" '
    f"FROM {_table(Run)} r "
    f'JOIN {_table(Target)} t ON t."{Target._meta.pk.column}" = r.{_column(Run, "target")} '
    f"WHERE r.{_column(Run, 'owner')} = %s"
)
RUN_PAGE_SQL = (
    f"{_RUNS} ORDER BY r.{_column(Run, 'created_at')} DESC, r.{_column(Run, 'id')} DESC "
    "LIMIT %s OFFSET %s"
)
RUN_SQL = f"{_RUNS} AND r.{_column(Run, 'id')} = %s"
RUN_COUNT_SQL = f"SELECT COUNT(*) FROM {_table(Run)} WHERE {_column(Run, 'owner')} = %s"
STAGES_SQL = (
    f"SELECT {', '.join(_column(StageResult, name.removesuffix('_id')) for name in SNAPSHOT_STAGE_FIELDS)} "
    f"FROM {_table(StageResult)} WHERE {_column(StageResult, 'run')} IN ({{run_ids}}) "
    f"ORDER BY {_column(StageResult, 'run')}, {_column(StageResult, 'position')}"
)

_MODELS = (
    f"SELECT {_columns(OnnxModel, 'm', exclude=('analysis',))}, "
    f'(m.{_column(OnnxModel, "analysis")} IS NOT NULL) AS "has_analysis" '
    f"FROM {_table(OnnxModel)} m WHERE m.{_column(OnnxModel, 'owner')} = %s"
)
MODEL_PAGE_SQL = (
    f"{_MODELS} ORDER BY m.{_column(OnnxModel, 'created_at')} DESC, "
    f"m.{_column(OnnxModel, 'id')} DESC LIMIT %s OFFSET %s"
)
MODEL_COUNT_SQL = (
    f"SELECT COUNT(*) FROM {_table(OnnxModel)} WHERE {_column(OnnxModel, 'owner')} = %s"
)


def _with_stages(runs: list[Run]) -> list[Run]:
    """Each run with its stages (the snapshot's fields only), in order, as
    ``snapshot_stages`` (what ``workbench.snapshots.run_snapshot`` reads first)."""
    by_run = {run.pk: run for run in runs}
    for run in runs:
        run.snapshot_stages = []
    if runs:
        placeholders = ", ".join(["%s"] * len(by_run))
        stages = StageResult.objects.raw(STAGES_SQL.format(run_ids=placeholders), list(by_run))
        for run_id, rows in groupby(stages, key=lambda stage: stage.run_id):
            by_run[run_id].snapshot_stages = list(rows)
    return runs


def _count(sql: str, owner_id: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id])
        return cursor.fetchone()[0]


class OwnRuns:
    """A user's runs, newest first, as the paginator slices them (``[offset:offset+limit]``
    and ``count()``)."""

    def __init__(self, owner_id: int) -> None:
        self.owner_id = owner_id

    def __getitem__(self, page: slice) -> list[Run]:
        params = [self.owner_id, page.stop - page.start, page.start]
        return _with_stages(list(Run.objects.raw(RUN_PAGE_SQL, params)))

    def count(self) -> int:
        return _count(RUN_COUNT_SQL, self.owner_id)


class OwnModels:
    """A user's models, newest first, without their analyses (``has_analysis`` says whether
    there is one), as the paginator slices them."""

    def __init__(self, owner_id: int) -> None:
        self.owner_id = owner_id

    def __getitem__(self, page: slice) -> list[OnnxModel]:
        params = [self.owner_id, page.stop - page.start, page.start]
        return list(OnnxModel.objects.raw(MODEL_PAGE_SQL, params))

    def count(self) -> int:
        return _count(MODEL_COUNT_SQL, self.owner_id)


def own_run(owner_id: int, run_id: int) -> Run | None:
    """The user's run ``run_id`` with its stages, or None."""
    runs = list(Run.objects.raw(RUN_SQL, [owner_id, run_id]))
    return _with_stages(runs)[0] if runs else None
