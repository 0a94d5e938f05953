//! Storage figures — durable append, group commit, scaling, verify — each measured beside a
//! bare SQLite or SHA-256 baseline doing the same work on the same bytes in the same run.

use proto::LedgerId;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proto::record::{Content, NewRecord, RecordType};
use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};

use super::{Figure, Sizes};
use kura_store::verify::{Scope, verify};
use kura_store::{Store, StoreOptions, Synchronous};

/// The columns of one record as stored, precomputed so the baseline does no hashing.
struct Row {
    /// `record_id`.
    id: String,
    /// `hash`, its 32 bytes as Kura stores them.
    hash: [u8; 32],
    /// `content`, canonical JSON.
    content: String,
    /// The RFC 6962 leaf hash a ledger member row carries (hex; precomputed, any 32 bytes).
    leaf: String,
}

/// `n` distinct records of about 200 bytes (an agent thought), numbered from `start`.
fn records(start: usize, n: usize) -> Vec<NewRecord> {
    (start..start + n)
        .map(|i| {
            NewRecord::new(
                RecordType::AgentThought,
                Content::text(format!(
                    "step {i}: read the notes, compared them with yesterday's list and decided \
                     which two items still need a reply before the evening sync runs"
                )),
                "agent:bench",
            )
        })
        .collect()
}

fn rows(records: &[NewRecord]) -> Vec<Row> {
    records
        .iter()
        .filter_map(|r| r.validate().ok())
        .filter_map(|p| {
            let id = proto::new_id().to_string();
            Some(Row {
                leaf: proto::canonical::to_hex(&Sha256::digest(id.as_bytes())),
                id,
                hash: kura_store::store::hashcol::to_column(&p.hash)?,
                content: p.content,
            })
        })
        .collect()
}

/// A scratch Kura database at `dir/name` with one session and one open ledger.
pub(crate) fn kura_db(
    dir: &Path,
    name: &str,
    sync: Synchronous,
) -> anyhow::Result<(Store, LedgerId)> {
    let path = dir.join(name);
    remove_db(&path);
    let mut store = Store::create(
        &path,
        &StoreOptions {
            synchronous: sync,
            ..StoreOptions::default()
        },
    )?;
    let session = store.create_session("bench")?;
    let ledger = store.open_ledger(session.session_id, "bench", &[])?;
    Ok((store, ledger.ledger_id))
}

/// The baseline: a plain table with the same text columns, the same pragmas, no indexes —
/// or, with `unique_hash`, only the one index content addressing cannot do without.
fn bare_db(dir: &Path, name: &str, unique_hash: bool) -> anyhow::Result<Connection> {
    let path = dir.join(name);
    remove_db(&path);
    let conn = Connection::open(&path)?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(
        None,
        "cache_size",
        -i64::from(StoreOptions::default().cache_kib),
    )?;
    conn.execute_batch(
        "CREATE TABLE bare (record_id TEXT, hash BLOB, record_type TEXT, content TEXT,
                            author_id TEXT, metadata TEXT, created_at TEXT)",
    )?;
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        StoreOptions::default().wal_autocheckpoint_pages,
    )?;
    if unique_hash {
        conn.execute_batch("CREATE UNIQUE INDEX bare_hash ON bare(hash)")?;
    }
    Ok(conn)
}

/// Deletes a database file and its WAL/SHM companions.
pub(super) fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

fn bare_insert(tx: &Connection, r: &Row) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT INTO bare VALUES (?1, ?2, 'agent.thought', ?3, 'agent:bench', '{}', '2026-01-01T00:00:00.000000Z')")?
        .execute(params![r.id, &r.hash[..], r.content])?;
    Ok(())
}

