from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate, post_save


class WorkbenchConfig(AppConfig):
    name = "workbench"
    verbose_name = "Model workbench"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from frontend.figures.graph.store import use_store
        from workbench import storage_hygiene, tokens
        from workbench.graph_store import STORE
        from workbench.presets import on_post_migrate
        from workbench.samples import on_user_created

        post_migrate.connect(on_post_migrate, sender=self)
        post_save.connect(on_user_created, sender=settings.AUTH_USER_MODEL)
        tokens.connect()
        storage_hygiene.connect()
        use_store(STORE)
