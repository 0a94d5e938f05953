-- 019: every record in a sealed ledger.
-- Why: memory that mikado extracted, or that an outside agent remembered without a turn, was
-- stored in no ledger — no Merkle root, seal or checkpoint covered it, it never replicated,
-- and a record planted straight into the table was searched and shown to a model while
-- `verify --all` passed. Memory now goes into its writer's memory session, one sealed ledger
-- per extraction (or remembered record), each on the last; search and context packing find
-- only records a sealed ledger holds, and `verify --all` reports a record that is in none.

-- Each writer's memory session and its last sealed memory ledger.
CREATE TABLE memory_homes (
    author     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    head       TEXT                          -- the last sealed memory ledger
) WITHOUT ROWID;

-- Records that were in no ledger when this database was upgraded, written by an earlier
-- release: `verify` counts them apart instead of failing. Like any record in no ledger they
-- are never found nor packed (nothing adopts them: nothing could tell one planted with them).
CREATE TABLE loose_legacy (
    record_id TEXT PRIMARY KEY REFERENCES records(record_id)
) WITHOUT ROWID;
INSERT INTO loose_legacy (record_id)
    SELECT r.record_id FROM records r
     WHERE NOT EXISTS (SELECT 1 FROM ledger_records lr WHERE lr.record_id = r.record_id);
