-- 018: roles and plans.
-- Why: a turn runs as a role (its system prompt, model and tools); a request may name a
-- validator (a role, or a command run in the sandbox) that must pass its deliverable, each
-- verdict a record; and a turn may deliver an
-- `agent.plan` whose steps minato runs as sub-sessions, several at once, each started when
-- the steps it waits on are done, their outputs the parents of its context. The plan's
-- progress is kept here, advanced in the same transaction as the completion that moves it,
-- so a kill between two steps loses nothing and starts nothing twice.

ALTER TABLE turns ADD COLUMN role TEXT;            -- NULL: the default role
ALTER TABLE requests ADD COLUMN role TEXT;         -- the role named (or routed to)
ALTER TABLE requests ADD COLUMN parents TEXT;      -- JSON ledger ids: the first context's parents (a plan step's)
ALTER TABLE requests ADD COLUMN members TEXT;      -- JSON record ids the first context carries besides the instruction
ALTER TABLE requests ADD COLUMN validator TEXT;    -- JSON: the role or command that must pass the deliverable
ALTER TABLE requests ADD COLUMN validations INTEGER NOT NULL DEFAULT 0; -- verdicts that failed its deliverables
ALTER TABLE turns ADD COLUMN validates TEXT;       -- a validation turn: the deliverable it judges
ALTER TABLE turns ADD COLUMN routing INTEGER NOT NULL DEFAULT 0; -- a router role's turn: its deliverable picks the role
ALTER TABLE sessions ADD COLUMN verdict TEXT;      -- the task.verdict record that allowed its completion

CREATE TABLE plans (
    plan_id     TEXT PRIMARY KEY,                               -- UUIDv7
    record_id   TEXT NOT NULL REFERENCES records(record_id),    -- its agent.plan record
    session_id  TEXT NOT NULL REFERENCES sessions(session_id),  -- the planning session
    turn_id     TEXT NOT NULL UNIQUE REFERENCES turns(turn_id), -- the turn that planned
    ledger_id   TEXT NOT NULL REFERENCES ledgers(ledger_id),    -- that turn's output: every first step's parent
    request_seq INTEGER NOT NULL REFERENCES requests(request_seq),
    nesting     INTEGER NOT NULL,                               -- 1: a top-level session's plan
    root_seq    INTEGER NOT NULL,                               -- the request the whole tree of work serves
    state       TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    replays     TEXT REFERENCES plans(plan_id),                 -- a replay's: the recorded plan, whose steps it replays
    replay_live INTEGER NOT NULL DEFAULT 0,
    replay_rerun INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);

CREATE TABLE plan_steps (
    plan_id        TEXT NOT NULL REFERENCES plans(plan_id),
    step           TEXT NOT NULL,                               -- its id in the plan
    ord            INTEGER NOT NULL,                            -- its place in the plan
    role           TEXT,
    after          TEXT NOT NULL,                               -- JSON step ids it waits on
    instruction    TEXT NOT NULL REFERENCES records(record_id), -- its task.instruction
    validator      TEXT,                                        -- JSON: what must pass its deliverable
    state          TEXT NOT NULL CHECK (state IN ('waiting', 'running', 'done', 'failed', 'skipped')),
    session_id     TEXT REFERENCES sessions(session_id),        -- its sub-session, once started
    request_seq    INTEGER REFERENCES requests(request_seq),
    output_id      TEXT REFERENCES ledgers(ledger_id),          -- the sub-session's last output
    deliverable_id TEXT REFERENCES records(record_id),
    PRIMARY KEY (plan_id, step)
);
CREATE INDEX idx_plan_steps_session ON plan_steps(session_id);
