//! The published policy: aegis publishes the [`Policy`] it rules by, hashi applies its allow
//! and deny rules at once. The evaluator itself is `kura-policy` (no SQLite); this module only
//! stores and loads what was published, checked against its hash.

use kura_policy::Policy;
use kura_store::{Cached, Db, Result, StoreError, Tx};
use rusqlite::{OptionalExtension, params};

/// Makes `policy` the one in force; returns its hash. Publishing the same policy again
/// changes nothing.
pub(crate) fn publish(tx: &Tx<'_>, policy: &Policy) -> Result<String> {
    let (hash, body) = policy
        .canonical()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    tx.sql().execute_cached(
        "INSERT OR IGNORE INTO policies (policy_hash, body, published_at) VALUES (?1, ?2, ?3)",
        params![hash, body, kura_store::time::now()],
    )?;
    tx.sql().execute_cached(
        "INSERT INTO policy_current (id, policy_hash) VALUES (1, ?1)
         ON CONFLICT (id) DO UPDATE SET policy_hash = excluded.policy_hash",
        [&hash],
    )?;
    Ok(hash)
}

/// The hash of the policy in force, if aegis has published one.
pub fn current_hash(conn: &impl Db) -> Result<Option<String>> {
    let conn = conn.sql();
    Ok(conn
        .prepare_cached("SELECT policy_hash FROM policy_current WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?)
}

/// A published policy, checked against its hash (a policy that does not hash to its name is
/// not applied: the caller falls back to asking aegis).
pub fn load(conn: &impl Db, hash: &str) -> Result<Option<Policy>> {
    let conn = conn.sql();
    let body: Option<String> = conn
        .prepare_cached("SELECT body FROM policies WHERE policy_hash = ?1")?
        .query_row([hash], |r| r.get(0))
        .optional()?;
    let Some(body) = body else { return Ok(None) };
    if proto::sha256_hex(body.as_bytes()) != hash {
        return Ok(None);
    }
    let Ok(policy) = serde_json::from_str::<Policy>(&body) else {
        return Ok(None);
    };
    let same = policy.canonical().is_ok_and(|(h, _)| h == hash);
    Ok((same && policy.check().is_ok()).then_some(policy))
}
