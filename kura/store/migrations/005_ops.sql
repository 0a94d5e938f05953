-- 005: operations.
-- Why: a Pi owner's first questions are "is everything up?" and "is my data still good?".
-- Every daemon keeps a heartbeat row (and whether it reaches NATS); `kura serve` records each
-- integrity sweep and backup. `kura status` reads both.

CREATE TABLE daemons (
    instance       TEXT PRIMARY KEY,      -- e.g. hashi-1234 or the configured instance name
    kind           TEXT NOT NULL,         -- kura, mikado, minato, hashi, aegis
    pid            INTEGER NOT NULL,
    started_at     TEXT NOT NULL,
    heartbeat_ms   INTEGER NOT NULL,      -- unix ms of the last beat
    nats_connected INTEGER NOT NULL,      -- 1 when its NATS connection was up at that beat
    stopped        INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE sweeps (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind IN ('integrity', 'backup')),
    at          TEXT NOT NULL,
    ok          INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    summary     TEXT NOT NULL             -- counts, first problems, or the backup file
);
