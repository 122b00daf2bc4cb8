"""The worker side of the workbench: one Celery task runs any stage (``jobs.tasks``), the
runner loads the run's prepared model and calls the stage's engine entry point
(``jobs.runner``), progress and heartbeats go to the run's row (``jobs.progress``).

``celery -A jobs worker`` finds the application here; it is defined in
``workbench.celery`` so that the web process can enqueue without importing this package.
"""

from workbench.celery import app as celery_app

__all__ = ["celery_app"]
