//! The published policy: aegis publishes the [`Policy`] it rules by, hashi applies its allow
//! and deny rules at once. The evaluator itself is `kura-policy` (no SQLite); this module only
//! stores and loads what was published, checked against its hash.

use crate::cached::Cached;

use kura_policy::Policy;
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Result, StoreError};

/// Makes `policy` the one in force; returns its hash. Publishing the same policy again
/// changes nothing.
pub(crate) fn publish_in(tx: &Connection, policy: &Policy) -> Result<String> {
    let (hash, body) = policy
        .canonical()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    tx.execute_cached(
        "INSERT OR IGNORE INTO policies (policy_hash, body, published_at) VALUES (?1, ?2, ?3)",
        params![hash, body, crate::time::now()],
    )?;
    tx.execute_cached(
        "INSERT INTO policy_current (id, policy_hash) VALUES (1, ?1)
         ON CONFLICT (id) DO UPDATE SET policy_hash = excluded.policy_hash",
        [&hash],
    )?;
    Ok(hash)
}

/// The hash of the policy in force, if aegis has published one.
pub fn current_hash(conn: &impl crate::tx::Db) -> Result<Option<String>> {
    let conn = crate::tx::conn(conn);
    Ok(conn
        .prepare_cached("SELECT policy_hash FROM policy_current WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?)
}

/// A published policy, checked against its hash (a policy that does not hash to its name is
/// not applied: the caller falls back to asking aegis).
pub fn load(conn: &impl crate::tx::Db, hash: &str) -> Result<Option<Policy>> {
    let conn = crate::tx::conn(conn);
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
