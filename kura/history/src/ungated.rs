//! Calls that ran without Kura's gate (an agent's PreToolUse hook missing, killed or timed
//! out; recorded by the agent surface's `report_ungated`): the alarm `kura status`, the
//! console and aegis's notices raise, read in this one place.

use kura_store::{Result, Store};
use rusqlite::params;

/// How far back an ungated call keeps the alarm raised (a day: long enough to be seen, and a
/// call stays on record, and in `kura query`, for ever).
pub const ALARM_WINDOW_MS: i64 = 24 * 3_600_000;

/// One ungated call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Ungated {
    /// Its `tool.call` record.
    pub record_id: String,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// The tool.
    pub tool: String,
    /// Who ran it.
    pub by: String,
    /// How it was noticed (the record's words).
    pub why: String,
    /// Its session.
    pub session_id: String,
    /// The session's label.
    pub session_label: String,
}

/// Ungated calls recorded after `since` (an RFC 3339 time), newest first, at most `limit`.
pub fn since(store: &Store, since: &str, limit: i64) -> Result<Vec<Ungated>> {
    query(store, since, limit, "DESC")
}

/// Ungated calls recorded after `after`, oldest first, at most `limit` (aegis tells them in
/// this order, so a burst is told whole over several looks).
pub fn oldest_after(store: &Store, after: &str, limit: i64) -> Result<Vec<Ungated>> {
    query(store, after, limit, "ASC")
}

/// How many calls ran ungated after `since`.
pub fn count_since(store: &Store, since: &str) -> Result<u64> {
    let n: i64 = store.conn().query_row(
        "SELECT count(*) FROM records r
          WHERE r.record_type = 'tool.call' AND r.created_at > ?1
            AND json_extract(r.content, '$.ungated') IS NOT NULL",
        params![since],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

fn query(store: &Store, since: &str, limit: i64, order: &str) -> Result<Vec<Ungated>> {
    let mut stmt = store.conn().prepare_cached(&format!(
        "SELECT r.record_id, r.created_at, json_extract(r.content, '$.tool_name'), r.author_id,
                json_extract(r.content, '$.ungated'), s.session_id, s.label
           FROM records r
           JOIN ledger_records lr ON lr.record_id = r.record_id
           JOIN ledgers l ON l.ledger_id = lr.ledger_id
           JOIN sessions s ON s.session_id = l.session_id
          WHERE r.record_type = 'tool.call' AND r.created_at > ?1
            AND json_extract(r.content, '$.ungated') IS NOT NULL
          GROUP BY r.record_id
          ORDER BY r.created_at {order}, r.record_id {order} LIMIT ?2",
    ))?;
    let rows = stmt.query_map(params![since, limit], |r| {
        Ok(Ungated {
            record_id: r.get(0)?,
            at: r.get(1)?,
            tool: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
            by: r.get(3)?,
            why: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
            session_id: r.get(5)?,
            session_label: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The calls that keep the alarm raised now (the last [`ALARM_WINDOW_MS`]): how many, and
/// the newest `limit` of them.
pub fn alarm(store: &Store, now_ms: i64, limit: i64) -> Result<Alarm> {
    let from = std::time::UNIX_EPOCH
        + std::time::Duration::from_millis(now_ms.saturating_sub(ALARM_WINDOW_MS).max(0) as u64);
    let from = kura_store::time::format(from);
    Ok(Alarm {
        count: count_since(store, &from)?,
        newest: since(store, &from, limit)?,
    })
}

/// The ungated-call alarm.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Alarm {
    /// Calls that ran ungated in the last day.
    pub count: u64,
    /// The newest of them.
    pub newest: Vec<Ungated>,
}

/// The ALARM line `kura status` prints first, when calls ran ungated in the last day.
pub fn alarm_line(alarm: &Alarm) -> Option<String> {
    let u = alarm.newest.first()?;
    Some(format!(
        "ALARM: {} tool call(s) ran ungated in the last day, nobody ruling on them (the newest: {} by {} in {:?} at {}); an agent's PreToolUse hook was missing, killed or timed out: `kura hook doctor claude-code`, and `kura show {}`",
        alarm.count,
        proto::text::escape_controls(&u.tool),
        u.by,
        u.session_label,
        u.at,
        u.record_id
    ))
}
