"""The PostgreSQL device store (TBMQ 1.x's design) on asyncpg.

Tables (created when missing)::

    device_session_ctx(client_id PK, last_packet_id, last_serial_number)
    device_publish_msg(client_id, serial_number, packet_id, msg, expires_at,
                       PRIMARY KEY (client_id, serial_number))

``last_serial_number`` plays the role of the Redis score (grows across the packet-id
wrap). A batch from the operation queue runs in one transaction on one connection, with
set-based statements: consecutive SAVEs become one upsert of the session rows
(``unnest`` + ``ON CONFLICT``) returning the allocated ranges, one multi-row INSERT and one
trim DELETE past the limit; consecutive REMOVEs and MARK_PUBRELs one statement each. FETCH
deletes expired rows and returns the rest ordered by serial number. So PostgreSQL is
batched like the async Redis store; what differs is the engine (WAL, MVCC, indexes,
fsync at commit unless the server runs with ``synchronous_commit=off``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mqbench.builtin_broker.message import PUBREL_MARKER
from mqbench.builtin_broker.persistence.base import (
    Clear,
    DeviceStore,
    Fetch,
    MarkPubrel,
    Op,
    Remove,
    Save,
    allocated_ids,
    validate_limit,
)
from mqbench.errors import BrokerError

SCHEMA = """
CREATE TABLE IF NOT EXISTS device_session_ctx (
    client_id text PRIMARY KEY,
    last_packet_id integer NOT NULL,
    last_serial_number bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS device_publish_msg (
    client_id text NOT NULL,
    serial_number bigint NOT NULL,
    packet_id integer NOT NULL,
    msg bytea NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (client_id, serial_number)
);
CREATE INDEX IF NOT EXISTS device_publish_msg_pid ON device_publish_msg (client_id, packet_id);
"""

_ALLOCATE = """
INSERT INTO device_session_ctx AS c (client_id, last_packet_id, last_serial_number)
SELECT t.client_id, ((t.n - 1) % 65535) + 1, t.n
FROM unnest($1::text[], $2::int[]) AS t(client_id, n)
ON CONFLICT (client_id) DO UPDATE SET
    last_packet_id = ((c.last_packet_id + EXCLUDED.last_serial_number - 1) % 65535) + 1,
    last_serial_number = c.last_serial_number + EXCLUDED.last_serial_number
RETURNING client_id, last_packet_id, last_serial_number
"""
_INSERT = """
INSERT INTO device_publish_msg (client_id, serial_number, packet_id, msg, expires_at)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $4::bytea[], $5::bigint[])
ON CONFLICT (client_id, serial_number) DO UPDATE SET
    packet_id = EXCLUDED.packet_id, msg = EXCLUDED.msg, expires_at = EXCLUDED.expires_at
"""
_DEDUP = """
DELETE FROM device_publish_msg d USING unnest($1::text[], $2::int[], $3::bigint[])
    AS t(client_id, packet_id, first_serial)
WHERE d.client_id = t.client_id AND d.packet_id = t.packet_id
  AND d.serial_number < t.first_serial
