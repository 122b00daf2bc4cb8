from django.contrib import admin

from workbench.models import Artifact, OnnxModel, Run, StageResult, Target, TuningRecord


@admin.register(OnnxModel)
class OnnxModelAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "size_bytes", "node_count", "created_at"]
    search_fields = ["name", "sha256"]


@admin.register(Target)
class TargetAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "kind", "version", "owner"]


class StageInline(admin.TabularInline):
    model = StageResult
    extra = 0
    fields = ["stage", "status", "progress", "worker", "attempts", "error_code"]
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "model", "target", "owner", "status", "progress", "created_at"]
    list_filter = ["status"]
    inlines = [StageInline]


admin.site.register(Artifact)


@admin.register(TuningRecord)
class TuningRecordAdmin(admin.ModelAdmin):
    list_display = [
        "kernel",
        "target_key",
        "tvm_version",
        "default_us",
        "tuned_us",
        "budget_trials",
        "hits",
        "updated_at",
    ]
    list_filter = ["tvm_version"]
    search_fields = ["kernel", "target_key", "workload_key"]
    readonly_fields = ["created_at", "updated_at"]
