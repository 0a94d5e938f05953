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

-- Records whose content a person erased (a signed sys.redaction record says who, when and
-- why). The row's content is a tombstone; its leaf is kept here, so roots and checkpoints
-- taken before still verify, and `verify` reports the record as redacted, not tampered.
CREATE TABLE redactions (
    record_id           TEXT PRIMARY KEY,
    record_hash         TEXT NOT NULL,     -- what its content hashed to
    leaf_hash           TEXT NOT NULL,     -- its Merkle leaf (every column as appended)
    redaction_record_id TEXT NOT NULL      -- the sys.redaction record
);

-- Records still never change, but for one thing: a signed redaction replaces a record's
-- content with its tombstone (every other column as it was, the redaction row first).
DROP TRIGGER records_no_update;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN NOT (NEW.record_id = OLD.record_id AND NEW.hash = OLD.hash
          AND NEW.record_type = OLD.record_type AND NEW.author_id = OLD.author_id
          AND NEW.metadata = OLD.metadata AND NEW.created_at = OLD.created_at
          AND OLD.content NOT LIKE '{"redacted":%'
          AND EXISTS (SELECT 1 FROM redactions d WHERE d.record_id = OLD.record_id
                        AND NEW.content = '{"redacted":"' || d.redaction_record_id || '"}'))
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable (only a signed redaction erases content)'); END;
