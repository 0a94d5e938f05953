-- 007: approvals count keys, and refusals are bounded.
-- Why: M-of-N counted names, so one key trusted under two names satisfied `approvers = 2`
-- alone; and every forged decision added a row and a permanent sys.error record (20 s of
-- flooding grew a database from 0.2 MB to 412 MB). Votes now carry the key that signed
-- them; refusals beyond the first few per request and approver only bump a counter.

ALTER TABLE approval_votes ADD COLUMN public_key TEXT;  -- hex Ed25519 key that signed it

CREATE TABLE approval_rejection_counts (
    request_id TEXT NOT NULL,                            -- '' for unknown request ids
    approver   TEXT NOT NULL,                            -- as the message named it ('' if none)
    refused    INTEGER NOT NULL,                         -- every refusal, recorded or not
    PRIMARY KEY (request_id, approver)
);
