from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from workbench import account, graph_views, views
from workbench.auth_views import LimitedLoginView, LimitedPasswordResetView, signup

urlpatterns = [
    path("", views.dashboard, name="home"),
    path("accounts/login/", LimitedLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", signup, name="signup"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(success_url="/accounts/password/done/"),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("accounts/password/reset/", LimitedPasswordResetView.as_view(), name="password_reset"),
    path(
        "accounts/password/reset/sent/",
        auth_views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "accounts/password/reset/done/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path(
        "accounts/password/reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path("accounts/token/", views.api_token, name="token"),
    path("accounts/", account.account, name="account"),
    path("accounts/sign-out-everywhere/", account.sign_out_everywhere, name="sign-out-everywhere"),
    path("models/", views.model_list, name="model-list"),
    path("models/<int:pk>/", views.model_detail, name="model-detail"),
    path("models/<int:pk>/graph/", graph_views.model_graph_page, name="model-graph"),
    path(
        "models/<int:pk>/graph/<slug:key>/levels.json",
        graph_views.model_graph_levels,
        name="model-graph-levels",
    ),
    path(
        "models/<int:pk>/graph/<slug:key>.json",
        graph_views.model_graph_data,
        name="model-graph-data",
    ),
    path("models/<int:pk>/delete/", views.model_delete, name="model-delete"),
    path("models/<int:pk>/baseline/", views.model_baseline, name="model-baseline"),
    path("models/<int:pk>/runs/", views.run_create, name="run-create"),
    path("models/<int:pk>/inputs/", views.inputs_upload, name="inputs-upload"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("compare/", views.compare, name="compare"),
    path("runs/<int:pk>/row/", views.dashboard_row, name="dashboard-row"),
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run-cancel"),
    path("runs/<int:pk>/retry/", views.run_retry, name="run-retry"),
    path(
        "runs/<int:pk>/save-calibration/",
        views.run_save_calibration,
        name="run-save-calibration",
    ),
    path("artifacts/<int:pk>/download/", views.artifact_download, name="artifact-download"),
    path("targets/", views.target_list, name="target-list"),
    path("targets/new/", views.target_edit, name="target-new"),
    path("targets/<int:pk>/", views.target_detail, name="target-detail"),
    path("targets/<int:pk>/edit/", views.target_edit, name="target-edit"),
    path("targets/<int:pk>/delete/", views.target_delete, name="target-delete"),
    path("workers/", views.worker_list, name="worker-list"),
    path("api/v1/", include("workbench.api.urls")),
    path("admin/", admin.site.urls),
]
