from django.urls import include, path
from rest_framework.routers import DefaultRouter

from workbench.api import views
from workbench.tokens import TokenView

router = DefaultRouter()
router.register("models", views.ModelViewSet, basename="api-model")
router.register("targets", views.TargetViewSet, basename="api-target")
router.register("runs", views.RunViewSet, basename="api-run")
router.register("artifacts", views.ArtifactViewSet, basename="api-artifact")

urlpatterns = [
    path("auth/token/", TokenView.as_view(), name="api-token"),
    path("", include(router.urls)),
]
