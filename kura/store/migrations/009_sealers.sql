-- 009: who sealed each ledger.
-- Why: any process with write access to the file could seal a ledger, and the ledger looked
-- the same as one minato or hashi sealed. Each daemon now signs the ledger hash with its own
-- Ed25519 key (its bus nkey) in the sealing transaction; `kura verify` checks the signature
-- and, given the install's keyring (identities.toml), that the key is one of its own.
-- Ledgers sealed before this migration have no row; `signing_since` says where signing began.

CREATE TABLE ledger_seals (
    ledger_id TEXT PRIMARY KEY REFERENCES ledgers(ledger_id),
    sealer    TEXT NOT NULL,              -- the sealer's public nkey (U…)
    signature TEXT NOT NULL               -- base64 Ed25519 over "kura.seal.v1\n" ‖ ledger_hash
);

CREATE TABLE ledger_seals_since (
    leaf_index INTEGER NOT NULL           -- the seal log's size when this migration ran
);
INSERT INTO ledger_seals_since SELECT COUNT(*) FROM seal_log_leaves;

CREATE TRIGGER ledger_seals_no_update BEFORE UPDATE ON ledger_seals
BEGIN SELECT RAISE(ABORT, 'a seal signature is immutable'); END;
CREATE TRIGGER ledger_seals_no_delete BEFORE DELETE ON ledger_seals
BEGIN SELECT RAISE(ABORT, 'a seal signature is immutable'); END;
CREATE TRIGGER ledger_seals_since_no_update BEFORE UPDATE ON ledger_seals_since
BEGIN SELECT RAISE(ABORT, 'where signing began is immutable'); END;
CREATE TRIGGER ledger_seals_since_no_delete BEFORE DELETE ON ledger_seals_since
BEGIN SELECT RAISE(ABORT, 'where signing began is immutable'); END;
CREATE TRIGGER ledger_seals_since_one_row BEFORE INSERT ON ledger_seals_since
BEGIN SELECT RAISE(ABORT, 'where signing began is set once'); END;