pub(crate) fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// The median of a few rounds, so one hiccup of a shared machine does not decide a figure.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Figure 1: One record per transaction, `synchronous=FULL`.
pub fn durable_append(dir: &Path, sizes: &Sizes) -> anyhow::Result<Figure> {
    let n = sizes.durable;
    let (mut kura, ledger) = kura_db(dir, "durable-kura.db", Synchronous::Full)?;
    let mut bare = bare_db(dir, "durable-bare.db", false)?;
    let (mut k, mut b) = (Vec::new(), Vec::new());
    // Alternate rounds so both see the same disk weather.
    for round in 0..3 {
        let recs = records(round * n, n);
        let base = rows(&recs);
        let t = Instant::now();
        for r in &base {
            let tx = bare.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            bare_insert(&tx, r)?;
            tx.commit()?;
        }
        b.push(rate(n, t.elapsed()));
        let t = Instant::now();
        for r in &recs {
            kura.append(ledger, r)?;
        }
        k.push(rate(n, t.elapsed()));
    }
    Ok(Figure::ratio(
        "durable append (1 record per transaction, synchronous=FULL)",
        "records/s",
        median(k),
        "bare rusqlite INSERT of the same bytes, same pragmas",
        median(b),
        "ratio >= 0.7",
        |_, ratio| ratio >= 0.7,
    ))
}

/// Appends `recs` to `ledger` in batches of `batch` per transaction; returns records/s.
fn group_kura(
    store: &mut Store,
    ledger: LedgerId,
    recs: &[NewRecord],
    batch: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    for chunk in recs.chunks(batch.max(1)) {
        store.append_batch(ledger, chunk)?;
    }
    Ok(rate(recs.len(), t.elapsed()))
}

/// Bare INSERTs of `base` in batches of `batch` per transaction; returns records/s.
fn group_bare(bare: &mut Connection, base: &[Row], batch: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    for chunk in base.chunks(batch.max(1)) {
        let tx = bare.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for r in chunk {
            bare_insert(&tx, r)?;
        }
        tx.commit()?;
    }
    Ok(rate(base.len(), t.elapsed()))
}

/// The floor with Kura's own schema: a database made by `Store::create` (every table,
/// index and trigger Kura has) with one session and one open ledger, opened bare with the
/// store's pragmas. Returns the connection and the ledger's id.
fn kura_floor_db(dir: &Path, name: &str) -> anyhow::Result<(Connection, String)> {
    let (store, ledger) = kura_db(dir, name, Synchronous::Full)?;
    let path = store.path().to_path_buf();
    drop(store);
    let conn = Connection::open(&path)?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    let defaults = StoreOptions::default();
    conn.pragma_update(None, "cache_size", -i64::from(defaults.cache_kib))?;
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        defaults.wal_autocheckpoint_pages,
    )?;
    Ok((conn, ledger.to_string()))
}

/// The rows Kura writes for `base` appended to `ledger` in batches of `batch`, by bare SQL:
/// the ledger's count read once per batch, then per record its row (deduplicated by hash),
/// its member row and the ledger's count — no hashing, no JSON, no Rust types between.
/// Returns records/s.
fn group_floor(
    conn: &mut Connection,
    ledger: &str,
    base: &[Row],
    batch: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    for chunk in base.chunks(batch.max(1)) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut position: i64 = tx
            .prepare_cached("SELECT record_count FROM ledgers WHERE ledger_id = ?1")?
            .query_row([ledger], |r| r.get(0))?;
        for r in chunk {
            tx.prepare_cached(
                "INSERT INTO records (record_id, hash, record_type, content, author_id, metadata, created_at)
                 VALUES (?1, ?2, 'agent.thought', ?3, 'agent:bench', '{}', '2026-01-01T00:00:00.000000Z')
                 ON CONFLICT (hash) DO NOTHING",
            )?
            .execute(params![r.id, &r.hash[..], r.content])?;
            tx.prepare_cached(
                "INSERT INTO ledger_records (ledger_id, position, record_id, leaf_hash) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![ledger, position, r.id, r.leaf])?;
            position += 1;
            tx.prepare_cached("UPDATE ledgers SET record_count = ?2 WHERE ledger_id = ?1")?
                .execute(params![ledger, position])?;
        }
        tx.commit()?;
    }
    Ok(rate(base.len(), t.elapsed()))
}

