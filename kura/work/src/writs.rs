//! Writs over the store: grants and revocations as records in the authority session's
//! sealed ledgers, the writ a session runs under, and every call and model step checked
//! against its whole chain (root grant to the delegation it runs under) and debited in the
//! same transaction. The checks themselves are `kura_policy::writ`.

use kura_policy::writ::{self as check, Issuer, Spent, WritError};
use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, StoreError, Tx};
use kura_tlog::sealer::Sealer;
use proto::WritId;
use proto::record::{NewRecord, RecordType};
use proto::writ::{Revocation, Usage, Writ};
use proto::{Effect, RecordId, SessionId};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::{Map, Value};

/// Longest chain of delegations followed (a grant and 15 narrowings).
pub const MAX_DEPTH: usize = 16;

/// A writ as stored, with what was spent under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredWrit {
    /// The signed writ.
    pub writ: Writ,
    /// Its `authority.writ` record.
    pub record_id: RecordId,
    /// Its `authority.revocation` record, once revoked.
    pub revoked_by: Option<RecordId>,
    /// Tool calls run under it (and its delegations).
    pub calls_used: u64,
    /// Model tokens spent under it.
    pub tokens_used: u64,
    /// Money spent, millionths.
    pub money_used: u64,
    /// When its first call ran (unix ms).
    pub first_used_ms: Option<i64>,
    /// Calls refused under it.
    pub refused: u64,
}

impl StoredWrit {
    /// What was spent, as the budget check sees it at `now_ms`.
    pub fn spent(&self, now_ms: i64) -> Spent {
        Spent {
            tool_calls: self.calls_used,
            tokens: self.tokens_used,
            money_micros: self.money_used,
            wall_ms: self
                .first_used_ms
                .map_or(0, |t| u64::try_from(now_ms.saturating_sub(t)).unwrap_or(0)),
        }
    }
}

const COLUMNS: &str =
    "body, record_id, revoked_by, calls_used, tokens_used, money_used, first_used_ms, refused";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<StoredWrit>> {
    let (body, record, revoked): (String, String, Option<String>) =
        (r.get(0)?, r.get(1)?, r.get(2)?);
    let n = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
    let (calls, tokens, money, first, refused) = (n(3)?, n(4)?, n(5)?, r.get(6)?, n(7)?);
    Ok((|| {
        let writ: Writ = serde_json::from_str(&body).map_err(|e| StoreError::Corrupt {
            what: "writ",
            id: record.clone(),
            detail: e.to_string(),
        })?;
        Ok(StoredWrit {
            writ,
            record_id: parse_id(&record)?,
            revoked_by: revoked.as_deref().map(parse_id).transpose()?,
            calls_used: calls,
            tokens_used: tokens,
            money_used: money,
            first_used_ms: first,
            refused,
        })
    })())
}

/// One writ by id.
pub fn writ(conn: &impl Db, id: WritId) -> Result<Option<StoredWrit>> {
    let sql = format!("SELECT {COLUMNS} FROM writs WHERE writ_id = ?1");
    conn.sql()
        .prepare_cached(&sql)?
        .query_row([id], from_row)
        .optional()?
        .transpose()
}

/// Every writ, newest grant first.
pub fn list(conn: &impl Db) -> Result<Vec<StoredWrit>> {
    let sql = format!("SELECT {COLUMNS} FROM writs ORDER BY granted_seq DESC");
    let mut stmt = conn.sql().prepare_cached(&sql)?;
    let rows = stmt.query_map([], from_row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r??);
    }
    Ok(out)
}

/// The writ a session's calls run under: the newest granted to `session:<id>`, else the
/// newest granted to whoever submitted its work (`submitter`). Once a holder was granted one
/// it stays bound by its newest, revoked or expired — it never falls back to no writ.
pub fn held_by(
    conn: &impl Db,
    session: SessionId,
    submitter: Option<&str>,
) -> Result<Option<StoredWrit>> {
    let sql =
        format!("SELECT {COLUMNS} FROM writs WHERE holder = ?1 ORDER BY granted_seq DESC LIMIT 1");
    let one = |holder: &str| -> Result<Option<StoredWrit>> {
        conn.sql()
            .prepare_cached(&sql)?
            .query_row([holder], from_row)
            .optional()?
            .transpose()
    };
    if let Some(w) = one(&format!("session:{session}"))? {
        return Ok(Some(w));
    }
    match submitter {
        Some(s) => one(s),
        None => Ok(None),
    }
}

