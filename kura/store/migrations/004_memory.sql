-- 004: memory (mikado).
-- Why: what agents learn must outlive the session it was learned in. Facts and decisions
-- extracted from sealed outputs are records of their own (deduplicated by hash), linked to
-- what they came from and to the decisions they supersede (memory_graph), and found again by
-- full-text search ranked with BM25 (kb, FTS5) — and by embeddings when an endpoint is
-- configured (kb_vectors).

CREATE TABLE memory_graph (
    src_record_id TEXT NOT NULL REFERENCES records(record_id),   -- a memory record
    rel           TEXT NOT NULL CHECK (rel IN ('extracted_from', 'supersedes')),
    dst_record_id TEXT NOT NULL REFERENCES records(record_id),   -- its source, or the decision it replaces
    created_at    TEXT NOT NULL,
    PRIMARY KEY (src_record_id, rel, dst_record_id)
) WITHOUT ROWID;
CREATE INDEX idx_memory_graph_dst ON memory_graph(dst_record_id, rel);

CREATE TABLE memory_sessions (                                  -- every session a memory came from
    record_id  TEXT NOT NULL REFERENCES records(record_id),
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    PRIMARY KEY (record_id, session_id)
) WITHOUT ROWID;

CREATE VIRTUAL TABLE kb USING fts5(
    text,
    record_id UNINDEXED,
    record_type UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE kb_vectors (
    record_id TEXT PRIMARY KEY REFERENCES records(record_id),
    model     TEXT NOT NULL,
    dims      INTEGER NOT NULL,
    vector    BLOB NOT NULL                                     -- little-endian f32 × dims
);
