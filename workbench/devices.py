"""The devices behind remote targets, as their RPC trackers report them: for the Targets
page and the API. Asked with a short timeout and cached for a few seconds, so a dead
tracker costs a page view about a second once, not on every view."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache

from engine.remote.tracker import DeviceUnavailable, summary

CACHE_SECONDS = 5
TIMEOUT_S = 1.5
MAX_TRACKERS = 10  # a page never waits on more trackers than this


def tracker_devices(targets) -> list[dict]:
    """One entry per tracker named by ``targets`` (remote ones): its address, an error if
    it does not answer, and per device key: devices, free, pending requests and the
    targets that use the key."""
    by_tracker: dict[str, dict[str, list[str]]] = {}
    for target in targets:
        remote = (target.profile or {}).get("remote")
        if target.kind == "remote" and remote:
            keys = by_tracker.setdefault(remote["tracker"], {})
            keys.setdefault(remote["key"], []).append(target.name)
    views = []
    for address, keys in sorted(by_tracker.items())[:MAX_TRACKERS]:
        state = _summary(address)
        entry = {"tracker": address, "error": state.get("error"), "keys": []}
        seen = state.get("keys", {})
        for key in sorted(set(keys) | set(seen)):
            queue = seen.get(key)
            entry["keys"].append(
                {
                    "key": key,
                    "devices": queue["total"] if queue else 0,
                    "free": queue["free"] if queue else 0,
                    "pending": queue["pending"] if queue else 0,
                    "targets": sorted(set(keys.get(key, []))),
                    "registered": queue is not None,
                }
            )
        views.append(entry)
    return views


def _summary(address: str) -> dict:
    cache_key = f"workbench:tracker:{address}"
    found = cache.get(cache_key)
    if found is not None:
        return found
    host, _, port = address.rpartition(":")
    try:
        state = summary(host.strip("[]"), int(port), timeout_s=getattr(
            settings, "TRACKER_TIMEOUT_S", TIMEOUT_S))  # fmt: skip
    except (DeviceUnavailable, ValueError) as e:
        state = {"error": getattr(e, "message", str(e))}
    cache.set(cache_key, state, CACHE_SECONDS)
    return state
