-- 011: a request may replay a recorded turn.
-- Why: `minato replay` re-runs a session's turns into a fork. Each replayed request names
-- the output ledger of the turn it replays, so the worker can serve that turn's recorded
-- steps (or, live, at least its recorded side effects) instead of repeating them.
ALTER TABLE requests ADD COLUMN replay_of TEXT;                        -- a ledger id
ALTER TABLE requests ADD COLUMN replay_live INTEGER NOT NULL DEFAULT 0;  -- 1: the model decides anew
ALTER TABLE requests ADD COLUMN replay_rerun INTEGER NOT NULL DEFAULT 0; -- 1: side effects may run again, each if a person approves
