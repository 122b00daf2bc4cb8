from django.urls import include, path
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from workbench.api import views

router = DefaultRouter()
router.register("models", views.ModelViewSet, basename="api-model")
router.register("targets", views.TargetViewSet, basename="api-target")
router.register("runs", views.RunViewSet, basename="api-run")
router.register("artifacts", views.ArtifactViewSet, basename="api-artifact")

urlpatterns = [
    path("auth/token/", obtain_auth_token, name="api-token"),
    path("", include(router.urls)),
]
