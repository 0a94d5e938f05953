-- 002: work state for the turn.
-- Why: minato and hashi coordinate through SQLite, never through NATS: session requests
-- waiting for minato, turns with a lease and a fencing epoch for hashi workers, and each
-- consumer's cursor, advanced in the same transaction as the work it covers. NATS only rings.

CREATE TABLE requests (
    request_seq INTEGER PRIMARY KEY AUTOINCREMENT,            -- minato's cursor runs over this
    record_id   TEXT NOT NULL REFERENCES records(record_id),      -- the task.instruction
    session_id  TEXT REFERENCES sessions(session_id),         -- set on submit (continue) or on accept
    created_at  TEXT NOT NULL,
    accepted_at TEXT
);

CREATE TABLE turns (
    turn_id           TEXT PRIMARY KEY,                       -- UUIDv7
    session_id        TEXT NOT NULL REFERENCES sessions(session_id),
    seq               INTEGER NOT NULL,                       -- 1, 2, ... within the session
    request_seq       INTEGER NOT NULL REFERENCES requests(request_seq),
    context_ledger_id TEXT NOT NULL REFERENCES ledgers(ledger_id),
    output_ledger_id  TEXT REFERENCES ledgers(ledger_id),     -- opened by the first claim
    state             TEXT NOT NULL CHECK (state IN ('pending', 'running', 'waiting', 'done')),
    waiting_on        TEXT,                                   -- approval request a waiting turn needs
    epoch             INTEGER NOT NULL DEFAULT 0,             -- fencing token, bumped by every claim
    lease_owner       TEXT,
    lease_until_ms    INTEGER,                                -- unix ms; past = claimable again
    claims            INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL,
    done_seq          INTEGER UNIQUE,                         -- completion order: minato's cursor
    completed_by      TEXT,                                   -- the worker that sealed the output
    UNIQUE (session_id, seq)
);
CREATE INDEX idx_turns_state ON turns(state, lease_until_ms);

CREATE TABLE cursors (
    consumer TEXT PRIMARY KEY,                                -- e.g. minato.requests
    position INTEGER NOT NULL
);
