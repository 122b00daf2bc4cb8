"""A Channels layer that works across processes through one SQLite file.

The "embedded" profile runs a web process and a Celery worker on one machine with no
Redis. The worker reports progress with ``group_send`` and a websocket consumer in the web
process must receive it; channels' ``InMemoryChannelLayer`` is per-process, so it cannot do
this. This layer keeps messages and group memberships in a shared SQLite database (WAL mode,
busy timeout) and receivers poll it. It follows ``channels_redis.core.RedisChannelLayer``:
messages and memberships expire, ``send`` over capacity raises ``ChannelFull`` and
``group_send`` skips full channels.

Limitation: messages are stored as JSON, so they may hold only dicts, lists, strings, numbers,
booleans and None (no bytes; tuples come back as lists). ``send`` raises ``TypeError`` otherwise.

All SQLite calls run on one worker thread per layer (per process), so the event loop never
blocks on the database and the layer can be used from any event loop (e.g. ``async_to_sync``).
"""

import asyncio
import json
import logging
import os
import secrets
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from time import monotonic, sleep  # not through ``time``: tests replace the wall clock

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 10.0

# AUTOINCREMENT: ids are never reused, so a message taken by a cancelled receive can be put
# back under its own id, keeping its place in the queue.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS message (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    body TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS message_channel ON message (channel, id);
CREATE INDEX IF NOT EXISTS message_expires ON message (expires);
CREATE TABLE IF NOT EXISTS membership (
    grp TEXT NOT NULL,
    channel TEXT NOT NULL,
    joined REAL NOT NULL,
    PRIMARY KEY (grp, channel)
);
"""


def _switch_to_wal(conn: sqlite3.Connection, timeout: float = BUSY_TIMEOUT_S) -> None:
    """Put the database in WAL mode, waiting for other processes doing the same.

    When several processes open a new file at once, SQLite can answer the journal-mode switch
    with "database is locked" at once, without waiting out the busy timeout (seen about once
    in 300 four-process races); the switch is retried with backoff up to ``timeout``.
    """
    deadline, delay = monotonic() + timeout, 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or monotonic() + delay > deadline:
                raise
        sleep(delay)
        delay = min(2 * delay, 0.1)


class SQLiteChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(
        self,
        path,
        expiry=60,
        group_expiry=86400,
        capacity=100,
        channel_capacity=None,
        poll_interval=0.05,
    ):
        super().__init__(expiry=expiry, capacity=capacity)
        self.channel_capacity = self.compile_capacities(channel_capacity or {})
        self.path = os.fspath(path)
        self.group_expiry = group_expiry
        self.poll_interval = poll_interval
        self._pid = None  # threads and connections do not survive fork (Celery prefork)
        self._executor = None
        self._conn = None

    # Channel layer API

    async def send(self, channel, message):
        self.require_valid_channel_name(channel)
        assert isinstance(message, dict), "message is not a dict"
        if not await self._run(self._send, channel, json.dumps(message)):
            raise ChannelFull(channel)

    async def receive(self, channel):
        self.require_valid_channel_name(channel)
        while True:
            popped = self._submit(self._pop, channel)
            try:
                row = await asyncio.wrap_future(popped)
            except asyncio.CancelledError:
                # The thread cannot be interrupted and may already have taken a message.
                # The executor is single-threaded, so this runs after the pop and before
                # any later receive: the message goes back first in line.
                self._submit(self._put_back, popped)
                raise
            if row is not None:
                return json.loads(row[2])  # row: id, channel, body, expires
            await asyncio.sleep(self.poll_interval)

    async def new_channel(self, prefix="specific."):
        return f"{prefix}{secrets.token_hex(16)}"

    async def group_add(self, group, channel):
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        await self._run(self._group_add, group, channel)

    async def group_discard(self, group, channel):
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        await self._run(self._group_discard, group, channel)

    async def group_send(self, group, message):
        self.require_valid_group_name(group)
        assert isinstance(message, dict), "message is not a dict"
        full = await self._run(self._group_send, group, json.dumps(message))
        if full:
            logger.info("%s channel(s) over capacity in group %s", full, group)

    async def flush(self):
        await self._run(self._flush)

    async def close(self):
        if self._executor is not None:
            await self._run(self._close)
            self._executor.shutdown(wait=False)
            self._pid = None  # a later call starts a new thread and connection

    def _submit(self, fn, *args) -> Future:
        if self._pid != os.getpid():
            self._pid, self._executor, self._conn = os.getpid(), ThreadPoolExecutor(1), None
        return self._executor.submit(fn, *args)

    async def _run(self, fn, *args):
        return await asyncio.wrap_future(self._submit(fn, *args))

    # Every method below runs on the layer's worker thread, which owns the connection.

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            _switch_to_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)  # IF NOT EXISTS: several processes may race here
            self._conn = conn
        return self._conn

    def _transaction(self) -> sqlite3.Connection:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no upgrade deadlock
        return conn

    def _clean(self, conn, now):
        # A channel whose messages expire has lost its reader: drop it from its groups too.
        conn.execute(
            "DELETE FROM membership WHERE channel IN "
            "(SELECT channel FROM message WHERE expires <= ?) OR joined <= ?",
            (now, now - self.group_expiry),
        )
        conn.execute("DELETE FROM message WHERE expires <= ?", (now,))

    def _insert(self, conn, channel, body, now) -> bool:
        (count,) = conn.execute(
            "SELECT count(*) FROM message WHERE channel = ?", (channel,)
        ).fetchone()
        if count >= self.get_capacity(channel):
            return False
        conn.execute(
            "INSERT INTO message (channel, body, expires) VALUES (?, ?, ?)",
            (channel, body, now + self.expiry),
        )
        return True

    def _send(self, channel, body) -> bool:
        now = time.time()
        with self._transaction() as conn:
            self._clean(conn, now)
            return self._insert(conn, channel, body, now)

    def _group_add(self, group, channel):
        now = time.time()
        with self._transaction() as conn:
            self._clean(conn, now)
            conn.execute(
                "INSERT OR REPLACE INTO membership VALUES (?, ?, ?)", (group, channel, now)
            )

    def _group_discard(self, group, channel):
        with self._transaction() as conn:
            conn.execute("DELETE FROM membership WHERE grp = ? AND channel = ?", (group, channel))

    def _group_send(self, group, body) -> int:
        now = time.time()
        with self._transaction() as conn:
            self._clean(conn, now)
            members = conn.execute("SELECT channel FROM membership WHERE grp = ?", (group,))
            return sum(not self._insert(conn, c, body, now) for (c,) in members.fetchall())

    def _flush(self):
        with self._transaction() as conn:
            conn.execute("DELETE FROM message")
            conn.execute("DELETE FROM membership")

    def _pop(self, channel):
        conn = self._connection()
        # Look without the write lock (cheap, most polls find nothing), then take by id:
        # the DELETE succeeds in one process only.
        found = conn.execute(
            "SELECT id FROM message WHERE channel = ? AND expires > ? ORDER BY id LIMIT 1",
            (channel, time.time()),
        ).fetchone()
        if found is None:
            return None
        # fetchall() runs the statement to completion, which commits it.
        taken = conn.execute(
            "DELETE FROM message WHERE id = ? RETURNING id, channel, body, expires", found
        ).fetchall()
        return taken[0] if taken else None

    def _put_back(self, popped: Future):
        if popped.cancelled() or popped.exception() or popped.result() is None:
            return
        self._connection().execute(
            "INSERT INTO message (id, channel, body, expires) VALUES (?, ?, ?, ?)",
            popped.result(),
        )

    def _close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
