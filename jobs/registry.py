"""Measured targets register themselves: a worker describes its machine and consumes a
queue of its own, so a run on "that machine" is measured there and nowhere else."""

from __future__ import annotations

import logging
import socket

from django.conf import settings

from engine.targets.host import host_target_profile
from engine.targets.schema import validate_profile
from workbench.models import Target
from workbench.presets import upsert_builtin_target

log = logging.getLogger(__name__)


def machine_queue() -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.measure.{socket.gethostname()}"


def register_machine() -> Target:
    """Create or refresh this machine's measured target `cpu@<hostname>`."""
    hostname = socket.gethostname()
    document = host_target_profile()
    document.update(
        name=f"cpu@{hostname}",
        description=f"Worker machine {hostname}: {document['machine']['cpu_model']}",
    )
    profile = validate_profile(document).to_dict()
    target = upsert_builtin_target(profile, queue=machine_queue())
    log.info("measured target %s v%s consumes queue %s", target.name, target.version, target.queue)
    return target
