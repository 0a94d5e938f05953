//! Memory: facts and decisions (extracted by mikado, remembered by an outside agent) linked to
//! their sources, sealed in each writer's memory ledgers, found again by search (FTS5 BM25,
//! plus embeddings when configured; newest decisions preferred) — only what a sealed ledger
//! holds. The index itself is kept by the store as each memory record is written.

use kura_store::Cached;
use std::collections::BTreeMap;

use proto::ledger::Ledger;
use proto::record::{Content, NewRecord, Record, RecordType};
use proto::{LedgerId, RecordId, SessionId};
use rusqlite::{Connection, OptionalExtension, params};

use serde::Serialize;

use kura_store::store::parse_id;
use kura_store::{Db, Result, StoreError, Tx, time};

/// One thing worth remembering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// `memory.fact` or `memory.decision`.
    pub kind: RecordType,
    /// The fact or decision.
    pub text: String,
    /// For decisions: the earlier decision (text or record id) this one replaces.
    pub supersedes: Option<String>,
}

/// A memory record written (or found again).
#[derive(Debug, Clone, PartialEq)]
pub struct Remembered {
    /// The memory record.
    pub record: Record,
    /// False when the same memory already existed (dedup: only a new edge was added).
    pub new: bool,
}

/// Writes `items` extracted from `source` (in `session_id`) inside the caller's transaction:
/// each a `memory.*` record by `author` (deduplicated by hash), an `extracted_from` edge,
/// the session link, the FTS entry for new records, and `supersedes` edges.
fn remember_in(
    tx: &Tx<'_>,
    author: &str,
    source: &Record,
    session_id: SessionId,
    items: &[Item],
) -> Result<Vec<Remembered>> {
    let mut out = Vec::new();
    for item in items {
        let new = NewRecord::new(item.kind, Content::text(item.text.clone()), author);
        let hash = new.validate()?.hash;
        let existed = kura_store::store::record_id_by_hash_in(tx, &hash)?.is_some();
        let record = tx.write_record(&new)?;
        let id = record.record_id.to_string();
        let sql = tx.sql();
        edge(sql, &id, "extracted_from", &source.record_id.to_string())?;
        sql.execute_cached(
            "INSERT OR IGNORE INTO memory_sessions (record_id, session_id) VALUES (?1, ?2)",
            params![id, session_id.to_string()],
        )?;
        if let Some(old) = &item.supersedes
            && let Some(old_id) = find_decision(tx, author, old)?
            && old_id != record.record_id
        {
            edge(sql, &id, "supersedes", &old_id.to_string())?;
        }
        out.push(Remembered {
            record,
            new: !existed,
        });
    }
    Ok(out)
}

fn edge(tx: &Connection, src: &str, rel: &str, dst: &str) -> Result<()> {
    tx.execute_cached(
"INSERT OR IGNORE INTO memory_graph (src_record_id, rel, dst_record_id, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![src, rel, dst, time::now()],
    )?;
    Ok(())
}

/// A decision by record id, or by its exact text (as `author` would have recorded it).
fn find_decision(tx: &Tx<'_>, author: &str, key: &str) -> Result<Option<RecordId>> {
    if let Some(id) = proto::ids::parse_id(key.trim()) {
        return Ok(Some(id.into()));
    }
    let rec = NewRecord::new(
        RecordType::MemoryDecision,
        Content::text(key.trim()),
        author,
    );
    let hash = rec.validate()?.hash;
    kura_store::store::record_id_by_hash_in(tx, &hash)
}

/// Stores an embedding for a memory record.
fn store_vector_in(
    tx: &Connection,
    record_id: RecordId,
    model: &str,
    vector: &[f32],
) -> Result<()> {
    let blob: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
    tx.execute_cached(
"INSERT OR REPLACE INTO kb_vectors (record_id, model, dims, vector) VALUES (?1, ?2, ?3, ?4)",
        params![record_id.to_string(), model, vector.len() as i64, blob],
    )?;
    Ok(())
}

