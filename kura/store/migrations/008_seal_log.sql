-- 008: the seal log.
-- Why: `verify` recomputed every hash but only against the database itself, so a consistent
-- rewrite (content, leaves, roots, ledger hashes, ref log — triggers dropped first) passed.
-- Transparency logs fix that by signing tree heads and proving each new head extends the
-- last. This is one RFC 6962 log per store whose leaves are the sealed ledgers in seal
-- order, stored as Go's tlog and C2SP tlog-tiles store one: the hash of every complete
-- subtree by its stored-hash index, so an append writes about two hashes however long the
-- log is, and a proof reads about log2(n). The backfill runs in Rust (a migration hook).

CREATE TABLE seal_log_leaves (
    leaf_index INTEGER PRIMARY KEY,        -- 0-based, in seal order
    ledger_id  TEXT NOT NULL UNIQUE REFERENCES ledgers(ledger_id),
    leaf_data  TEXT NOT NULL               -- RFC 8785 {"ledger_hash","ledger_id","session_id"}
);

CREATE TABLE seal_log_hashes (
    hash_index INTEGER PRIMARY KEY,        -- tlog stored-hash index (level, n)
    hash       BLOB NOT NULL CHECK (length(hash) = 32)
);

CREATE TRIGGER seal_log_leaves_no_update BEFORE UPDATE ON seal_log_leaves
BEGIN SELECT RAISE(ABORT, 'the seal log is append-only'); END;
CREATE TRIGGER seal_log_leaves_no_delete BEFORE DELETE ON seal_log_leaves
BEGIN SELECT RAISE(ABORT, 'the seal log is append-only'); END;
CREATE TRIGGER seal_log_hashes_no_update BEFORE UPDATE ON seal_log_hashes
BEGIN SELECT RAISE(ABORT, 'the seal log is append-only'); END;
CREATE TRIGGER seal_log_hashes_no_delete BEFORE DELETE ON seal_log_hashes
BEGIN SELECT RAISE(ABORT, 'the seal log is append-only'); END;
