-- 013: record hashes stored as their 32 bytes instead of 64 hex characters.
-- Why: the UNIQUE index on the hash is the one index every write touches at a random place;
-- half-size keys mean twice the keys per page, fewer pages dirtied per commit and a smaller
-- database. Everything outside SQLite still speaks lowercase hex, and the leaf hashes cover
-- that hex form, so every leaf, root, checkpoint and proof made before this stays valid. A
-- value that is not lowercase hex (only a tampered file holds one) is kept as its raw bytes,
-- so the database still opens and `kura verify` still reports the record.
CREATE TABLE records_v13 (
    record_id   TEXT PRIMARY KEY,          -- UUIDv7 (time-sortable)
    hash        BLOB NOT NULL UNIQUE,      -- the 32 bytes of SHA-256 of RFC 8785 {author_id, content, record_type}
    record_type TEXT NOT NULL,             -- semantic type, e.g. tool.call
    content     TEXT NOT NULL,             -- RFC 8785 canonical JSON
    author_id   TEXT NOT NULL,             -- kind:name, e.g. user:oles
    metadata    TEXT NOT NULL DEFAULT '{}',-- RFC 8785 canonical JSON object of strings
    created_at  TEXT NOT NULL              -- RFC 3339 UTC, microseconds, fixed width
);
INSERT INTO records_v13 (record_id, hash, record_type, content, author_id, metadata, created_at)
SELECT record_id,
       CASE WHEN typeof(hash) = 'text' AND length(hash) = 64 AND hash = lower(hash)
                 AND unhex(hash) IS NOT NULL
            THEN unhex(hash) ELSE CAST(hash AS BLOB) END,
       record_type, content, author_id, metadata, created_at
  FROM records ORDER BY rowid;
DROP TABLE records;
ALTER TABLE records_v13 RENAME TO records;
CREATE INDEX idx_records_type    ON records(record_type, created_at);
CREATE INDEX idx_records_author  ON records(author_id, created_at);
CREATE INDEX idx_records_created ON records(created_at);
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable'); END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable'); END;
