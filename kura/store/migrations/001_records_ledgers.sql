-- 001: the record/ledger store.
-- Why: Kura's first schema. Records are content-addressed and immutable; ledgers are ordered,
-- append-only lists of records (members live in their own table so an append is one row, not
-- a rewrite of the ledger), sealed into a hash chain; sessions are branches whose head moves
-- only through an append-only, hash-chained ref log. Triggers refuse every UPDATE/DELETE that
-- would rewrite history, so ordinary SQL cannot change what was written; `kura verify`
-- catches anyone who bypasses SQL.

CREATE TABLE records (
    record_id   TEXT PRIMARY KEY,          -- UUIDv7 (time-sortable)
    hash        TEXT NOT NULL UNIQUE,      -- SHA-256 of RFC 8785 {author_id, content, record_type}
    record_type TEXT NOT NULL,             -- semantic type, e.g. tool.call
    content     TEXT NOT NULL,             -- RFC 8785 canonical JSON
    author_id   TEXT NOT NULL,             -- kind:name, e.g. user:oles
    metadata    TEXT NOT NULL DEFAULT '{}',-- RFC 8785 canonical JSON object of strings
    created_at  TEXT NOT NULL              -- RFC 3339 UTC, microseconds, fixed width
);
CREATE INDEX idx_records_type    ON records(record_type, created_at);
CREATE INDEX idx_records_author  ON records(author_id, created_at);
CREATE INDEX idx_records_created ON records(created_at);

CREATE TABLE sessions (
    session_id     TEXT PRIMARY KEY,       -- UUIDv7
    label          TEXT NOT NULL,
    head_ledger_id TEXT,                   -- latest sealed ledger; moves only via session_reflog
    status         TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'complete', 'failed')),
    created_at     TEXT NOT NULL
);

CREATE TABLE ledgers (
    ledger_id    TEXT PRIMARY KEY,         -- UUIDv7
    session_id   TEXT NOT NULL REFERENCES sessions(session_id),
    label        TEXT NOT NULL,
    parent_ids   TEXT NOT NULL DEFAULT '[]', -- JSON array of parent ledger ids (git-like lineage)
    state        TEXT NOT NULL CHECK (state IN ('open', 'sealed')),
    record_count INTEGER NOT NULL DEFAULT 0, -- also the next free position
    root_hash    TEXT,                     -- RFC 6962 root over member leaves, set on seal
    ledger_hash  TEXT,                     -- chained hash (root, parents' hashes, header), set on seal
    created_at   TEXT NOT NULL,
    sealed_at    TEXT
);
CREATE INDEX idx_ledgers_session ON ledgers(session_id, ledger_id);

CREATE TABLE ledger_records (
    ledger_id TEXT NOT NULL REFERENCES ledgers(ledger_id),
    position  INTEGER NOT NULL,            -- 0, 1, 2, ... dense, only grows
    record_id TEXT NOT NULL REFERENCES records(record_id),
    leaf_hash TEXT NOT NULL,               -- RFC 6962 leaf of the record's columns at append time
    PRIMARY KEY (ledger_id, position)
) WITHOUT ROWID;
CREATE INDEX idx_ledger_records_record ON ledger_records(record_id);

CREATE TABLE session_reflog (
    session_id    TEXT NOT NULL REFERENCES sessions(session_id),
    seq           INTEGER NOT NULL,        -- 1, 2, 3, ... per session
    old_head      TEXT,
    new_head      TEXT NOT NULL,
    new_head_hash TEXT NOT NULL,           -- ledger_hash of new_head when the head moved
    reason        TEXT NOT NULL,
    at            TEXT NOT NULL,
    entry_hash    TEXT NOT NULL,           -- SHA-256 chain over this entry and the previous one
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Records never change.
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable'); END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable'); END;

-- Sealed ledgers never change; open ledgers may only grow and then seal.
CREATE TRIGGER ledgers_sealed_immutable BEFORE UPDATE ON ledgers WHEN OLD.state = 'sealed'
BEGIN SELECT RAISE(ABORT, 'kura: sealed ledgers are immutable'); END;
CREATE TRIGGER ledgers_open_only_grow BEFORE UPDATE ON ledgers
WHEN OLD.state = 'open' AND (
       NEW.ledger_id IS NOT OLD.ledger_id OR NEW.session_id IS NOT OLD.session_id
    OR NEW.label IS NOT OLD.label OR NEW.parent_ids IS NOT OLD.parent_ids
    OR NEW.created_at IS NOT OLD.created_at OR NEW.record_count < OLD.record_count)
BEGIN SELECT RAISE(ABORT, 'kura: a ledger''s identity and history cannot change'); END;
CREATE TRIGGER ledgers_no_delete BEFORE DELETE ON ledgers
BEGIN SELECT RAISE(ABORT, 'kura: ledgers are immutable'); END;

-- Members: append at the next position of an open ledger only.
CREATE TRIGGER ledger_records_append_only BEFORE INSERT ON ledger_records
WHEN (SELECT state FROM ledgers WHERE ledger_id = NEW.ledger_id) IS NOT 'open'
  OR NEW.position IS NOT (SELECT record_count FROM ledgers WHERE ledger_id = NEW.ledger_id)
BEGIN SELECT RAISE(ABORT, 'kura: records can only be appended, at the next position, to an open ledger'); END;
CREATE TRIGGER ledger_records_no_update BEFORE UPDATE ON ledger_records
BEGIN SELECT RAISE(ABORT, 'kura: ledger members are immutable'); END;
CREATE TRIGGER ledger_records_no_delete BEFORE DELETE ON ledger_records
BEGIN SELECT RAISE(ABORT, 'kura: ledger members are immutable'); END;

-- Sessions: never deleted; the head only moves to what the ref log says.
CREATE TRIGGER sessions_no_delete BEFORE DELETE ON sessions
BEGIN SELECT RAISE(ABORT, 'kura: sessions are immutable'); END;
CREATE TRIGGER sessions_head_logged BEFORE UPDATE OF head_ledger_id ON sessions
WHEN NEW.head_ledger_id IS NOT (
    SELECT new_head FROM session_reflog WHERE session_id = NEW.session_id ORDER BY seq DESC LIMIT 1)
BEGIN SELECT RAISE(ABORT, 'kura: a session head moves only through its ref log'); END;
CREATE TRIGGER session_reflog_no_update BEFORE UPDATE ON session_reflog
BEGIN SELECT RAISE(ABORT, 'kura: the ref log is append-only'); END;
CREATE TRIGGER session_reflog_no_delete BEFORE DELETE ON session_reflog
BEGIN SELECT RAISE(ABORT, 'kura: the ref log is append-only'); END;
