-- 020: a daemon's ALARM as a state, not a prefix of its detail text.
-- Why: the console and `kura status` told an ALARM by the words its detail began with; the
-- daemon now says so in a column of its own beside the text people read.
ALTER TABLE daemons ADD COLUMN alarm INTEGER NOT NULL DEFAULT 0;
