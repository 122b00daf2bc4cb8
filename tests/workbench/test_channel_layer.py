"""SQLiteChannelLayer: the channel layer spec, and delivery between OS processes."""

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from channels.exceptions import ChannelFull

from workbench import channel_layers
from workbench.channel_layers import SQLiteChannelLayer

REPO_ROOT = Path(channel_layers.__file__).resolve().parents[1]

# What a Celery worker does to report progress, in a process of its own.
SENDER_SCRIPT = """
import sys
from asgiref.sync import async_to_sync
from workbench.channel_layers import SQLiteChannelLayer

path, method, target, done = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
layer = SQLiteChannelLayer(path=path)
async_to_sync(getattr(layer, method))(target, {"type": "run.progress", "done": done})
"""


class FakeClock:
    def __init__(self):
        self.now = 1_000_000.0

    def time(self):
        return self.now


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "var" / "channels.sqlite3"


@pytest.fixture
def layer(db_path):
    layer = SQLiteChannelLayer(path=db_path, expiry=60, group_expiry=86400, capacity=3)
    yield layer
    asyncio.run(layer.close())


async def receive_soon(layer, channel):
    return await asyncio.wait_for(layer.receive(channel), timeout=10)


def start_sender(db_path, method, target, done):
    return subprocess.Popen(
        [sys.executable, "-c", SENDER_SCRIPT, str(db_path), method, target, str(done)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )


def test_send_receive_round_trip(layer, db_path):
    message = {"type": "run.progress", "run": 7, "stage": "profile", "done": 0.5, "ok": None}

    async def scenario():
        await layer.send("run.events", message)
        return await receive_soon(layer, "run.events")

    assert asyncio.run(scenario()) == message
    assert db_path.exists()


def test_messages_arrive_in_order(layer):
    async def scenario():
        for i in range(3):
            await layer.send("run.events", {"type": "run.progress", "i": i})
        return [(await receive_soon(layer, "run.events"))["i"] for _ in range(3)]

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_group_send_reaches_members_but_not_discarded(layer):
    async def scenario():
        a, b, c = [await layer.new_channel() for _ in range(3)]
        for channel in (a, b, c):
            await layer.group_add("run.1", channel)
        await layer.group_discard("run.1", c)
        await layer.group_send("run.1", {"type": "run.progress", "done": 3})
        await layer.send(c, {"type": "marker"})
        return (
            len({a, b, c}),
            await receive_soon(layer, a),
            await receive_soon(layer, b),
            await receive_soon(layer, c),
        )

    distinct, got_a, got_b, got_c = asyncio.run(scenario())
    assert distinct == 3
    assert got_a == got_b == {"type": "run.progress", "done": 3}
    assert got_c == {"type": "marker"}  # nothing from the group came before it


def test_messages_and_memberships_expire(layer, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(channel_layers, "time", clock)

    async def scenario():
        await layer.send("run.events", {"type": "stale"})
        await layer.group_add("run.1", "member")
        clock.now += 61  # past expiry, within group_expiry
        await layer.send("run.events", {"type": "fresh"})
        fresh = await receive_soon(layer, "run.events")

        await layer.group_add("run.2", "member")
        clock.now += 86401  # past group_expiry
        await layer.group_send("run.2", {"type": "too.late"})
        await layer.send("member", {"type": "marker"})
        return fresh, await receive_soon(layer, "member")

    assert asyncio.run(scenario()) == ({"type": "fresh"}, {"type": "marker"})


def test_channel_with_expired_messages_leaves_its_groups(layer, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(channel_layers, "time", clock)

    async def scenario():
        await layer.group_add("run.1", "gone")  # a consumer that stopped reading
        await layer.group_send("run.1", {"type": "run.progress"})
        clock.now += 61
        await layer.group_send("run.1", {"type": "run.progress"})
        await layer.send("gone", {"type": "marker"})
        return await receive_soon(layer, "gone")

    assert asyncio.run(scenario()) == {"type": "marker"}


def test_capacity(db_path):
    layer = SQLiteChannelLayer(path=db_path, capacity=2, channel_capacity={"big.*": 3})

    async def scenario():
        for _ in range(2):
            await layer.send("small", {"type": "x"})
        with pytest.raises(ChannelFull):
            await layer.send("small", {"type": "x"})
        for _ in range(3):
            await layer.send("big.one", {"type": "x"})
        with pytest.raises(ChannelFull):
            await layer.send("big.one", {"type": "x"})

        # group_send skips a full member silently and still reaches the others.
        for channel in ("small", "roomy"):
            await layer.group_add("run.1", channel)
        await layer.group_send("run.1", {"type": "run.progress"})
        got = await receive_soon(layer, "roomy")
        await layer.close()
        return got

    assert asyncio.run(scenario()) == {"type": "run.progress"}


def test_rejects_what_it_cannot_carry(layer):
    async def scenario():
        with pytest.raises(TypeError):
            await layer.send("bad name!?", {"type": "x"})
        with pytest.raises(TypeError):
            await layer.group_add("bad group!", "run.events")
        with pytest.raises(AssertionError):
            await layer.send("run.events", ["not", "a", "dict"])
        with pytest.raises(TypeError):  # JSON only: no bytes
            await layer.send("run.events", {"type": "x", "data": b"\x00"})

    asyncio.run(scenario())


def test_flush_empties_channels_and_groups(layer):
    async def scenario():
        await layer.send("run.events", {"type": "old"})
        await layer.group_add("run.1", "run.events")
        await layer.flush()
        await layer.group_send("run.1", {"type": "run.progress"})
        await layer.send("run.events", {"type": "new"})
        return await receive_soon(layer, "run.events")

    assert asyncio.run(scenario()) == {"type": "new"}


def test_receive_cancelled_after_taking_a_message_puts_it_back(layer):
    taken, release = threading.Event(), threading.Event()
    real_pop = layer._pop

    def slow_pop(channel):
        row = real_pop(channel)
        if row is not None:
            taken.set()
            release.wait(10)
        return row

    async def scenario():
        await layer.send("run.events", {"i": 0})
        await layer.send("run.events", {"i": 1})
        layer._pop = slow_pop
        receiving = asyncio.create_task(layer.receive("run.events"))
        assert await asyncio.to_thread(taken.wait, 10)
        receiving.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        layer._pop = real_pop
        await layer.send("run.events", {"i": 2})
        return [(await receive_soon(layer, "run.events"))["i"] for _ in range(3)]

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_cancelled_receives_lose_and_duplicate_nothing(db_path):
    layer = SQLiteChannelLayer(path=db_path, capacity=100, poll_interval=0.001)
    rng = random.Random(0)

    async def scenario():
        for i in range(40):
            await layer.send("run.events", {"i": i})
        received = []
        for _ in range(400):
            receiving = asyncio.create_task(layer.receive("run.events"))
            # A few loop steps: the cancel lands before, during or after the database read.
            for _ in range(rng.randint(0, 4)):
                await asyncio.sleep(0)
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                received.append((await receiving)["i"])
        await layer.send("run.events", {"i": "end"})
        while not received or received[-1] != "end":
            received.append((await receive_soon(layer, "run.events"))["i"])
        await layer.close()
        return received

    assert asyncio.run(scenario()) == [*range(40), "end"]


def test_group_send_from_another_process_reaches_this_one(layer, db_path):
    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("run.42", channel)
        receiving = asyncio.create_task(receive_soon(layer, channel))
        sender = start_sender(db_path, "group_send", "run.42", 5)
        _, stderr = await asyncio.to_thread(sender.communicate, timeout=60)
        assert sender.returncode == 0, stderr
        return await receiving

    assert asyncio.run(scenario()) == {"type": "run.progress", "done": 5}


def test_processes_creating_the_database_at_once(layer, db_path):
    senders = [start_sender(db_path, "send", "run.jobs", done) for done in range(4)]
    for sender in senders:
        _, stderr = sender.communicate(timeout=60)
        assert sender.returncode == 0, stderr

    async def scenario():
        return {(await receive_soon(layer, "run.jobs"))["done"] for _ in range(4)}

    assert asyncio.run(scenario()) == {0, 1, 2, 3}


def test_the_switch_to_wal_waits_for_a_process_holding_the_lock(tmp_path):
    # SQLite may answer the journal-mode switch with "database is locked" at once, busy
    # timeout or not, when processes open a new file together (CI saw it); a connection with
    # no busy timeout meets the same answer while another holds the lock.
    import sqlite3

    def locked_database(name):
        path = str(tmp_path / name)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        switching = sqlite3.connect(path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            switching.execute("PRAGMA journal_mode=WAL")
        return holder, switching

    holder, switching = locked_database("released.sqlite3")
    release = threading.Timer(0.3, holder.execute, ("COMMIT",))
    release.start()
    try:
        channel_layers._switch_to_wal(switching, timeout=10)
    finally:
        release.join()
    assert switching.execute("PRAGMA journal_mode").fetchone() == ("wal",)

    holder, switching = locked_database("kept.sqlite3")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        channel_layers._switch_to_wal(switching, timeout=0.2)  # gives up at its deadline
    holder.execute("COMMIT")
