from django.urls import path

from workbench.consumers import DashboardConsumer, RunProgressConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:pk>/", RunProgressConsumer.as_asgi()),
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
]
