//! Independent verification: recompute every hash from raw column bytes and name every problem.
//!
//! Nothing here trusts a stored hash, count or state: record hashes come from the raw
//! `record_type`/`content`/`author_id` text, Merkle roots from every column of every member,
//! ledger hashes from the header and the parents' stored hashes, and session heads from the
//! hash-chained ref log. Every problem found is reported, not just the first.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use proto::ledger::{LedgerHeader, ParentRef};
use proto::merkle;
use proto::record::{RecordColumns, RecordType};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row};

use crate::error::Result;
use crate::store::{RefLogEntry, Store};

pub use proto::verify::{Problem, RedactedRecord, Report, Scope};

/// A column's raw bytes as text, whatever storage class SQLite gives it.
fn raw_text(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Text(t) => Some(match std::str::from_utf8(t) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(t).into_owned(),
        }),
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(x) => Some(x.to_string()),
        ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
    })
}

/// [`raw_text`] without copying when the column is valid UTF-8 text (the normal case).
fn raw_str<'r>(row: &'r Row<'_>, i: usize) -> rusqlite::Result<Option<Cow<'r, str>>> {
    Ok(match row.get_ref(i)? {
        ValueRef::Text(t) => Some(match std::str::from_utf8(t) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => Cow::Owned(String::from_utf8_lossy(t).into_owned()),
        }),
        _ => raw_text(row, i)?.map(Cow::Owned),
    })
}

/// Records already checked. An id in the form Kura writes (lowercase hyphenated UUID, a
/// one-to-one text form) is kept as its 128 bits under a seeded fast hash; anything else —
/// itself a reported problem — as text. No heap string and no SipHash per record.
#[derive(Default)]
struct Seen {
    ids: HashSet<u128, foldhash::fast::RandomState>,
    other: HashSet<String>,
}

impl Seen {
    fn key(id: &str) -> Option<u128> {
        if id.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        proto::ids::parse_id(id).map(|u| u.as_u128())
    }

    /// True when `id` was not in the set.
    fn insert(&mut self, id: &str) -> bool {
        match Self::key(id) {
            Some(k) => self.ids.insert(k),
            None => self.other.insert(id.to_owned()),
        }
    }

    fn contains(&self, id: &str) -> bool {
        match Self::key(id) {
            Some(k) => self.ids.contains(&k),
            None => self.other.contains(id),
        }
    }

    /// Adds `more`; returns how many were new.
    fn merge(&mut self, more: Seen) -> u64 {
        let before = self.ids.len() + self.other.len();
        self.ids.extend(more.ids);
        self.other.extend(more.other);
        (self.ids.len() + self.other.len() - before) as u64
    }
}

struct Verifier<'c> {
    conn: &'c Connection,
    report: Report,
    seen_records: Seen,
    /// Records under a valid redaction: their kept leaves (hex), by record id.
    redacted: &'c HashMap<String, String>,
}