/// Figure 2: Many appends per transaction, as hashi and mikado do under load, held to the
/// floor with Kura's own schema: the same rows into the same tables, indexes and triggers by
/// bare SQL in the same batches, so the ratio is what Kura's own work (hashing, canonical
/// JSON, validation, the Rust between) costs. Beside it as context: a bare table, and one
/// with only the unique hash index content addressing (dedup) cannot do without.
pub fn group_commit(dir: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Figure>> {
    let n = sizes.group;
    let (mut kura, ledger) = kura_db(dir, "group-kura.db", Synchronous::Full)?;
    let (mut floor, floor_ledger) = kura_floor_db(dir, "group-floor.db")?;
    let mut bare = bare_db(dir, "group-bare.db", false)?;
    let mut hashed = bare_db(dir, "group-bare-hash.db", true)?;
    let (mut k, mut f, mut b, mut h) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        let recs = records(round * n, n);
        let base = rows(&recs);
        b.push(group_bare(&mut bare, &base, sizes.batch)?);
        h.push(group_bare(&mut hashed, &base, sizes.batch)?);
        f.push(group_floor(&mut floor, &floor_ledger, &base, sizes.batch)?);
        k.push(group_kura(&mut kura, ledger, &recs, sizes.batch)?);
    }
    let k = median(k);
    let name = format!("group commit ({} appends per transaction)", sizes.batch);
    Ok(vec![
        Figure::ratio(
            &name,
            "records/s",
            k,
            "the same rows into Kura's own tables, indexes and triggers by bare SQL, same batches",
            median(f),
            "ratio >= 0.8",
            |_, ratio| ratio >= 0.8,
        ),
        Figure::ratio(
            &format!("{name}, against the content-addressing floor"),
            "records/s",
            k,
            "the same bare INSERTs into a table with a UNIQUE index on the hash",
            median(h),
            "- (context)",
            |_, _| true,
        ),
        Figure::ratio(
            &format!("{name}, against a bare table"),
            "records/s",
            k,
            "bare rusqlite INSERTs, same batches, same pragmas",
            median(b),
            "- (context)",
            |_, _| true,
        ),
    ])
}

/// Durable single-record appends of `recs` (one transaction each); returns records/s.
fn durable_kura(store: &mut Store, ledger: LedgerId, recs: &[NewRecord]) -> anyhow::Result<f64> {
    let t = Instant::now();
    for r in recs {
        store.append(ledger, r)?;
    }
    Ok(rate(recs.len(), t.elapsed()))
}

