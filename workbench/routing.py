from django.urls import path

from workbench.consumers import RunProgressConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:pk>/", RunProgressConsumer.as_asgi()),
]