impl Verifier<'_> {
    fn problem(&mut self, kind: &'static str, id: &str, check: &'static str, detail: String) {
        self.report.problems.push(Problem {
            kind,
            id: id.to_owned(),
            check,
            detail,
        });
    }

    /// Checks one record's own consistency (once per record).
    fn check_record(&mut self, c: &RecordColumns<'_>) {
        if !self.seen_records.insert(c.record_id) {
            return;
        }
        self.report.records_checked += 1;
        let id = c.record_id;
        if proto::ids::parse_id(id).is_none() {
            self.problem("record", id, "record_id", "id is not a UUID".into());
        }
        if c.record_type.parse::<RecordType>().is_err() {
            self.problem(
                "record",
                id,
                "record_type",
                format!("unknown type {:?}", c.record_type),
            );
        }
        // Fast path: the hash over the raw bytes matches, so the content is byte-for-byte the
        // canonical content that was hashed. Only on a mismatch is the JSON parsed, to say why.
        // A redacted record's content is a tombstone: its leaf is checked instead.
        if !self.redacted.contains_key(id) && !c.hash_matches() {
            match serde_json::from_str::<serde_json::Value>(c.content) {
                Err(e) => self.problem(
                    "record",
                    id,
                    "record_content",
                    format!("content is not JSON: {e}"),
                ),
                Ok(value) => {
                    let canonical = proto::canonical_json(&value).unwrap_or_default();
                    if canonical != c.content {
                        self.problem(
                            "record",
                            id,
                            "content_not_canonical",
                            "stored content is not in RFC 8785 form (bytes were altered)".into(),
                        );
                    }
                    match proto::record_hash_from_canonical(c.record_type, &canonical, c.author_id)
                    {
                        Ok(h) if h == c.hash => {}
                        Ok(h) => self.problem(
                            "record",
                            id,
                            "record_hash",
                            format!(
                                "stored hash {} but type, content and author hash to {h}",
                                c.hash
                            ),
                        ),
                        Err(e) => self.problem("record", id, "record_hash", e.to_string()),
                    }
                }
            }
        }
        // "{}" is the canonical empty object: nothing to parse.
        let metadata = match c.metadata {
            "{}" => Ok(BTreeMap::new()),
            text => serde_json::from_str::<BTreeMap<String, String>>(text),
        };
        match metadata {
            Ok(m) if proto::canonical_json(&m).is_ok_and(|t| t == c.metadata) => {}
            Ok(_) => self.problem(
                "record",
                id,
                "record_metadata",
                "metadata is not in RFC 8785 form (bytes were altered)".into(),
            ),
            Err(e) => self.problem(
                "record",
                id,
                "record_metadata",
                format!("metadata is not a JSON object of strings: {e}"),
            ),
        }
        if crate::time::unix_seconds(c.created_at).is_none() {
            self.problem(
                "record",
                id,
                "record_time",
                format!("created_at {:?} is not a time", c.created_at),
            );
        }
    }

    fn check_ledger(&mut self, id: &str) -> Result<Vec<String>> {
        self.report.ledgers_checked += 1;
        let row = self
            .conn
            .query_row(
                "SELECT ledger_id, session_id, label, parent_ids, state, record_count, root_hash,
                        ledger_hash, created_at, sealed_at FROM ledgers WHERE ledger_id = ?1",
                [id],
                |r| {
                    (0..10)
                        .map(|i| raw_text(r, i))
                        .collect::<rusqlite::Result<Vec<_>>>()
                },
            )
            .optional()?;
        let Some(cols) = row else {
            self.problem(
                "ledger",
                id,
                "ledger_missing",
                "ledger row does not exist".into(),
            );
            return Ok(vec![]);
        };
        let text = |i: usize| cols[i].clone().unwrap_or_default();
        let (session_id, label, parents_raw, state) = (text(1), text(2), text(3), text(4));
        let count_raw = text(5);
        let (root_stored, hash_stored, created_at, sealed_at) =
            (cols[6].clone(), cols[7].clone(), text(8), cols[9].clone());

        let (leaves, members) = self.check_members(id)?;
        let count: Option<u64> = count_raw.parse().ok();
        if count != Some(members as u64) {
            self.problem(
                "ledger",
                id,
                "record_count",
                format!("records {count_raw} members but has {members}"),
            );
        }
        self.check_session_exists(id, &session_id)?;

        let (parent_ids, parents) = self.check_parents(id, &parents_raw)?;

        match state.as_str() {
            "open" => {
                if root_stored.is_some() || hash_stored.is_some() || sealed_at.is_some() {
                    self.problem(
                        "ledger",
                        id,
                        "state",
                        "open ledger carries a root, hash or seal time".into(),
                    );
                }
            }
            "sealed" => {
                let header = LedgerHeader {
                    ledger_id: text(0),
                    session_id,
                    label,
                    parents,
                    created_at,
                    sealed_at: sealed_at.unwrap_or_default(),
                };
                let root_stored = root_stored.unwrap_or_default();
                let hash_stored = hash_stored.unwrap_or_default();
                self.check_seal(id, &leaves, &header, count, (&root_stored, &hash_stored));
            }
            other => self.problem("ledger", id, "state", format!("unknown state {other:?}")),
        }
        Ok(parent_ids)
    }

    /// Checks a ledger's members as they stream out of SQLite: positions, each record, and
    /// each member's leaf; returns the leaves and how many members there are.
    fn check_members(&mut self, id: &str) -> Result<(Vec<merkle::Hash>, usize)> {
        // Members, with their records' raw columns (a missing record shows as NULLs),
        // checked as they stream out of SQLite: the columns are borrowed, not copied.
        let conn = self.conn;
        let mut stmt = conn.prepare_cached(
            "SELECT m.position, m.record_id, r.record_id, r.hash, r.record_type, r.content,
                    r.author_id, r.metadata, r.created_at, m.leaf_hash
               FROM ledger_records m LEFT JOIN records r ON r.record_id = m.record_id
              WHERE m.ledger_id = ?1 ORDER BY m.position",
        )?;
        let mut rows = stmt.query([id])?;
        let mut leaves = Vec::new();
        let mut positions_ok = true;
        let mut members = 0usize;
        while let Some(r) = rows.next()? {
            let expected = members;
            members += 1;
            let pos: i64 = match r.get_ref(0)? {
                ValueRef::Integer(n) => n,
                _ => raw_str(r, 0)?.and_then(|p| p.parse().ok()).unwrap_or(-1),
            };
            if pos != expected as i64 && positions_ok {
                positions_ok = false;
                self.problem(
                    "ledger",
                    id,
                    "member_positions",
                    format!("position {pos} found where {expected} was expected (a member was removed or moved)"),
                );
            }
            let mut hash_buf = [0u8; 64];
            let rc = [
                raw_str(r, 2)?,
                Some(crate::store::hashcol::render(r.get_ref(3)?, &mut hash_buf)),
                raw_str(r, 4)?,
                raw_str(r, 5)?,
                raw_str(r, 6)?,
                raw_str(r, 7)?,
                raw_str(r, 8)?,
                raw_str(r, 9)?,
            ];
            if rc[0].is_none() {
                let member = raw_str(r, 1)?.unwrap_or_default();
                self.problem(
                    "ledger",
                    id,
                    "member_missing",
                    format!("member at position {pos} is record {member}, which does not exist"),
                );
                continue;
            }
            let s = |i: usize| rc[i].as_deref().unwrap_or("");
            let c = RecordColumns {
                record_id: s(0),
                hash: s(1),
                record_type: s(2),
                content: s(3),
                author_id: s(4),
                metadata: s(5),
                created_at: s(6),
            };
            self.check_record(&c);
            let leaf = match self.redacted.get(c.record_id) {
                Some(kept) => merkle::decode_hash(kept).unwrap_or_default(),
                None => c.leaf_hash(),
            };
            if !proto::canonical::hex_matches(&leaf, s(7)) {
                self.problem(
                    "record",
                    c.record_id,
                    "record_leaf",
                    format!(
                        "its stored columns (id, hash, type, content, author, metadata or time) differ from \
                         what was appended at position {pos} of ledger {id}"
                    ),
                );
            }
            leaves.push(leaf);
        }
        drop(rows);
        drop(stmt);
        Ok((leaves, members))
    }

    /// The ledger's session must exist.
    fn check_session_exists(&mut self, id: &str, session_id: &str) -> Result<()> {
        if self
            .conn
            .query_row(
                "SELECT 1 FROM sessions WHERE session_id = ?1",
                [session_id],
                |_| Ok(()),
            )
            .optional()?
            .is_none()
        {
            self.problem(
                "ledger",
                id,
                "session_missing",
                format!("its session {session_id} does not exist"),
            );
        }
        Ok(())
    }

    /// Parses the ledger's parent list and checks each parent is a sealed ledger; returns
    /// the parent ids (to walk) and the sealed parents' references (to hash).
    fn check_parents(
        &mut self,
        id: &str,
        parents_raw: &str,
    ) -> Result<(Vec<String>, Vec<ParentRef>)> {
        let parent_ids = match serde_json::from_str::<Vec<String>>(parents_raw) {
            Ok(p) => p,
            Err(e) => {
                self.problem(
                    "ledger",
                    id,
                    "parent_ids",
                    format!("parent_ids is not a JSON list of ids: {e}"),
                );
                vec![]
            }
        };
        let mut parents = Vec::new();
        for p in &parent_ids {
            let parent: Option<(Option<String>, Option<String>)> = self
                .conn
                .query_row(
                    "SELECT state, ledger_hash FROM ledgers WHERE ledger_id = ?1",
                    [p],
                    |r| Ok((raw_text(r, 0)?, raw_text(r, 1)?)),
                )
                .optional()?;
            match parent {
                None => self.problem(
                    "ledger",
                    id,
                    "parent_missing",
                    format!("parent {p} does not exist"),
                ),
                Some((Some(st), Some(h))) if st == "sealed" => parents.push(ParentRef {
                    ledger_id: p.clone(),
                    ledger_hash: h,
                }),
                Some(_) => self.problem(
                    "ledger",
                    id,
                    "parent_not_sealed",
                    format!("parent {p} is not sealed"),
                ),
            }
        }
        Ok((parent_ids, parents))
    }

    /// A sealed ledger's root must be its members', and its hash the header's over that root.
    fn check_seal(
        &mut self,
        id: &str,
        leaves: &[merkle::Hash],
        header: &LedgerHeader,
        count: Option<u64>,
        (root_stored, hash_stored): (&str, &str),
    ) {
        let root = proto::canonical::to_hex(&merkle::root(leaves));
        if root != root_stored {
            self.problem(
                "ledger",
                id,
                "merkle_root",
                format!("stored root {root_stored} but its members give {root}"),
            );
        }
        let recomputed = header.ledger_hash(count.unwrap_or(u64::MAX), root_stored);
        if recomputed != hash_stored {
            self.problem(
                "ledger",
                id,
                "ledger_hash",
                format!("stored ledger hash {hash_stored} but header, parents and root give {recomputed}"),
            );
        }
    }

    fn check_session(&mut self, session_id: &str, trusted_head: Option<&str>) -> Result<()> {
        self.report.sessions_checked += 1;
        let head: Option<Option<String>> = self
            .conn
            .query_row(
                "SELECT head_ledger_id FROM sessions WHERE session_id = ?1",
                [session_id],
                |r| raw_text(r, 0),
            )
            .optional()?;
        let Some(head) = head else {
            self.problem(
                "session",
                session_id,
                "session_missing",
                "session row does not exist".into(),
            );
            return Ok(());
        };
        let entries = reflog_raw(self.conn, session_id)?;
        let mut prev_hash = String::new();
        let mut prev_head: Option<String> = None;
        let mut logged = BTreeSet::new();
        for (i, e) in entries.iter().enumerate() {
            self.check_reflog_entry(session_id, i, e, &prev_hash, prev_head.as_deref())?;
            logged.insert(e.new_head.clone());
            prev_hash = e.entry_hash.clone();
            prev_head = Some(e.new_head.clone());
        }
        if head != prev_head {
            self.problem(
                "session",
                session_id,
                "head",
                format!("head is {head:?} but the ref log ends at {prev_head:?}"),
            );
        }
        self.check_unlogged(session_id, &logged)?;
        if let Some(trusted) = trusted_head {
            let known = entries
                .iter()
                .any(|e| e.new_head_hash.eq_ignore_ascii_case(trusted));
            if !known {
                self.problem(
                    "session",
                    session_id,
                    "trusted_head",
                    format!("trusted head hash {trusted} is not in this session's history: it was truncated or rewritten"),
                );
            }
        }
        Ok(())
    }

    /// Checks ref log entry `i` of a session: its sequence, its hash chained to the previous
    /// one, the head it moves from, and the sealed ledger of this session it moves to.
    fn check_reflog_entry(
        &mut self,
        session_id: &str,
        i: usize,
        e: &RefLogEntry,
        prev_hash: &str,
        prev_head: Option<&str>,
    ) -> Result<()> {
        let want_seq = i as i64 + 1;
        if e.seq != want_seq {
            self.problem(
                "session",
                session_id,
                "reflog_sequence",
                format!(
                    "ref log entry {} found where {want_seq} was expected (entries removed)",
                    e.seq
                ),
            );
        }
        let h = e.compute_hash(prev_hash);
        if h != e.entry_hash {
            self.problem(
                "session",
                session_id,
                "reflog_hash",
                format!(
                    "ref log entry {} hashes to {h}, stored {}",
                    e.seq, e.entry_hash
                ),
            );
        }
        if e.old_head.as_deref() != prev_head {
            self.problem(
                "session",
                session_id,
                "reflog_chain",
                format!(
                    "ref log entry {} moves from {:?}, but the head was {:?}",
                    e.seq, e.old_head, prev_head
                ),
            );
        }
        let target: Option<(Option<String>, Option<String>, Option<String>)> = self
            .conn
            .query_row(
                "SELECT session_id, state, ledger_hash FROM ledgers WHERE ledger_id = ?1",
                [&e.new_head],
                |r| Ok((raw_text(r, 0)?, raw_text(r, 1)?, raw_text(r, 2)?)),
            )
            .optional()?;
        match target {
            None => self.problem(
                "session",
                session_id,
                "head_missing",
                format!(
                    "ref log entry {} points at ledger {}, which no longer exists",
                    e.seq, e.new_head
                ),
            ),
            Some((sid, state, hash)) => {
                if sid.as_deref() != Some(session_id) || state.as_deref() != Some("sealed") {
                    self.problem(
                        "session",
                        session_id,
                        "reflog_target",
                        format!(
                            "ref log entry {} points at {}, not a sealed ledger of this session",
                            e.seq, e.new_head
                        ),
                    );
                }
                if hash.as_deref() != Some(e.new_head_hash.as_str()) {
                    self.problem(
                        "session",
                        session_id,
                        "reflog_target",
                        format!(
                            "ref log entry {} recorded ledger {} with hash {}, it now has {}",
                            e.seq,
                            e.new_head,
                            e.new_head_hash,
                            hash.unwrap_or_default()
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// Every sealed ledger of a session must have been its head once (be in the ref log).
    fn check_unlogged(&mut self, session_id: &str, logged: &BTreeSet<String>) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT ledger_id FROM ledgers WHERE session_id = ?1 AND state = 'sealed' ORDER BY ledger_id",
        )?;
        let sealed = stmt
            .query_map([session_id], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        drop(stmt);
        for l in sealed.iter().filter(|l| !logged.contains(*l)) {
            self.problem(
                "session",
                session_id,
                "unlogged_ledger",
                format!("sealed ledger {l} never became the head (not in the ref log)"),
            );
        }
        Ok(())
    }
}

/// A session's ref log read column by column as raw text, so altered types are reported
/// rather than aborting the verification.
fn reflog_raw(conn: &Connection, session_id: &str) -> Result<Vec<RefLogEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, old_head, new_head, new_head_hash, reason, at, entry_hash
           FROM session_reflog WHERE session_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([session_id], |r| {
        let t = |i: usize| raw_text(r, i).map(Option::unwrap_or_default);
        Ok(RefLogEntry {
            session_id: session_id.to_owned(),
            seq: raw_text(r, 0)?.and_then(|s| s.parse().ok()).unwrap_or(-1),
            old_head: raw_text(r, 1)?,
            new_head: t(2)?,
            new_head_hash: t(3)?,
            reason: t(4)?,
            at: t(5)?,
            entry_hash: t(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// What one verify thread found: its report, the records it saw, each ledger's parents.
type ChunkResult = (Report, Seen, Vec<Vec<String>>);

/// Below this many ledgers in a generation, one thread does them all.
const PARALLEL_MIN_LEDGERS: usize = 16;

/// Checks `ids` (in order), on several threads when there are many; returns each ledger's
/// parents in the same order and folds problems and counts into `v`.
fn check_ledgers(
    v: &mut Verifier<'_>,
    path: &std::path::Path,
    ids: &[String],
) -> Result<Vec<Vec<String>>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4);
    if threads < 2 || ids.len() < PARALLEL_MIN_LEDGERS {
        return ids.iter().map(|id| v.check_ledger(id)).collect();
    }
    let chunk = ids.len().div_ceil(threads);
    let redacted = v.redacted;
    // Each worker has its own read-only connection; contiguous chunks keep the order.
    let results: Vec<Result<ChunkResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let conn = Connection::open_with_flags(
                        path,
                        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )?;
                    let mut w = Verifier {
                        conn: &conn,
                        report: Report::default(),
                        seen_records: Seen::default(),
                        redacted,
                    };
                    let parents = part
                        .iter()
                        .map(|id| w.check_ledger(id))
                        .collect::<Result<Vec<_>>>()?;
                    Ok((w.report, w.seen_records, parents))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::StoreError::Invalid(
                        "a verify thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut all_parents = Vec::with_capacity(ids.len());
    for r in results {
        let (report, seen, parents) = r?;
        v.report.ledgers_checked += report.ledgers_checked;
        for p in report.problems {
            // A record shared by ledgers of two chunks is checked (and reported) twice.
            if p.kind != "record" || !v.report.problems.contains(&p) {
                v.report.problems.push(p);
            }
        }
        v.report.records_checked += v.seen_records.merge(seen);
        all_parents.extend(parents);
    }
    Ok(all_parents)
}

/// Verifies `scope`. `trusted_head` is a ledger hash the caller noted earlier (e.g. from
/// `kura log`); with it, even a consistent truncation of a session is detected. Every seal
/// signature is checked; with `keyring`, so is who made it.
pub fn verify(
    store: &Store,
    scope: &Scope,
    trusted_head: Option<&str>,
    keyring: Option<&kura_tlog::sealer::Keyring>,
) -> Result<Report> {
    verify_with(store, scope, trusted_head, keyring, &[])
}

/// [`verify`], accepting redactions signed by `people` (`[writs] issuers`): a record under
/// one is reported redacted and its kept leaf used; any other redaction is a problem, and
/// its record's tombstone fails its hash like any altered content.
pub fn verify_with(
    store: &Store,
    scope: &Scope,
    trusted_head: Option<&str>,
    keyring: Option<&kura_tlog::sealer::Keyring>,
    people: &[kura_policy::writ::Issuer],
) -> Result<Report> {
    let conn = store.conn();
    let (redacted, notes, refused) = valid_redactions(store, people)?;
    let mut v = Verifier {
        conn,
        report: Report::default(),
        seen_records: Seen::default(),
        redacted: &redacted,
    };
    v.report.redacted = notes;
    for (id, why) in refused {
        v.problem("record", &id, "redaction", why);
    }
    v.check_schema(store.schema_gaps());
    let (start, sessions) = scope_ids(conn, scope)?;
    let done = walk_ledgers(&mut v, store.path(), start)?;
    for s in &sessions {
        v.check_session(s, trusted_head)?;
    }
    let mut checked: Vec<&String> = done.iter().collect();
    checked.sort();
    for (id, check, detail) in kura_tlog::sealer::check(&crate::SealLog(conn), checked, keyring)? {
        v.problem("ledger", &id, check, detail);
    }
    if *scope == Scope::All {
        v.check_loose_records()?;
        // The seal log names every sealed ledger as it is, and its hashes are the leaves'.
        for (id, check, detail) in kura_tlog::seallog::check(&crate::SealLog(conn))? {
            v.report.problems.push(Problem {
                kind: "seal_log",
                id,
                check,
                detail,
            });
        }
    }
    if let (Scope::Ledger(_), Some(trusted)) = (scope, trusted_head) {
        v.check_trusted_ancestor(&done, trusted);
    }
    Ok(v.report)
}

/// Redactions whose signature is a trusted person's and whose record hash is the row's:
/// their kept leaves by record id, what to report, and the refused ones with why.
#[allow(clippy::type_complexity)]
fn valid_redactions(
    store: &Store,
    people: &[kura_policy::writ::Issuer],
) -> Result<(
    HashMap<String, String>,
    Vec<RedactedRecord>,
    Vec<(String, String)>,
)> {
    let (mut leaves, mut notes, mut refused) = (HashMap::new(), Vec::new(), Vec::new());
    let conn = store.conn();
    for (id, d) in crate::redact::redactions(store)? {
        let stored: Option<String> = conn
            .query_row(
                "SELECT hash FROM records WHERE record_id = ?1",
                [&id],
                |r| Ok(crate::store::hashcol::to_hex(r.get_ref(0)?)),
            )
            .optional()?;
        let b = &d.redaction.body;
        let content: Option<String> = conn
            .query_row(
                "SELECT content FROM records WHERE record_id = ?1",
                [&id],
                |r| r.get(0),
            )
            .optional()?;
        let tombstone = format!("{{\"redacted\":\"{}\"}}", d.redaction_record);
        // The redaction is history like any statement: a record in a sealed ledger.
        let sealed: bool = conn
            .prepare_cached(
                "SELECT 1 FROM ledger_records m JOIN ledgers l ON l.ledger_id = m.ledger_id
                  WHERE m.record_id = ?1 AND l.state = 'sealed'",
            )?
            .exists([&d.redaction_record])?;
        let why = if b.record_id != id
            || stored.as_deref() != Some(b.record_hash.as_str())
            || d.record_hash != b.record_hash
        {
            Some("the redaction names another record or hash".to_owned())
        } else if content.as_deref() != Some(tombstone.as_str()) {
            Some("the row holds something other than its tombstone".to_owned())
        } else if !sealed {
            Some(format!(
                "its sys.redaction record {} is in no sealed ledger",
                d.redaction_record
            ))
        } else {
            kura_policy::writ::verify_redaction(&d.redaction, people)
                .err()
                .map(|e| format!("{e} (kura verify checks redactions against [writs] issuers)"))
        };
        if let Some(why) = why {
            refused.push((id, why));
            continue;
        }
        notes.push(RedactedRecord {
            record_id: id.clone(),
            record_hash: d.record_hash.clone(),
            by: b.by.clone(),
            redacted_at: b.redacted_at.clone(),
            reason: b.reason.clone(),
            redaction_record: d.redaction_record.clone(),
        });
        leaves.insert(id, d.leaf_hash);
    }
    notes.sort_by(|a, b| a.record_id.cmp(&b.record_id));
    Ok((leaves, notes, refused))
}

/// The ledgers to start from and the sessions to check, for `scope`.
fn scope_ids(conn: &Connection, scope: &Scope) -> Result<(Vec<String>, Vec<String>)> {
    let ids = |sql: &str, arg: Option<String>| -> Result<Vec<String>> {
        let mut stmt = conn.prepare(sql)?;
        let rows = match arg {
            Some(a) => stmt
                .query_map([a], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?,
            None => stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?,
        };
        Ok(rows)
    };
    Ok(match scope {
        Scope::Ledger(id) => (vec![id.to_string()], vec![]),
        Scope::Session(id) => (
            ids(
                "SELECT ledger_id FROM ledgers WHERE session_id = ?1 ORDER BY ledger_id",
                Some(id.to_string()),
            )?,
            vec![id.to_string()],
        ),
        Scope::All => (
            ids("SELECT ledger_id FROM ledgers ORDER BY ledger_id", None)?,
            ids("SELECT session_id FROM sessions ORDER BY session_id", None)?,
        ),
    })
}

/// Walks the ledgers `start` and, through their parents, every ancestor: breadth first, one
/// generation at a time, each generation split over the cores (ledgers are independent).
/// Returns every ledger checked.
fn walk_ledgers(v: &mut Verifier<'_>, path: &Path, start: Vec<String>) -> Result<HashSet<String>> {
    let mut generation: Vec<String> = start;
    let mut done = HashSet::new();
    while !generation.is_empty() {
        let todo: Vec<String> = generation
            .drain(..)
            .filter(|id| done.insert(id.clone()))
            .collect();
        let mut next = Vec::new();
        for parents in check_ledgers(v, path, &todo)? {
            next.extend(parents.into_iter().filter(|p| !done.contains(p)));
        }
        generation = next;
    }
    Ok(done)
}

impl Verifier<'_> {
    /// Reports each trigger or index of Kura's schema the file lacks.
    fn check_schema(&mut self, gaps: &[(String, String)]) {
        for (kind, name) in gaps {
            self.report.problems.push(Problem {
                kind: "schema",
                id: name.clone(),
                check: "schema_object",
                detail: format!(
                    "{kind} {name} of Kura's schema is missing (removed from the file; triggers guard the records' immutability)"
                ),
            });
        }
    }

    /// Records outside every ledger are still content-addressed: checks them too. Every
    /// record Kura stores is in a ledger within a bounded time — a request's instruction
    /// once minato takes it, a plan step's once it starts or its plan ends — so one in
    /// none is reported (`outside_ledgers`): nothing seals
    /// it, and it is never found or packed into a context. Those an earlier release left
    /// in none (listed when the database was upgraded) are counted apart.
    fn check_loose_records(&mut self) -> Result<()> {
        let mut waiting = HashSet::new();
        let mut legacy = HashSet::new();
        for (sql, set) in [
            (
                "SELECT record_id FROM requests WHERE accepted_at IS NULL
                 UNION SELECT instruction FROM plan_steps WHERE state = 'waiting'",
                &mut waiting,
            ),
            ("SELECT record_id FROM loose_legacy", &mut legacy),
        ] {
            let mut stmt = self.conn.prepare(sql)?;
            for id in stmt.query_map([], |r| r.get::<_, String>(0))? {
                set.insert(id?);
            }
        }
        let mut stmt = self.conn.prepare(
            "SELECT record_id, hash, record_type, content, author_id, metadata, created_at FROM records",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let c: Vec<Option<String>> = (0..7)
                .map(|i| match i {
                    1 => r.get_ref(1).map(|v| Some(crate::store::hashcol::to_hex(v))),
                    _ => raw_text(r, i),
                })
                .collect::<rusqlite::Result<_>>()?;
            let s = |i: usize| c[i].as_deref().unwrap_or("");
            if self.seen_records.contains(s(0)) {
                continue;
            }
            let cols = RecordColumns {
                record_id: s(0),
                hash: s(1),
                record_type: s(2),
                content: s(3),
                author_id: s(4),
                metadata: s(5),
                created_at: s(6),
            };
            self.check_record(&cols);
            if legacy.contains(s(0)) {
                self.report.legacy_loose += 1;
            } else if !waiting.contains(s(0)) {
                self.problem(
                    "record",
                    s(0),
                    "outside_ledgers",
                    format!(
                        "a {} record by {} is in no ledger: nothing seals it, so search and contexts leave it out (planted straight into the table, or a writer that did not seal it)",
                        s(2),
                        s(4)
                    ),
                );
            }
        }
        Ok(())
    }

    /// With a ledger scope, the trusted hash must be the ledger's or an ancestor's.
    fn check_trusted_ancestor(&mut self, done: &HashSet<String>, trusted: &str) {
        let found = done.iter().any(|l| {
            self.conn
                .query_row(
                    "SELECT ledger_hash FROM ledgers WHERE ledger_id = ?1",
                    [l],
                    |r| r.get::<_, Option<String>>(0),
                )
                .ok()
                .flatten()
                .is_some_and(|h| h.eq_ignore_ascii_case(trusted))
        });
        if !found {
            self.problem(
                "ledger",
                &done.iter().next().cloned().unwrap_or_default(),
                "trusted_head",
                format!("trusted hash {trusted} is neither this ledger's nor an ancestor's"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Seen;

    #[test]
    fn the_seen_set_never_merges_two_different_id_texts() {
        // Two rows whose ids name the same UUID in different spellings are different
        // records; treating the second as already checked would skip its hashes.
        let lower = "01a2052f-b8e8-720b-9465-11358a644734";
        let mut seen = Seen::default();
        assert!(seen.insert(lower));
        assert!(!seen.insert(lower));
        for other in [
            "01A2052F-B8E8-720B-9465-11358A644734",
            "01a2052fb8e8720b946511358a644734",
            "{01a2052f-b8e8-720b-9465-11358a644734}",
            "not an id",
        ] {
            assert!(!seen.contains(other), "{other}");
            assert!(seen.insert(other), "{other}");
            assert!(seen.contains(other), "{other}");
        }
        let mut more = Seen::default();
        more.insert(lower);
        more.insert("01a2052f-b8e8-720b-9465-11358a644735");
        assert_eq!(seen.merge(more), 1);
    }
}