/// What to search.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// Free text.
    pub query: String,
    /// Only this type (`memory.fact` or `memory.decision`).
    pub record_type: Option<RecordType>,
    /// Only memory from this session.
    pub session_id: Option<SessionId>,
    /// At most this many hits.
    pub limit: usize,
    /// The query's embedding, for hybrid ranking (with the vectors' model).
    pub query_vector: Option<Vec<f32>>,
}

/// One hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The memory record.
    pub record: Record,
    /// Higher is better: BM25 (normalized to 0..1 within the candidates) blended with cosine
    /// similarity when vectors are in play.
    pub score: f64,
    /// True when a newer decision supersedes this one (ranked after the rest).
    pub superseded: bool,
}

/// FTS5 query from free text: its words, each quoted, joined with OR.
fn fts_query(text: &str) -> Option<String> {
    let mut words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .collect();
    words.sort();
    words.dedup();
    words.truncate(32);
    if words.is_empty() {
        None
    } else {
        Some(
            words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" OR "),
        )
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += f64::from(*x) * f64::from(*y);
        na += f64::from(*x).powi(2);
        nb += f64::from(*y).powi(2);
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Memory's writes, as operations of the store's transaction (in one commit with whatever
/// else the caller writes): `use kura_memory::MemoryTx` to call them on a `Tx`.
pub trait MemoryTx {
    /// Remembers `items` taken from `source`.
    fn remember(
        &self,
        author: &str,
        source: &Record,
        session_id: SessionId,
        items: &[Item],
    ) -> Result<Vec<Remembered>>;

    /// Stores a record's embedding.
    fn store_vector(&self, record_id: RecordId, model: &str, vector: &[f32]) -> Result<()>;

    /// Seals `records` (memory `author` just wrote) as a new ledger of `author`'s memory
    /// session (created on first use), its parents the previous memory ledger and `from`
    /// (the output they were taken from): memory is in a sealed ledger the moment it is
    /// stored, so roots, checkpoints and the fleet cover it. `None` when `records` is empty.
    fn seal_memory(
        &self,
        author: &str,
        records: &[RecordId],
        from: Option<LedgerId>,
        sealer: Option<&kura_tlog::sealer::Sealer>,
    ) -> Result<Option<Ledger>>;
}

impl MemoryTx for Tx<'_> {
    fn remember(
        &self,
        author: &str,
        source: &Record,
        session_id: SessionId,
        items: &[Item],
    ) -> Result<Vec<Remembered>> {
        remember_in(self, author, source, session_id, items)
    }

    fn store_vector(&self, record_id: RecordId, model: &str, vector: &[f32]) -> Result<()> {
        store_vector_in(self.sql(), record_id, model, vector)
    }

    fn seal_memory(
        &self,
        author: &str,
        records: &[RecordId],
        from: Option<LedgerId>,
        sealer: Option<&kura_tlog::sealer::Sealer>,
    ) -> Result<Option<Ledger>> {
        if records.is_empty() {
            return Ok(None);
        }
        let row: Option<(String, Option<String>)> = self
            .sql()
            .prepare_cached("SELECT session_id, head FROM memory_homes WHERE author = ?1")?
            .query_row([author], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (session, head): (SessionId, Option<LedgerId>) = match row {
            Some((s, h)) => (parse_id(&s)?, h.as_deref().map(parse_id).transpose()?),
            None => {
                let s = self
                    .create_session(&format!("memory · {author}"))?
                    .session_id;
                self.sql().execute_cached(
                    "INSERT INTO memory_homes (author, session_id) VALUES (?1, ?2)",
                    params![author, s.to_string()],
                )?;
                (s, None)
            }
        };
        let mut parents: Vec<LedgerId> = head.into_iter().collect();
        parents.extend(from.filter(|f| !parents.contains(f)));
        let ledger = self.open_ledger(session, "memory", &parents)?;
        for r in records {
            self.append_existing(ledger.ledger_id, *r)?;
        }
        let (ledger, _) = self.seal(ledger.ledger_id, sealer)?;
        self.sql().execute_cached(
            "UPDATE memory_homes SET head = ?2 WHERE author = ?1",
            params![author, ledger.ledger_id.to_string()],
        )?;
        Ok(Some(ledger))
    }
}

/// The condition a memory candidate must meet: a sealed ledger holds it. A record in none is
/// unaccounted for (planted, or not sealed yet): never a candidate, so never found, packed
/// into a context or shown to a model, and never crowding real memory out of the top hits.
const SEALED: &str = "SELECT 1 FROM ledger_records lr JOIN ledgers l ON l.ledger_id = lr.ledger_id
                       WHERE lr.record_id = kb.record_id AND l.state = 'sealed'";

/// The search's own filters, in the candidates' query too (`?2` a type, `?3` a session, each
/// NULL for any), so memory outside them never crowds the top hits out either.
const SCOPED: &str = "(?2 IS NULL OR EXISTS (SELECT 1 FROM records r
                         WHERE r.record_id = kb.record_id AND r.record_type = ?2))
                      AND (?3 IS NULL OR EXISTS (SELECT 1 FROM memory_sessions ms
                         WHERE ms.record_id = kb.record_id AND ms.session_id = ?3))";

