-- 003: approvals for aegis.
-- Why: a tool call that policy marks `ask` must wait for people without holding a hashi
-- worker, and every step of that — request, rule, each approver's signed vote, rejected
-- attempts, the final decision — must be auditable. The records (approval.request,
-- approval.decision) live in the turn's output ledger; these tables are the work state
-- around them.

CREATE TABLE approvals (
    approval_seq       INTEGER PRIMARY KEY AUTOINCREMENT,  -- aegis's cursor runs over this
    request_id         TEXT NOT NULL UNIQUE,               -- = the approval.request record id
    request_hash       TEXT NOT NULL,                      -- its content hash: what approvers sign
    turn_id            TEXT NOT NULL REFERENCES turns(turn_id),
    session_id         TEXT NOT NULL REFERENCES sessions(session_id),
    call_id            TEXT NOT NULL,
    tool_name          TEXT NOT NULL,
    effect             TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('pending', 'asked', 'approved', 'denied')),
    rule               TEXT,                               -- the policy rule that decided
    required           INTEGER NOT NULL DEFAULT 1,         -- approvals needed (M of N)
    deadline_ms        INTEGER,                            -- an unanswered ask is denied after this
    decision_record_id TEXT,
    started_epoch      INTEGER,                            -- set just before an approved call runs
    created_at         TEXT NOT NULL,
    decided_at         TEXT
);
CREATE INDEX idx_approvals_state ON approvals(state, deadline_ms);

CREATE TABLE approval_votes (
    request_id TEXT NOT NULL REFERENCES approvals(request_id),
    approver   TEXT NOT NULL,                              -- user:NAME
    decision   TEXT NOT NULL CHECK (decision IN ('approve', 'deny')),
    record_id  TEXT NOT NULL REFERENCES records(record_id),
    signature  TEXT NOT NULL,
    PRIMARY KEY (request_id, approver)
);

CREATE TABLE approval_rejections (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT,
    approver   TEXT,
    reason     TEXT NOT NULL,
    message    TEXT NOT NULL,                              -- the refused message, as received
    at         TEXT NOT NULL
);