"""
_TRIM = """
DELETE FROM device_publish_msg d USING unnest($1::text[], $2::bigint[]) AS t(client_id, keep)
WHERE d.client_id = t.client_id AND d.serial_number <= t.keep
"""
_REMOVE = """
DELETE FROM device_publish_msg d USING unnest($1::text[], $2::int[]) AS t(client_id, packet_id)
WHERE d.client_id = t.client_id AND d.packet_id = t.packet_id
"""
_PUBREL = """
UPDATE device_publish_msg d SET msg = $3
FROM unnest($1::text[], $2::int[]) AS t(client_id, packet_id)
WHERE d.client_id = t.client_id AND d.packet_id = t.packet_id
"""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class PostgresDeviceStore(DeviceStore):
    """``postgres``: batches in one transaction each (see the module docstring)."""

    name = "postgres"

    def __init__(self, dsn: str, messages_limit: int = 10_000) -> None:
        """``dsn``: e.g. ``postgresql://postgres@127.0.0.1:5432/postgres``."""
        self.dsn = dsn
        self.limit = validate_limit(messages_limit)
        self._conn: Any = None

    def describe(self) -> dict[str, Any]:
        """Facts for logs and manifests."""
        return {"name": self.name, "dsn": self.dsn, "messages_limit": self.limit}

    async def start(self) -> None:
        """Connect and create the tables."""
        import asyncpg

        try:
            self._conn = await asyncpg.connect(self.dsn, timeout=10)
            await self._conn.execute(SCHEMA)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            await self.close()
            raise BrokerError(f"cannot use PostgreSQL at {self.dsn}: {exc}") from None

    async def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close(timeout=5)

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Apply the batch in one transaction (runs of same-kind operations set-based)."""
        results: list[Any] = [None] * len(ops)
        conn = self._conn
        async with conn.transaction():
            k = 0
            while k < len(ops):
                j = k
                kind = type(ops[k])
                while j < len(ops) and type(ops[j]) is kind and kind is not Fetch:
                    j += 1
                j = max(j, k + 1)
                run = ops[k:j]
                if kind is Save:
                    await self._save(conn, run, results, k)
                elif kind in (Remove, MarkPubrel):
                    acks = [op for op in run if isinstance(op, Remove)]
                    names = [op.client_id for op in acks for _ in op.packet_ids]
                    pids = [p for op in acks for p in op.packet_ids]
                    if kind is Remove:
                        await conn.execute(_REMOVE, names, pids)
                    else:
                        await conn.execute(_PUBREL, names, pids, PUBREL_MARKER)
                    for i, op in enumerate(acks):
                        results[k + i] = len(op.packet_ids)
                elif kind is Fetch:
                    results[k] = await self._fetch(conn, ops[k].client_id)
                elif kind is Clear:
                    for i in range(k, j):
                        cid = ops[i].client_id
                        status = await conn.execute(
                            "DELETE FROM device_publish_msg WHERE client_id = $1", cid
                        )
                        await conn.execute(
                            "DELETE FROM device_session_ctx WHERE client_id = $1", cid
                        )
                        results[i] = int(status.split()[-1])
                else:
                    for i in range(k, j):
                        results[i] = TypeError(f"postgres device store cannot {ops[i].kind}")
                k = j
        return results

    async def _save(self, conn: Any, run: Sequence[Op], results: list[Any], base: int) -> None:
        counts: dict[str, int] = {}
        for op in run:
            assert isinstance(op, Save)
            counts[op.client_id] = counts.get(op.client_id, 0) + len(op.messages)
        rows = await conn.fetch(_ALLOCATE, list(counts), list(counts.values()))
        # Per client: next (packet id, serial) to hand out, from the state before the run.
        cursor: dict[str, tuple[int, int]] = {}
        for row in rows:
            n = counts[row["client_id"]]
            # Previous id 0 and 65535 allocate the same next id (1), so modulo is enough.
            prev_pid = (int(row["last_packet_id"]) - n - 1) % 65535 + 1
            cursor[row["client_id"]] = (prev_pid, int(row["last_serial_number"]) - n)
        names: list[str] = []
        serials: list[int] = []
        pids: list[int] = []
        msgs: list[bytes] = []
        expiry: list[int] = []
        firsts: dict[str, tuple[int, int]] = {}
        now = _now_ms()
        for i, op in enumerate(run):
            assert isinstance(op, Save)
            cid = op.client_id
            prev_pid, serial = cursor[cid]
            ids = allocated_ids(prev_pid, len(op.messages))
            results[base + i] = ids
            for pid, value, ttl in zip(ids, op.messages, op.ttls, strict=True):
                serial += 1
                firsts.setdefault(cid, (pid, serial))
                names.append(cid)
                serials.append(serial)
                pids.append(pid)
                msgs.append(value)
                expiry.append(now + ttl * 1000 if ttl > 0 else 0)
            cursor[cid] = (ids[-1] if ids else prev_pid, serial)
        # A packet id re-used after the wrap replaces the older message with that id.
        await conn.execute(_DEDUP, names, pids, serials)
        await conn.execute(_INSERT, names, serials, pids, msgs, expiry)
        keep = [(cid, cursor[cid][1] - self.limit) for cid in counts]
        keep = [(cid, k) for cid, k in keep if k > 0]
        if keep:
            await conn.execute(_TRIM, [c for c, _ in keep], [k for _, k in keep])

    async def _fetch(self, conn: Any, client_id: str) -> list[tuple[int, bytes]]:
        now = _now_ms()
        await conn.execute(
            "DELETE FROM device_publish_msg WHERE client_id = $1 AND expires_at > 0 "
            "AND expires_at <= $2",
            client_id,
            now,
        )
        rows = await conn.fetch(
            "SELECT packet_id, msg FROM device_publish_msg WHERE client_id = $1 "
            "ORDER BY serial_number",
            client_id,
        )
        return [(int(r["packet_id"]), bytes(r["msg"])) for r in rows]
