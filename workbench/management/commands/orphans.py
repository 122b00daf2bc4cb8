"""``manage.py orphans [--delete]``: stored files no row refers to (see
``workbench.storage_hygiene``): storage names, then this machine's files by path, with
their total size; ``--delete`` removes them."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from workbench.storage_hygiene import find_orphans, remove


class Command(BaseCommand):
    help = "Report (and with --delete remove) stored files that no model, input or artifact uses."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--delete", action="store_true", help="remove them")

    def handle(self, *args, delete: bool, **options) -> None:
        orphans = find_orphans()
        for name in orphans.files:
            self.stdout.write(name)
        total = orphans.bytes
        summary = f"{len(orphans.files)} orphaned file(s), {total / 1e6:,.1f} MB"
        if delete:
            freed = remove(orphans)
            self.stdout.write(
                self.style.SUCCESS(f"{summary}: removed, {freed / 1e6:,.1f} MB freed")
            )
        else:
            self.stdout.write(f"{summary}; run with --delete to remove them")