/// Figure 3: the append rate with many records already stored vs with few — durable single
/// appends (what hashi and minato do for every step) and group commit.
pub fn scaling(dir: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Figure>> {
    let probe = sizes.scale_probe;
    let durable_probe = sizes.durable;
    let (mut kura, ledger) = kura_db(dir, "scale-kura.db", Synchronous::Full)?;
    let mut stored = 0;
    let fill = |kura: &mut Store, upto: usize, stored: &mut usize| -> anyhow::Result<()> {
        while *stored < upto {
            let n = (upto - *stored).min(50_000);
            group_kura(kura, ledger, &records(*stored, n), sizes.batch)?;
            *stored += n;
        }
        Ok(())
    };
    fill(&mut kura, sizes.scale_small, &mut stored)?;
    let small_durable = durable_kura(&mut kura, ledger, &records(30_000_000, durable_probe))?;
    let small = group_kura(&mut kura, ledger, &records(10_000_000, probe), sizes.batch)?;
    stored += probe + durable_probe;
    fill(&mut kura, sizes.scale_big, &mut stored)?;
    let big_durable = durable_kura(&mut kura, ledger, &records(40_000_000, durable_probe))?;
    let big = group_kura(&mut kura, ledger, &records(20_000_000, probe), sizes.batch)?;
    drop(kura);
    // The content-addressing floor grown the same way: one random-keyed UNIQUE index, so a
    // batch dirties about one index page per row once the index outgrows the batch.
    let mut hashed = bare_db(dir, "scale-bare-hash.db", true)?;
    let fill_bare = |bare: &mut Connection, from: usize, upto: usize| -> anyhow::Result<()> {
        let mut at = from;
        while at < upto {
            let n = (upto - at).min(50_000);
            group_bare(bare, &rows(&records(at, n)), sizes.batch)?;
            at += n;
        }
        Ok(())
    };
    fill_bare(&mut hashed, 0, sizes.scale_small)?;
    let floor_small = group_bare(&mut hashed, &rows(&records(10_000_000, probe)), sizes.batch)?;
    fill_bare(&mut hashed, sizes.scale_small + probe, sizes.scale_big)?;
    let floor_big = group_bare(&mut hashed, &rows(&records(20_000_000, probe)), sizes.batch)?;
    drop(hashed);
    remove_db(&dir.join("scale-bare-hash.db"));
    let (big_n, small_n) = (thousands(sizes.scale_big), thousands(sizes.scale_small));
    // Growth costs every content-addressed store: a random-keyed index outgrows the cache.
    // Kura is held to losing no more than the one-index floor loses, measured here.
    let floor_scaling = floor_big / floor_small.max(1e-9);
    Ok(vec![
        Figure::ratio(
            &format!("durable append with {big_n} records stored (1 per transaction)"),
            "records/s",
            big_durable,
            &format!("the same with {small_n} records stored"),
            small_durable,
            "ratio >= 0.8",
            |_, ratio| ratio >= 0.8,
        ),
        Figure::ratio(
            &format!("group commit with {big_n} records stored"),
            "records/s",
            big,
            &format!("the same with {small_n} records stored"),
            small,
            &format!("ratio >= the floor's own scaling below ({floor_scaling:.2})"),
            move |_, ratio| ratio >= floor_scaling,
        ),
        Figure::ratio(
            &format!(
                "the content-addressing floor (bare INSERTs, UNIQUE hash index) with {big_n} rows stored, same batches"
            ),
            "records/s",
            floor_big,
            &format!("the same with {small_n} rows stored"),
            floor_small,
            "- (context: what group commit's scaling is held to)",
            |_, _| true,
        ),
    ])
}

/// Figure 4: `verify` of a session of many records, every column read from SQLite, vs reading the
/// same columns and SHA-256 over them once.
pub fn verify_rate(dir: &Path, sizes: &Sizes) -> anyhow::Result<Figure> {
    let n = sizes.verify;
    let (mut store, first) = kura_db(dir, "verify-kura.db", Synchronous::Normal)?;
    let session = store.read_ledger(first)?.session_id;
    // Ledgers of 1 000 records, each sealed and chained to the one before.
    let mut ledger = first;
    let mut done = 0;
    while done < n {
        let k = (n - done).min(1_000);
        store.append_batch(ledger, &records(done, k))?;
        done += k;
        store.seal_ledger(ledger)?;
        if done < n {
            ledger = store.open_ledger(session, "bench", &[ledger])?.ledger_id;
        }
    }
    let (mut k, mut b) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let mut digest = [0u8; 32];
        let mut count = 0;
        let mut stmt = store.conn().prepare(
            "SELECT r.record_id, r.hash, r.record_type, r.content, r.author_id, r.metadata,
                    r.created_at
             FROM ledger_records m JOIN records r ON r.record_id = m.record_id",
        )?;
        let mut q = stmt.query([])?;
        while let Some(row) = q.next()? {
            let mut h = Sha256::new();
            for i in 0..7 {
                if let rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) =
                    row.get_ref(i)?
                {
                    h.update(t);
                }
            }
            let d: [u8; 32] = h.finalize().into();
            digest[0] ^= d[0];
            count += 1;
        }
        std::hint::black_box(digest);
        b.push(rate(count, t.elapsed()));
        let t = Instant::now();
        let report = verify(&store, &Scope::Session(session), None, None)?;
        if !report.ok() {
            anyhow::bail!("verify of the bench session failed: {:?}", report.problems);
        }
        k.push(rate(n, t.elapsed()));
    }
    Ok(Figure::ratio(
        &format!("verify a session of {} records", thousands(n)),
        "records/s",
        median(k),
        "read the same columns from SQLite and SHA-256 them once",
        median(b),
        ">= 500 000 records/s",
        |v, _| v >= 500_000.0,
    ))
}

