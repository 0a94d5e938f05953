-- 016: replication across a fleet of Pis.
-- Why: a Pi publishes its sealed history from the seal log to a JetStream hub, and SQLite is
-- the outbox: the publisher's cursor moves only after the hub acknowledged, in its own
-- transaction, so a killed publisher resumes without a gap. A replica (a Kura database of
-- another Pi's history, `replicas/<pi>.db`) keeps where in the stream it has verified up to
-- and the origin's checkpoint it was verified against, in the same transaction as the rows.

CREATE TABLE fleet_outbox (
    pi          TEXT PRIMARY KEY,          -- this Pi's fleet name
    published   INTEGER NOT NULL,          -- seal-log leaves the hub has acknowledged
    ledger_seq  INTEGER NOT NULL           -- the stream sequence of the last ledger published
);

CREATE TABLE fleet_inbox (
    origin      TEXT PRIMARY KEY,          -- the Pi this replica is of
    stream_seq  INTEGER NOT NULL,          -- the last ledger message applied (stream sequence)
    checkpoint  TEXT NOT NULL,             -- the origin's signed checkpoint it was verified against
    verified_at TEXT NOT NULL
);