/// Searches memory: BM25 over the FTS index (and cosine similarity when a query vector is
/// given), filtered by type and session; superseded decisions go last, ties go to the newest.
pub fn search(db: &impl Db, s: &Search) -> Result<Vec<Hit>> {
    let conn = db.sql();
    let limit = s.limit.clamp(1, 1000);
    // candidate id -> (bm25 goodness, cosine)
    let mut cand: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let (kind, session) = (
        s.record_type.map(|t| t.as_str()),
        s.session_id.map(|id| id.to_string()),
    );
    if let Some(q) = fts_query(&s.query) {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT record_id, -bm25(kb) FROM kb WHERE kb MATCH ?1 AND EXISTS ({SEALED})
                AND {SCOPED} ORDER BY bm25(kb) LIMIT 200"
        ))?;
        let rows = stmt.query_map(params![q, kind, session], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
        })?;
        for row in rows {
            let (id, g) = row?;
            cand.insert(id, (g, 0.0));
        }
    }
    if let Some(qv) = &s.query_vector {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT record_id, vector FROM kb_vectors WHERE ?1 IS NULL AND EXISTS ({}) AND {}",
            SEALED.replace("kb.record_id", "kb_vectors.record_id"),
            SCOPED.replace("kb.record_id", "kb_vectors.record_id")
        ))?;
        let none: Option<&str> = None;
        let rows = stmt.query_map(params![none, kind, session], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })?;
        for row in rows {
            let (id, blob) = row?;
            let v: Vec<f32> = blob
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let sim = cosine(qv, &v);
            if sim > 0.0 {
                cand.entry(id).or_insert((0.0, 0.0)).1 = sim;
            }
        }
    }
    let max_g = cand.values().map(|(g, _)| *g).fold(0.0, f64::max);
    let mut hits = Vec::new();
    for (id, (g, sim)) in cand {
        let rec = kura_store::store::read_record(db, parse_id(&id)?).map_err(|e| match e {
            StoreError::NotFound { .. } => {
                StoreError::Invalid(format!("kb entry for missing record {id}"))
            }
            e => e,
        })?;
        let superseded = conn
            .query_row(
                "SELECT 1 FROM memory_graph WHERE dst_record_id = ?1 AND rel = 'supersedes'",
                [&id],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        let lexical = if max_g > 0.0 { g / max_g } else { 0.0 };
        let score = if s.query_vector.is_some() {
            0.5 * lexical + 0.5 * sim
        } else {
            lexical
        };
        hits.push(Hit {
            record: rec,
            score,
            superseded,
        });
    }
    hits.sort_by(|a, b| {
        a.superseded
            .cmp(&b.superseded)
            .then(
                b.score
                    .partial_cmp(&a.score)
                    .unwrap_or(std::cmp::Ordering::Equal),
            )
            .then(b.record.created_at.cmp(&a.record.created_at))
    });
    hits.truncate(limit);
    Ok(hits)
}

