-- 012: the policy aegis rules by, published in the store.
-- Why: with it, hashi applies an allow or deny rule itself, in the same transaction as the
-- tool call (request, decision and start mark together), instead of three commits and a
-- round trip to aegis; `ask` still goes to aegis. A decision names the policy it followed.
CREATE TABLE policies (
    policy_hash  TEXT PRIMARY KEY,     -- SHA-256 of body
    body         TEXT NOT NULL,        -- RFC 8785 JSON of the policy
    published_at TEXT NOT NULL         -- when aegis first published it
);
CREATE TABLE policy_current (
    id          INTEGER PRIMARY KEY CHECK (id = 1),  -- one row: the policy in force
    policy_hash TEXT NOT NULL REFERENCES policies(policy_hash)
);