/// The newest writ granted to `holder`, revoked or not.
pub(crate) fn newest(conn: &impl Db, holder: &str) -> Result<Option<StoredWrit>> {
    let sql =
        format!("SELECT {COLUMNS} FROM writs WHERE holder = ?1 ORDER BY granted_seq DESC LIMIT 1");
    conn.sql()
        .prepare_cached(&sql)?
        .query_row([holder], from_row)
        .optional()?
        .transpose()
}

/// The chain a writ runs under: itself first, then each parent up to the person's grant.
pub fn chain(
    conn: &impl Db,
    id: WritId,
) -> Result<std::result::Result<Vec<StoredWrit>, WritError>> {
    let mut out: Vec<StoredWrit> = Vec::new();
    let mut next = Some(id);
    while let Some(id) = next {
        if out.len() >= MAX_DEPTH {
            return Ok(Err(WritError::Malformed(format!(
                "delegated more than {MAX_DEPTH} deep"
            ))));
        }
        let Some(w) = writ(conn, id)? else {
            return Ok(Err(WritError::Unknown(id.to_string())));
        };
        next = w.writ.body.parent;
        out.push(w);
    }
    Ok(Ok(out))
}

/// Every signature on the chain: the root a trusted issuer's grant, each delegation within
/// its parent and signed by its delegate key; none revoked.
fn verify_chain(chain: &[StoredWrit], issuers: &[Issuer]) -> std::result::Result<(), WritError> {
    for (i, w) in chain.iter().enumerate() {
        if w.revoked_by.is_some() {
            return Err(WritError::Revoked(w.writ.body.id));
        }
        let parent = chain.get(i + 1).map(|p| &p.writ);
        let link = (&w.writ, parent, issuers);
        // A signed writ never changes: a link verified once (the same writ, parent and
        // issuers, byte for byte) is not verified again on every call.
        let key = serde_json::to_vec(&link)
            .map(|b| proto::sha256_hex(&b))
            .unwrap_or_default();
        if verified(&key) {
            continue;
        }
        match parent {
            Some(parent) => check::verify_delegation(&w.writ, parent)?,
            None => check::verify_grant(&w.writ, issuers)?,
        }
        remember(key);
    }
    Ok(())
}

/// The chain of writ `id`, every link verified (see [`verify_chain`]).
fn verified_chain(
    conn: &impl Db,
    id: WritId,
    issuers: &[Issuer],
) -> Result<std::result::Result<Vec<StoredWrit>, WritError>> {
    Ok(chain(conn, id)?.and_then(|c| verify_chain(&c, issuers).map(|()| c)))
}

/// Links whose signatures verified in this process (bounded: cleared when full).
static VERIFIED: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
    std::sync::Mutex::new(None);

fn verified(key: &str) -> bool {
    !key.is_empty()
        && VERIFIED
            .lock()
            .is_ok_and(|v| v.as_ref().is_some_and(|set| set.contains(key)))
}

fn remember(key: String) {
    if key.is_empty() {
        return;
    }
    if let Ok(mut v) = VERIFIED.lock() {
        let set = v.get_or_insert_with(Default::default);
        if set.len() >= 4096 {
            set.clear();
        }
        set.insert(key);
    }
}