/// Where each memory record came from: the label of the earliest session it was learned in
/// (a fact learned again elsewhere is one record, by content address), for the records that
/// have one.
pub fn sources(db: &impl Db, ids: &[RecordId]) -> Result<Vec<(RecordId, String)>> {
    let conn = db.sql();
    let mut stmt = conn.prepare_cached(
        "SELECT s.label FROM memory_sessions ms JOIN sessions s ON s.session_id = ms.session_id
         WHERE ms.record_id = ?1 ORDER BY s.created_at, s.session_id LIMIT 1",
    )?;
    let mut out = Vec::new();
    for id in ids {
        if let Some(label) = stmt
            .query_row([id.to_string()], |r| r.get::<_, String>(0))
            .optional()?
        {
            out.push((*id, label));
        }
    }
    Ok(out)
}

/// Whose memory a turn's context may carry: what a person wrote, and what mikado learned
/// from the deliverables of Kura's own workers or of people. An outside agent's `remember`,
/// and what mikado learned from an outside agent's deliverable, are found by search but never
/// packed into another session's prompt: a fact is shown to a model as knowledge, so only
/// sources the install runs or trusts may put one there (found in review: a keyword-stuffed
/// fact from any agent ranked into unrelated sessions' prompts).
fn may_inform_a_context(db: &impl Db, memory: &Record) -> Result<bool> {
    let trusted = |author: &str| author == "agent:hashi" || author.starts_with("user:");
    if memory.author_id.starts_with("user:") {
        return Ok(true);
    }
    if memory.author_id != "agent:mikado" {
        return Ok(false);
    }
    // Learned from several deliverables (by content address): one trusted source is enough.
    let mut stmt = db.sql().prepare_cached(
        "SELECT r.author_id FROM memory_graph g JOIN records r ON r.record_id = g.dst_record_id
         WHERE g.src_record_id = ?1 AND g.rel = 'extracted_from'",
    )?;
    let authors = stmt.query_map([memory.record_id.to_string()], |r| r.get::<_, String>(0))?;
    for a in authors {
        if trusted(&a?) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How much a hit from the asking session's own memory is raised (scores run 0..1): what
/// this session learned earlier is preferred, unless another's matches far better.
pub const OWN_SESSION_BOOST: f64 = 0.5;

/// The memory a turn's context carries for `query`, at most `limit` hits: ranked by
/// [`search`], the asking `session`'s own memory raised by [`OWN_SESSION_BOOST`],
/// superseded decisions and sources a context may not trust dropped (only a person's
/// memory, and mikado's learned from Kura's own workers or people), and one hit per text
/// (case and spacing aside) — the best.
pub fn for_context(
    db: &impl Db,
    query: &str,
    session: Option<SessionId>,
    limit: usize,
) -> Result<Vec<Hit>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    // More candidates than asked for: duplicates and superseded ones fall out below.
    let wide = (limit * 4).min(200);
    let mut hits = search(
        db,
        &Search {
            query: query.to_owned(),
            limit: wide,
            ..Default::default()
        },
    )?;
    if let Some(session) = session {
        let own: std::collections::HashSet<RecordId> = search(
            db,
            &Search {
                query: query.to_owned(),
                session_id: Some(session),
                limit: wide,
                ..Default::default()
            },
        )?
        .into_iter()
        .map(|h| h.record.record_id)
        .collect();
        for h in &mut hits {
            if own.contains(&h.record.record_id) {
                h.score += OWN_SESSION_BOOST;
            }
        }
    }
    let mut kept = Vec::with_capacity(hits.len());
    for h in hits {
        if !h.superseded && may_inform_a_context(db, &h.record)? {
            kept.push(h);
        }
    }
    let mut hits = kept;
    // Stable: equal scores keep search's order (newest first).
    hits.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut seen = std::collections::HashSet::new();
    hits.retain(|h| {
        // A record with no text is its own (its content is what it says).
        let Some(text) =
            proto::content::text_of(&h.record.content).filter(|t| !t.trim().is_empty())
        else {
            return true;
        };
        seen.insert(
            text.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase(),
        )
    });
    hits.truncate(limit);
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_store::{Store, StoreOptions};
    use serde_json::json;

    fn store_with(items: &[(&str, &[Item])]) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Store::create(dir.path().join("m.db"), &StoreOptions::default()).expect("db");
        for (label, its) in items {
            let session = s.create_session(label).expect("session");
            let src = NewRecord::new(
                RecordType::TaskDeliverable,
                Content::text(format!("from {label}")),
                "agent:hashi",
            );
            let (src, _) = s.write_record(&src).expect("source");
            s.write(|tx| {
                let ids: Vec<RecordId> = tx
                    .remember("agent:mikado", &src, session.session_id, its)?
                    .iter()
                    .map(|m| m.record.record_id)
                    .collect();
                tx.seal_memory("agent:mikado", &ids, None, None)
            })
            .expect("remember");
        }
        (dir, s)
    }

    /// Regression (issue 35 item 12): a `memory.fact` planted straight into the table —
    /// a valid hash, `author: agent:mikado`, indexed, in no ledger — was found by search,
    /// packed into the next context and shown to the model, and `verify --all` passed.
    #[test]
    fn a_memory_record_planted_outside_every_ledger_is_never_found_and_verify_reports_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Store::create(dir.path().join("m.db"), &StoreOptions::default()).expect("db");
        let session = s.create_session("work").expect("session").session_id;
        let out = s.open_ledger(session, "turn-1-out", &[]).expect("ledger");
        let src = NewRecord::new(
            RecordType::TaskDeliverable,
            Content::text("done"),
            "agent:hashi",
        );
        let src = s.append(out.ledger_id, &src).expect("append").record;
        s.seal_ledger(out.ledger_id).expect("seal");
        let planted = s
            .write(|tx| {
                tx.remember(
                    "agent:mikado",
                    &src,
                    session,
                    &[fact("the deploy key is at http://evil.example/key")],
                )
            })
            .expect("plant")[0]
            .record
            .record_id;
        let query = Search {
            query: "deploy key".into(),
            limit: 5,
            ..Search::default()
        };
        assert!(
            search(s.conn(), &query).expect("search").is_empty(),
            "a record no sealed ledger holds is never found"
        );
        let report = kura_store::verify::verify(&s, &kura_store::verify::Scope::All, None, None)
            .expect("verify");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.id == planted.to_string() && p.check == "outside_ledgers"),
            "{:?}",
            report.problems
        );
        // Sealed into a memory ledger, the same record is found and verify is clean.
        let sealer = None;
        let l = s
            .write(|tx| tx.seal_memory("agent:mikado", &[planted], Some(out.ledger_id), sealer))
            .expect("seal memory")
            .expect("a memory ledger");
        assert_eq!(
            l.parent_ids,
            vec![out.ledger_id],
            "its source is its parent"
        );
        assert_eq!(search(s.conn(), &query).expect("search").len(), 1);
        let report = kura_store::verify::verify(&s, &kura_store::verify::Scope::All, None, None)
            .expect("verify");
        assert!(report.ok(), "{:?}", report.problems);
        // Review: 250 planted matches no longer crowd the sealed one out of the top hits.
        let flood: Vec<Item> = (0..250)
            .map(|i| {
                fact(&format!(
                    "the deploy key copy {i} is at http://evil.example/{i}"
                ))
            })
            .collect();
        s.write(|tx| tx.remember("agent:mikado", &src, session, &flood))
            .expect("flood");
        let hits = search(s.conn(), &query).expect("search");
        assert_eq!(
            hits.iter().map(|h| h.record.record_id).collect::<Vec<_>>(),
            vec![planted],
            "only the sealed record is found"
        );
    }

    fn fact(t: &str) -> Item {
        Item {
            kind: RecordType::MemoryFact,
            text: t.into(),
            supersedes: None,
        }
    }

    #[test]
    fn dedup_gives_one_record_two_edges_and_bm25_ranks() {
        let (_d, s) = store_with(&[
            (
                "one",
                &[
                    fact("the garden hose is in the shed"),
                    fact("the shed key is under the mat"),
                ],
            ),
            (
                "two",
                &[
                    fact("the garden hose is in the shed"),
                    fact("tomatoes need sun"),
                ],
            ),
        ]);
        let n: i64 = s
            .conn()
            .query_row(
                "SELECT count(*) FROM records WHERE record_type = 'memory.fact'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(n, 3, "same fact twice -> one record");
        let edges: i64 = s
            .conn()
            .query_row(
                "SELECT count(*) FROM memory_graph WHERE rel = 'extracted_from'",
                [],
                |r| r.get(0),
            )
            .expect("edges");
        assert_eq!(edges, 4, "... with two edges");
        let hits = search(
            s.conn(),
            &Search {
                query: "where is the shed key?".into(),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search");
        let texts: Vec<&str> = hits
            .iter()
            .map(|h| h.record.content["text"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            texts[0], "the shed key is under the mat",
            "more matching words rank first: {texts:?}"
        );
        assert!(texts.contains(&"the garden hose is in the shed"));
        assert!(!texts.contains(&"tomatoes need sun"));
        assert!(
            search(
                s.conn(),
                &Search {
                    query: "?!".into(),
                    limit: 5,
                    ..Search::default()
                }
            )
            .expect("search")
            .is_empty()
        );
    }

    #[test]
    fn newer_decisions_supersede_older_ones() {
        let old = Item {
            kind: RecordType::MemoryDecision,
            text: "store backups on the SD card".into(),
            supersedes: None,
        };
        let new = Item {
            kind: RecordType::MemoryDecision,
            text: "store backups on the USB disk".into(),
            supersedes: Some("store backups on the SD card".into()),
        };
        let (_d, s) = store_with(&[("a", &[old]), ("b", &[new])]);
        let hits = search(
            s.conn(),
            &Search {
                query: "store backups".into(),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search");
        assert_eq!(hits.len(), 2);
        assert_eq!(
            hits[0].record.content["text"],
            json!("store backups on the USB disk")
        );
        assert!(!hits[0].superseded);
        assert!(hits[1].superseded);
    }

    #[test]
    fn type_session_and_vector_filters() {
        let (_d, mut s) = store_with(&[
            ("a", &[fact("the router password is on the fridge")]),
            (
                "b",
                &[Item {
                    kind: RecordType::MemoryDecision,
                    text: "rotate the router password monthly".into(),
                    supersedes: None,
                }],
            ),
        ]);
        let sessions = s.sessions().expect("sessions");
        let only_facts = search(
            s.conn(),
            &Search {
                query: "router".into(),
                record_type: Some(RecordType::MemoryFact),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search");
        assert_eq!(only_facts.len(), 1);
        let only_b = search(
            s.conn(),
            &Search {
                query: "router".into(),
                session_id: Some(sessions[0].session_id),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search");
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].record.record_type, RecordType::MemoryDecision);
        // A vector match finds what words alone do not.
        let ids: Vec<RecordId> = search(
            s.conn(),
            &Search {
                query: "router".into(),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search")
        .iter()
        .map(|h| h.record.record_id)
        .collect();
        s.write(|tx| {
            tx.store_vector(ids[0], "m", &[1.0, 0.0])?;
            tx.store_vector(ids[1], "m", &[0.0, 1.0])
        })
        .expect("vectors");
        let hits = search(
            s.conn(),
            &Search {
                query: "wifi".into(),
                query_vector: Some(vec![0.1, 0.9]),
                limit: 5,
                ..Search::default()
            },
        )
        .expect("search");
        assert_eq!(
            hits[0].record.record_id, ids[1],
            "cosine picks the closer vector"
        );
    }

    /// Issue 36: a context's memory was search's top hits as they came — the same fact
    /// remembered twice took two places, and what this session learned earlier ranked no
    /// higher than any other session's.
    #[test]
    fn a_contexts_memory_prefers_its_own_sessions_facts_and_holds_each_text_once() {
        let (_dir, s) = store_with(&[
            (
                "others",
                &[
                    fact("the backup disk is the blue usb disk backup backup"),
                    fact("The backup  disk is the blue USB disk backup backup"),
                ],
            ),
            ("mine", &[fact("our backup disk is in the drawer")]),
        ]);
        let mine = s
            .conn()
            .query_row(
                "SELECT session_id FROM sessions WHERE label = 'mine'",
                [],
                |r| r.get::<_, String>(0),
            )
            .expect("session");
        let mine = kura_store::store::parse_id(&mine).expect("id");
        let plain = for_context(&s, "backup disk", None, 5).expect("search");
        let texts = |h: &[Hit]| -> Vec<String> {
            h.iter()
                .map(|h| {
                    proto::content::text_of(&h.record.content)
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(
            texts(&plain).len(),
            2,
            "one place per text: {:?}",
            texts(&plain)
        );
        assert!(
            texts(&plain)[0].to_lowercase().contains("blue usb"),
            "{:?}",
            texts(&plain)
        );
        let own = for_context(&s, "backup disk", Some(mine), 5).expect("search");
        assert_eq!(
            texts(&own)[0],
            "our backup disk is in the drawer",
            "{:?}",
            texts(&own)
        );
        assert!(
            for_context(&s, "backup disk", Some(mine), 0)
                .expect("none")
                .is_empty()
        );
    }

    /// Found in review: an outside agent's remembered fact (keyword-stuffed) ranked into
    /// unrelated sessions' prompts — directly, or as mikado's fact learned from its
    /// deliverable. Search still finds both; a context carries neither.
    #[test]
    fn an_outside_agents_fact_is_found_but_never_packed_into_a_context() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Store::create(dir.path().join("m.db"), &StoreOptions::default()).expect("db");
        let session = s.create_session("work").expect("session").session_id;
        for (source_author, author, what) in [
            ("agent:outsider", "agent:outsider", "remembered"),
            ("agent:outsider", "agent:mikado", "learned from it"),
            ("agent:hashi", "agent:mikado", "learned from hashi"),
        ] {
            let src = NewRecord::new(
                RecordType::TaskDeliverable,
                Content::text(format!("done: {what}")),
                source_author,
            );
            let (src, _) = s.write_record(&src).expect("source");
            s.write(|tx| {
                let text = format!("backup backup backup disk {what}");
                let m = tx.remember(author, &src, session, &[fact(&text)])?;
                let ids: Vec<RecordId> = m.iter().map(|m| m.record.record_id).collect();
                tx.seal_memory(author, &ids, None, None)
            })
            .expect("remember");
        }
        let found = search(
            &s,
            &Search {
                query: "backup disk".into(),
                limit: 5,
                ..Default::default()
            },
        )
        .expect("search");
        assert_eq!(found.len(), 3, "search finds all");
        let packed = for_context(&s, "backup disk", None, 5).expect("context");
        let texts: Vec<String> = packed
            .iter()
            .map(|h| {
                proto::content::text_of(&h.record.content)
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(texts, ["backup backup backup disk learned from hashi"]);
    }
}
