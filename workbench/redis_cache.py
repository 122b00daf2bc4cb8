"""Django's Redis cache (the token cache, rate limits) with one connection pool and one
client per process.

Django keeps a cache backend per async context, and its Redis backend keeps its pool in the
backend: under the ASGI server every request is a context of its own, so every request made
a new pool, opened a new connection (TCP connect, ``HELLO``, ``CLIENT SETINFO``, which reads
the package's metadata from disk) and left it to the garbage collector. That was about a
fifth of the web process's time per API request (py-spy on ``bench/load_bench.py``), and
building a ``redis.Redis`` for every cache call (it fills a table of ~170 reply callbacks)
another few percent (``bench/api_profile.py``). Here every backend of a process shares one
client per server; redis-py's client and pool are thread-safe, and a forked child's pool
starts afresh.
"""

from __future__ import annotations

import threading

from django.core.cache.backends import redis as django_redis

_clients: dict[tuple, object] = {}
_lock = threading.Lock()


class SharedClientRedisCacheClient(django_redis.RedisCacheClient):
    def get_client(self, key=None, *, write=False):
        server = self._servers[self._get_connection_pool_index(write)]
        ident = (server, repr(sorted(self._pool_options.items())))
        client = _clients.get(ident)
        if client is None:
            with _lock:
                client = _clients.get(ident)
                if client is None:
                    pool = self._pool_class.from_url(server, **self._pool_options)
                    client = _clients[ident] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