/// Judges a call under writ `id` (its whole chain: signatures, revocation, time, scope,
/// ceiling, budgets) without debiting it: the chain to debit when it may run. A refusal is
/// counted on the writ.
pub(crate) fn judge_call(
    tx: &Tx<'_>,
    id: WritId,
    issuers: &[Issuer],
    tool: &str,
    effect: Effect,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<std::result::Result<Vec<StoredWrit>, WritError>> {
    let chain = verified_chain(tx, id, issuers)?;
    let verdict = chain.as_ref().map_err(Clone::clone).and_then(|chain| {
        chain.iter().try_for_each(|w| {
            check::check_call(&w.writ.body, tool, effect, args, w.spent(now_ms), now_ms)
        })
    });
    match (verdict, chain) {
        (Ok(()), Ok(chain)) => Ok(Ok(chain)),
        (verdict, _) => {
            count_refusal(tx, id)?;
            Ok(Err(verdict
                .err()
                .unwrap_or_else(|| WritError::Unknown(id.to_string()))))
        }
    }
}

/// Debits one call on every writ of a chain [`judge_call`] let through.
pub(crate) fn debit_call(tx: &Tx<'_>, chain: &[StoredWrit], now_ms: i64) -> Result<()> {
    for w in chain {
        tx.sql().execute_cached(
            "UPDATE writs SET calls_used = calls_used + 1,
                 first_used_ms = coalesce(first_used_ms, ?2) WHERE writ_id = ?1",
            params![w.writ.body.id, now_ms],
        )?;
    }
    Ok(())
}

/// A call already checked and debited, checked again before it runs (a person approved it
/// later, or edited its arguments, or a new worker resumes it): the chain's signatures,
/// revocation and time, and the call's tool, paths and ceiling — not the budget it already
/// spent.
pub(crate) fn recheck_call(
    conn: &impl Db,
    id: WritId,
    issuers: &[Issuer],
    tool: &str,
    effect: Effect,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<std::result::Result<(), WritError>> {
    Ok(verified_chain(conn, id, issuers)?.and_then(|chain| {
        chain
            .iter()
            .try_for_each(|w| check::check_scope(&w.writ.body, tool, effect, args, now_ms))
    }))
}

/// Counts a refusal on writ `id` (a recheck that refused, in the caller's transaction).
pub(crate) fn count_refusal(tx: &Tx<'_>, id: WritId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE writs SET refused = refused + 1 WHERE writ_id = ?1",
        [id],
    )?;
    Ok(())
}

/// Whether the writ still lets a model be asked: valid chain, not expired, and every budget
/// axis but tool calls still under its limit. Says which budget ended the run otherwise.
pub fn check_model_step(
    conn: &impl Db,
    id: WritId,
    issuers: &[Issuer],
    now_ms: i64,
) -> Result<std::result::Result<(), WritError>> {
    check_model_step_pending(conn, id, issuers, now_ms, Spent::default())
}

/// [`check_model_step`] counting `pending` too: usage answered but not yet committed (it is
/// debited with the answer's records).
pub fn check_model_step_pending(
    conn: &impl Db,
    id: WritId,
    issuers: &[Issuer],
    now_ms: i64,
    pending: Spent,
) -> Result<std::result::Result<(), WritError>> {
    Ok(verified_chain(conn, id, issuers)?.and_then(|chain| {
        chain.iter().try_for_each(|w| {
            let b = &w.writ.body;
            let now_ok = check::parse_time(&b.expires_at).map(|t| now_ms < t)?;
            if !now_ok {
                let why = format!("expired at {}", b.expires_at);
                return Err(WritError::Expired { id: b.id, why });
            }
            let mut spent = w.spent(now_ms);
            spent.tokens = spent.tokens.saturating_add(pending.tokens);
            spent.money_micros = spent.money_micros.saturating_add(pending.money_micros);
            check::check_budget(b, spent, 0)
        })
    }))
}

/// Tokens writ `id`'s chain leaves for the next answer (`pending` counted as spent): the
/// least any of its writs with a token budget has left; `None` when none limits tokens or the
/// chain does not verify (then [`check_model_step`] says why the model is not asked).
pub fn tokens_left(
    conn: &impl Db,
    id: WritId,
    issuers: &[Issuer],
    now_ms: i64,
    pending: Spent,
) -> Result<Option<u64>> {
    let Ok(chain) = verified_chain(conn, id, issuers)? else {
        return Ok(None);
    };
    Ok(chain
        .iter()
        .filter_map(|w| {
            let limit = w.writ.body.budget.tokens?;
            let spent = w.spent(now_ms).tokens.saturating_add(pending.tokens);
            Some(limit.saturating_sub(spent))
        })
        .min())
}

/// Records a model step's usage: on the session, and on every writ of each of `writs`'
/// chains (the writs the turn runs under).
pub fn debit_usage(tx: &Tx<'_>, session: SessionId, writs: &[WritId], usage: &Usage) -> Result<()> {
    // A model server says what it spent: bounded, so no sum leaves SQLite's integers (a
    // server reporting 2^64 tokens ends the budget, never the bookkeeping).
    const MAX: u64 = 1 << 40;
    let (i, o, m) = (
        usage.tokens_in.min(MAX) as i64,
        usage.tokens_out.min(MAX) as i64,
        usage.money_micros.min(MAX) as i64,
    );
    tx.sql().execute_cached(
        "INSERT INTO session_usage (session_id, steps, tokens_in, tokens_out, money_micros)
         VALUES (?1, 1, ?2, ?3, ?4)
         ON CONFLICT (session_id) DO UPDATE SET steps = steps + 1,
             tokens_in = tokens_in + ?2, tokens_out = tokens_out + ?3,
             money_micros = money_micros + ?4",
        params![session.to_string(), i, o, m],
    )?;
    // Two writs of a turn may share a parent: each writ is charged once.
    let mut charged = std::collections::BTreeSet::new();
    for id in writs {
        let Ok(chain) = chain(tx, *id)? else { continue };
        for w in chain.into_iter().filter(|w| charged.insert(w.writ.body.id)) {
            tx.sql().execute_cached(
                "UPDATE writs SET tokens_used = min(tokens_used + ?2, 9007199254740991),
                     money_used = min(money_used + ?3, 9007199254740991),
                     first_used_ms = coalesce(first_used_ms, ?4)
                 WHERE writ_id = ?1",
                params![w.writ.body.id, i.saturating_add(o), m, crate::now_ms()],
            )?;
        }
    }
    Ok(())
}

/// A session's model usage: (model answers, tokens in, tokens out, money millionths).
pub fn session_usage(conn: &impl Db, session: SessionId) -> Result<Option<(u64, u64, u64, u64)>> {
    let row: Option<(i64, i64, i64, i64)> = conn
        .sql()
        .prepare_cached(
            "SELECT steps, tokens_in, tokens_out, money_micros FROM session_usage
             WHERE session_id = ?1",
        )?
        .query_row([session.to_string()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(row.map(|(a, b, c, d)| (u(a), u(b), u(c), u(d))))
}

/// Stores a grant or a delegation as an `authority.writ` record by `author`: signed by the
/// key it names, a delegation within its stored parent, its id not taken. Whether the
/// grant's key is a trusted issuer's is checked where it is used (hashi, aegis).
pub fn grant(
    tx: &Tx<'_>,
    w: &Writ,
    author: &str,
    sealer: Option<&Sealer>,
) -> Result<std::result::Result<RecordId, WritError>> {
    if let Err(e) = check::verify_signed(w) {
        return Ok(Err(e));
    }
    if writ(tx, w.body.id)?.is_some() {
        return Ok(Err(WritError::Taken(w.body.id)));
    }
    if let Some(p) = &w.body.parent {
        // A delegation is for a sub-session, and one that no writ binds yet: a delegate key
        // must not re-bind a holder a person already gave a (narrower) writ.
        if !w.body.holder.starts_with("session:") {
            return Ok(Err(WritError::Malformed(
                "a delegated writ's holder is a sub-session (session:<id>)".into(),
            )));
        }
        if tx
            .sql()
            .prepare_cached("SELECT 1 FROM writs WHERE holder = ?1")?
            .exists([&w.body.holder])?
        {
            return Ok(Err(WritError::Malformed(format!(
                "{} already runs under a writ; a delegation cannot re-bind it",
                w.body.holder
            ))));
        }
        let Some(parent) = writ(tx, *p)? else {
            return Ok(Err(WritError::Unknown(p.to_string())));
        };
        if let Some(e) = check::verify_delegation(w, &parent.writ).err() {
            return Ok(Err(e));
        }
        if parent.revoked_by.is_some() {
            return Ok(Err(WritError::Revoked(*p)));
        }
    }
    let record = NewRecord {
        record_type: RecordType::AuthorityWrit,
        content: serde_json::to_value(w).map_err(|e| StoreError::Invalid(e.to_string()))?,
        author_id: author.to_owned(),
        metadata: Default::default(),
    };
    let record_id = tx.append_authority(&record, sealer)?;
    let body = proto::canonical_json(w).map_err(|e| StoreError::Invalid(e.to_string()))?;
    tx.sql().execute_cached(
        "INSERT INTO writs (writ_id, parent_id, holder, body, record_id, granted_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, (SELECT coalesce(max(granted_seq), 0) + 1 FROM writs))",
        params![
            w.body.id,
            w.body.parent,
            w.body.holder,
            body,
            record_id.to_string()
        ],
    )?;
    Ok(Ok(record_id))
}

/// Stores a revocation as an `authority.revocation` record and marks the writ revoked (its
/// delegations refuse too: a chain with a revoked writ refuses). Its signature must be a
/// trusted issuer's, or the delegate key of the revoked writ's parent.
pub fn revoke(
    tx: &Tx<'_>,
    r: &Revocation,
    issuers: &[Issuer],
    author: &str,
    sealer: Option<&Sealer>,
) -> Result<std::result::Result<RecordId, WritError>> {
    let Some(target) = writ(tx, r.body.writ_id)? else {
        return Ok(Err(WritError::Unknown(r.body.writ_id.to_string())));
    };
    let parent = match &target.writ.body.parent {
        Some(p) => writ(tx, *p)?,
        None => None,
    };
    if let Err(e) = check::verify_revocation(r, issuers, parent.as_ref().map(|p| &p.writ)) {
        return Ok(Err(e));
    }
    let record = NewRecord {
        record_type: RecordType::AuthorityRevocation,
        content: serde_json::to_value(r).map_err(|e| StoreError::Invalid(e.to_string()))?,
        author_id: author.to_owned(),
        metadata: Default::default(),
    };
    let record_id = tx.append_authority(&record, sealer)?;
    tx.sql().execute_cached(
        "UPDATE writs SET revoked_by = coalesce(revoked_by, ?2) WHERE writ_id = ?1",
        params![r.body.writ_id, record_id.to_string()],
    )?;
    Ok(Ok(record_id))
}