/// `1000000` → `1 000 000`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Bytes this process has caused to be written to the storage device (`/proc/self/io`),
/// or `None` where the kernel does not account them.
fn device_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/io")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Device bytes per record of `write`, checkpoint included (a WAL page is written twice:
/// to the WAL, then into the database), so both sides pay what an SD card sees.
fn bytes_per_record(
    conn: &Connection,
    n: usize,
    write: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    let before = device_bytes().ok_or_else(|| anyhow::anyhow!("no /proc/self/io"))?;
    write()?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    let after = device_bytes().ok_or_else(|| anyhow::anyhow!("no /proc/self/io"))?;
    Ok(after.saturating_sub(before) as f64 / n.max(1) as f64)
}

/// Figure 6: bytes written to the device per record (SD-card wear), one record per durable
/// commit and in group commits, beside a bare table with the content-addressing index
/// receiving the same bytes the same way. Kura writes more: four indexes on records (hash,
/// type, author, time), the ledger membership and its index, the ledger's count.
pub fn device_writes(dir: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Figure>> {
    // A kernel without I/O accounting has nothing to measure with.
    if device_bytes().is_none() {
        return Ok(Vec::new());
    }
    let (n, group) = (sizes.durable, sizes.group.min(20_000));
    let recs = records(50_000_000, n.max(group));
    let size = rows(&recs[..1])
        .first()
        .map(|r| r.content.len() + r.hash.len() + r.id.len() + 60)
        .unwrap_or(0);
    let base = rows(&recs);
    // Each side on its own fresh database; a second connection runs the checkpoints.
    let (mut kura, ledger) = kura_db(dir, "wear-kura.db", Synchronous::Full)?;
    let kura_probe = Connection::open(kura.path())?;
    let mut bare = bare_db(dir, "wear-bare.db", true)?;
    let bare_probe = Connection::open(dir.join("wear-bare.db"))?;
    let k_durable = bytes_per_record(&kura_probe, n, || {
        durable_kura(&mut kura, ledger, &recs[..n]).map(drop)
    })?;
    let b_durable = bytes_per_record(&bare_probe, n, || {
        for r in &base[..n] {
            let tx = bare.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            bare_insert(&tx, r)?;
            tx.commit()?;
        }
        Ok(())
    })?;
    let more = records(60_000_000, group);
    let k_group = bytes_per_record(&kura_probe, group, || {
        group_kura(&mut kura, ledger, &more, sizes.batch).map(drop)
    })?;
    let b_group = bytes_per_record(&bare_probe, group, || {
        group_bare(&mut bare, &rows(&more), sizes.batch).map(drop)
    })?;
    Ok(vec![
        Figure::ratio(
            &format!("bytes written to the device per ~{size}-byte record, 1 per durable commit"),
            "bytes",
            k_durable,
            "bare rusqlite INSERT with the UNIQUE hash index, same commits",
            b_durable,
            "ratio <= 4 (fewer bytes is better)",
            |_, ratio| ratio <= 4.0,
        ),
        Figure::ratio(
            &format!(
                "bytes written to the device per ~{size}-byte record, {} per commit",
                sizes.batch
            ),
            "bytes",
            k_group,
            "bare rusqlite INSERTs with the UNIQUE hash index, same batches",
            b_group,
            "ratio <= 4 (fewer bytes is better)",
            |_, ratio| ratio <= 4.0,
        ),
    ])
}
