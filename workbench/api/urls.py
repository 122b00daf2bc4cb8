from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from workbench.api import views
from workbench.api.compare import (
    CompareView,
    ModelBaselineView,
    ModelHistoryView,
    RunFiguresView,
)
from workbench.api.workers import WorkerListView
from workbench.tokens import TokenView

router = DefaultRouter()
router.register("models", views.ModelViewSet, basename="api-model")
router.register("targets", views.TargetViewSet, basename="api-target")
router.register("runs", views.RunViewSet, basename="api-run")
router.register("artifacts", views.ArtifactViewSet, basename="api-artifact")

urlpatterns = [
    path("auth/token/", TokenView.as_view(), name="api-token"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # the split view serves Swagger UI's start-up script as a file, not inline: the site's
    # Content-Security-Policy (script-src 'self') holds on this page too
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("compare/", CompareView.as_view(), name="api-compare"),
    path("workers/", WorkerListView.as_view(), name="api-workers"),
    path("runs/<int:pk>/figures/", RunFiguresView.as_view(), name="api-run-figures"),
    path("models/<int:pk>/history/", ModelHistoryView.as_view(), name="api-model-history"),
    path("models/<int:pk>/baseline/", ModelBaselineView.as_view(), name="api-model-baseline"),
    path("", include(router.urls)),
    re_path(r"^.*/$", views.no_such_endpoint),  # last: what nothing above matched
]
