"""One Celery queue per target (ARCHITECTURE.md section 7), and the queues a worker serves.

- A measured target a worker registered (``cpu@<host>``) keeps that machine's queue,
  stored in ``Target.queue``: it is measured there and nowhere else.
- The measured preset ``host`` ("the CPU of whichever worker runs it") and every stage
  that needs no particular worker use the shared queue, ``CELERY_TASK_DEFAULT_QUEUE``.
- Remote and modeled targets use ``<shared>.target.<name>``: one queue per name, shared by
  every owner's target of that name and by all its versions, so a worker can be attached
  to a device (or to a modeled target) by name before the target exists. A modeled
  target needs no hardware, so by default every worker that declares nothing serves it.

A worker that declares no targets consumes the shared queue and every target's queue
except other machines' (new targets are picked up at its next heartbeat); one that
declares names consumes only their queues and its own machine's (declare ``host`` for the
shared queue). RabbitMQ keeps what is published to a queue nobody consumes yet: Celery
declares the queue (durable) when it publishes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from django.conf import settings

from workbench.models import Target

_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]")
# RabbitMQ allows 255 bytes per queue name; a target name is at most 100 characters.
_NAME_CHARS = 100


def shared_queue() -> str:
    return settings.CELERY_TASK_DEFAULT_QUEUE


def builds_queue() -> str:
    """Tuning candidates any worker may build for another one (``jobs.builds``)."""
    return f"{shared_queue()}.builds"


def target_queue(name: str) -> str:
    """The queue of the remote or modeled targets called ``name``."""
    safe = _UNSAFE.sub("_", name)[:_NAME_CHARS]
    if safe != name:  # two names that differ only in unsafe characters stay apart
        safe += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{shared_queue()}.target.{safe}"


def machine_bound(target: Target) -> bool:
    """A measured target registered by a worker: only that machine may run it."""
    return target.kind == Target.Kind.MEASURED and bool(target.queue)


def queue_for(target: Target) -> str:
    if target.queue:
        return target.queue
    if target.kind == Target.Kind.MEASURED:
        return shared_queue()
    return target_queue(target.name)


def declared_queues(names: Iterable[str]) -> set[str]:
    """The queues of the targets a worker declared, by name. Another machine's measured
    target is never served by declaration (its numbers would be this machine's)."""
    queues = set()
    for name in names:
        target = Target.objects.filter(name=name).order_by("-version", "-pk").first()
        if target is None:
            queues.add(target_queue(name))  # a target not created yet: its queue waits
        elif not machine_bound(target):
            queues.add(queue_for(target))
    return queues


def every_target_queue() -> set[str]:
    """What a worker that declares nothing serves: the shared queue and each remote and
    modeled target's (other machines' measured targets are theirs alone)."""
    queues = {shared_queue()}
    others = Target.objects.exclude(kind=Target.Kind.MEASURED)
    for name, queue in others.values_list("name", "queue").distinct():
        queues.add(queue or target_queue(name))
    return queues
