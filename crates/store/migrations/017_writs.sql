-- 017: authority people grant and take back, and what was spent.
-- Why: a writ (a signed grant of tools, paths, an effect ceiling, budgets and an expiry) is a
-- record in the authority session's sealed ledgers; this table finds a holder's writ and
-- keeps what was spent under it, debited in the same transaction as the call or model step
-- that spent it, so a budget holds under kills. Model usage per session is kept beside it.

CREATE TABLE writs (
    writ_id       TEXT PRIMARY KEY,
    parent_id     TEXT,                      -- the writ this one narrows (a delegation)
    holder        TEXT NOT NULL,             -- session:<id>, agent:<name>, user:<name>
    body          TEXT NOT NULL,             -- the signed writ, canonical JSON (its record's content)
    record_id     TEXT NOT NULL,             -- its authority.writ record
    granted_seq   INTEGER NOT NULL,          -- order of grants: a holder's newest writ binds it
    revoked_by    TEXT,                      -- the authority.revocation record, once revoked
    calls_used    INTEGER NOT NULL DEFAULT 0,
    tokens_used   INTEGER NOT NULL DEFAULT 0,
    money_used    INTEGER NOT NULL DEFAULT 0,
    first_used_ms INTEGER,                   -- when the first call ran under it (wall budget)
    refused       INTEGER NOT NULL DEFAULT 0 -- calls refused under it
);
CREATE INDEX writs_by_holder ON writs(holder, granted_seq);
CREATE INDEX writs_by_parent ON writs(parent_id);

-- The session that holds the authority records, one ledger per grant or revocation.
CREATE TABLE authority (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    session_id  TEXT NOT NULL,
    head        TEXT                         -- the last sealed authority ledger
);

CREATE TABLE session_usage (
    session_id   TEXT PRIMARY KEY,
    steps        INTEGER NOT NULL DEFAULT 0,  -- model answers
    tokens_in    INTEGER NOT NULL DEFAULT 0,
    tokens_out   INTEGER NOT NULL DEFAULT 0,
    money_micros INTEGER NOT NULL DEFAULT 0
);
