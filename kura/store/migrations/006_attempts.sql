-- 006: failed attempts of a turn, and what each daemon reports about itself.
-- Why: a turn that fails on every claim (a result too big to store, a model that always
-- errors) was retried forever, oldest first, and starved every other session. Now each
-- claim that does not end cleanly counts; a failed turn waits out a backoff behind fresh
-- work, and after `worker.max_attempts` it ends with one short sys.error.

ALTER TABLE turns ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;  -- claims not ended cleanly
ALTER TABLE turns ADD COLUMN retry_at_ms INTEGER;                  -- unix ms; not claimed before
ALTER TABLE turns ADD COLUMN last_error TEXT;                      -- bounded excerpt

-- e.g. hashi's tool sandbox ("landlock v7", "off", "unavailable (...)"), for `kura status`.
ALTER TABLE daemons ADD COLUMN detail TEXT;
