"""The workbench's data model (ARCHITECTURE.md section 4)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OnnxModel(models.Model):
    """An uploaded ONNX file; the bytes live in storage under their sha256."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="models"
    )
    name = models.CharField(max_length=200)
    file = models.FileField(max_length=300)
    sha256 = models.CharField(max_length=64, db_index=True)
    size_bytes = models.BigIntegerField()
    ir_version = models.IntegerField()
    opsets = models.JSONField(default=dict)
    producer = models.CharField(max_length=200, blank=True)
    node_count = models.IntegerField()
    inputs = models.JSONField(default=list)
    outputs = models.JSONField(default=list)
    # Written by the latest successful analyze stage; null until then.
    analysis = models.JSONField(null=True, blank=True)
    is_sample = models.BooleanField(default=False)
    # The run others are compared with ("baseline" in gates, the history's reference line).
    baseline_run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "model"
        constraints = [
            models.UniqueConstraint(fields=["owner", "sha256"], name="one_copy_per_owner"),
        ]

    def __str__(self) -> str:
        return self.name


class InputData(models.Model):
    """An uploaded .npz of model inputs, checked against the model's inputs on upload."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    model = models.ForeignKey(OnnxModel, on_delete=models.CASCADE, related_name="input_sets")
    name = models.CharField(max_length=200)
    file = models.FileField(max_length=300)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    tensors = models.JSONField(default=list)  # [{"name", "shape", "dtype"}]
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class Target(models.Model):
    class Kind(models.TextChoices):
        MEASURED = "measured", "measured (a worker's own hardware)"
        REMOTE = "remote", "remote device (TVM RPC)"
        MODELED = "modeled", "modeled (described hardware)"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    description = models.TextField(blank=True)
    profile = models.JSONField(default=dict)
    version = models.PositiveIntegerField(default=1)
    # The Celery queue of the workers that can run it (measured targets); blank: any worker.
    queue = models.CharField(max_length=200, blank=True)
    # Null owner: a built-in preset, visible to everyone and editable by no one.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="targets",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["owner_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name", "version"], name="target_version_unique"
            ),
            models.UniqueConstraint(
                fields=["name", "version"],
                condition=models.Q(owner__isnull=True),
                name="builtin_target_version_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def is_builtin(self) -> bool:
        return self.owner_id is None

    @property
    def unit_names(self) -> list[str]:
        return [unit.get("name", "?") for unit in self.profile.get("units", [])]


class Status(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    SKIPPED = "skipped", "skipped"
    NOT_APPLICABLE = "not_applicable", "not applicable"


TERMINAL = (
    Status.SUCCEEDED,
    Status.FAILED,
    Status.CANCELLED,
    Status.SKIPPED,
    Status.NOT_APPLICABLE,
)
ACTIVE = (Status.QUEUED, Status.RUNNING)


class Run(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs"
    )
    model = models.ForeignKey(OnnxModel, on_delete=models.CASCADE, related_name="runs")
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="runs")
    config = models.JSONField(default=dict)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    progress = models.FloatField(default=0.0)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A retry is a new run: the stages that succeeded are kept from this one, the rest run.
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.model_id} on {self.target_id}"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE


class StageResult(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stages")
    stage = models.CharField(max_length=32)
    position = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=300, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    log_excerpt = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    # The result's headline figures (engine.report.headlines), kept beside it so lists,
    # the dashboard and histories read a few numbers instead of the whole result.
    figures = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)

    class Meta:
        ordering = ["run_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "stage"], name="one_result_per_stage"),
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="stage_liveness")]

    def __str__(self) -> str:
        return f"{self.stage} of run {self.run_id}"

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Artifact(models.Model):
    class Kind(models.TextChoices):
        COMPILED_LIBRARY = "compiled_library"
        OPTIMIZED_ONNX = "optimized_onnx"
        MEMORY_PLAN = "memory_plan"
        SCHEDULE = "schedule"
        REPORT = "report"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="artifacts")
    stage = models.CharField(max_length=32)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    file = models.FileField(max_length=300)
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "id"]

    def __str__(self) -> str:
        return self.name


class TuningRecord(models.Model):
    """A kernel's MetaSchedule tuning outcome on one target, shared by every worker.

    ``entry`` is the engine's JSON (``engine.fusion.tuning_store``); the other columns
    copy what a person looks for in it. ``target_key`` hashes the target description and
    the TVM version, ``workload_key`` the kernel's TensorIR.
    """

    target_key = models.CharField(max_length=64)
    workload_key = models.CharField(max_length=64)
    entry = models.JSONField()
    kernel = models.CharField(max_length=200, blank=True)
    target = models.JSONField(default=dict)
    tvm_version = models.CharField(max_length=64, blank=True)
    default_us = models.FloatField(null=True, blank=True)
    # The best tuned time, even where it did not beat the default schedule.
    tuned_us = models.FloatField(null=True, blank=True)
    budget_trials = models.PositiveIntegerField(default=0)
    # How many compiles found this entry (and so applied it or skipped tuning it).
    hits = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["target_key", "workload_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["target_key", "workload_key"], name="one_record_per_workload"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kernel or self.workload_key} on {self.target_key}"


class Worker(models.Model):
    """A Celery worker node as its own heartbeat last described it (``jobs.presence``).

    Alive while the heartbeat is fresher than ``RUN_STALE_SECONDS``; gone once it shut
    down cleanly (``stopped_at``). What it runs now is read from the running stages that
    name it (``StageResult.worker``), the one source of truth for that."""

    class State(models.TextChoices):
        ALIVE = "alive"
        STALE = "stale"
        GONE = "gone"

    # The Celery node name (name@host), as StageResult.worker records it.
    hostname = models.CharField(max_length=200, unique=True)
    machine = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    # The target names it declared; empty: every target but other machines' measured ones.
    targets = models.JSONField(default=list)
    queues = models.JSONField(default=list)
    concurrency = models.PositiveSmallIntegerField(default=1)
    # The machine's load average over 1, 5 and 15 minutes (os.getloadavg).
    load_avg = models.JSONField(default=list)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def serves_all(self) -> bool:
        return not self.targets
