//! The SQLite record/ledger store: opening, pragmas and migrations; operations live in submodules.

pub mod hashcol;
pub(crate) mod labels;
pub(crate) mod ledgers;
mod migrations;
pub(crate) mod records;
pub(crate) mod sessions;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proto::LedgerId;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use uuid::Uuid;

use crate::error::{Result, StoreError};

pub use ledgers::{Appended, MemberRow};
pub(crate) use ledgers::{append_existing_in, append_in, open_ledger_in, seal_in};
pub(crate) use sessions::{create_session_in, read_session_in, set_session_status_in};

/// The parents of a ledger as its hash commits to them (for proofs).
pub(crate) fn parent_refs_pub(
    conn: &Connection,
    parents: &[LedgerId],
) -> Result<Vec<proto::ParentRef>> {
    ledgers::parent_refs(conn, parents)
}

/// The header a sealed ledger's hash commits to (for proofs).
pub(crate) fn header_pub(
    ledger: &proto::Ledger,
    parents: Vec<proto::ParentRef>,
    sealed_at: &str,
) -> proto::LedgerHeader {
    ledgers::header(ledger, parents, sealed_at)
}
#[cfg(test)]
pub(crate) use migrations::back_to_version_7;
pub use records::Query;
pub(crate) use records::{read_record_in, record_id_by_hash, write_record_in};

/// Reads one record through any [`Db`](crate::Db): a store, a transaction, or (for
/// `kura-work`) the connection under either.
pub fn read_record(db: &(impl crate::Db + ?Sized), id: proto::RecordId) -> Result<proto::Record> {
    read_record_in(crate::Db::sql(db), id)
}

/// The record whose content hash is `hash`, if stored (content is stored once).
pub fn record_id_by_hash_in(
    db: &(impl crate::Db + ?Sized),
    hash: &str,
) -> Result<Option<proto::RecordId>> {
    record_id_by_hash(crate::Db::sql(db), hash)?
        .map(|s| parse_id(&s))
        .transpose()
}

pub(crate) use ledgers::read_ledger_in;
pub(crate) use sessions::move_head;
pub use sessions::{RefLogEntry, Session};

/// `PRAGMA application_id` of a Kura database ("KURA" in ASCII), so a stray SQLite file is
/// never mistaken for one.
pub(crate) const APPLICATION_ID: i32 = 0x4b55_5241;

/// How hard SQLite works to make a commit survive power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// fsync on every commit (and the WAL on checkpoint): nothing acknowledged is lost.
    #[default]
    Full,
    /// WAL fsync only at checkpoints: survives a process crash, may lose the last commits
    /// on power loss.
    Normal,
    /// No fsync at all; for scratch databases and benchmarks.
    Off,
}

impl std::str::FromStr for Synchronous {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            "off" => Ok(Synchronous::Off),
            other => Err(StoreError::Invalid(format!(
                "invalid synchronous mode {other:?}: expected full, normal or off"
            ))),
        }
    }
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Durability of each commit; `Full` unless the user chose otherwise.
    pub synchronous: Synchronous,
    /// How long a writer waits for another process's write lock before failing.
    pub busy_timeout: Duration,
    /// SQLite page cache per connection, in KiB. Big enough that a batch of appends does not
    /// spill dirty pages to the WAL mid-transaction; small enough for a Pi (it is allocated
    /// only as pages are used).
    pub cache_kib: u32,
    /// WAL frames before a writer checkpoints into the database file. SQLite's 1 000 (4 MiB)
    /// makes a busy writer copy the same hot index pages to the database again and again;
    /// 10 000 (40 MiB of WAL at most) copies each page once per many batches — group commit
    /// measured 1.5x faster — and `kura serve` checkpoints when idle anyway.
    pub wal_autocheckpoint_pages: u32,
    /// The daemon's key that signs every ledger it seals (none: seals are unsigned).
    pub sealer: Option<kura_tlog::sealer::Sealer>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(10),
            cache_kib: 8 * 1024,
            wal_autocheckpoint_pages: 10_000,
            sealer: None,
        }
    }
}

/// A handle on one Kura database: one SQLite connection, usable from one thread at a time
/// (`Send`, not `Sync`). Open one per thread or process; SQLite serializes the writers.
pub struct Store {
    /// The connection; every write goes through a `BEGIN IMMEDIATE` transaction on it.
    conn: Connection,
    /// Where the database lives, for error messages.
    path: PathBuf,
    /// How long [`Store::write`] waits for the write lock.
    busy_timeout: Duration,
    /// Triggers and indexes of Kura's schema missing from the file: (type, name).
    schema_gaps: Vec<(String, String)>,
    /// Signs every seal made through this store.
    sealer: Option<kura_tlog::sealer::Sealer>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens an existing Kura database, applying any pending migrations. Refuses missing
    /// files, non-SQLite files and SQLite files that are not Kura's — without writing to them.
    pub fn open(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(StoreError::NoDatabase(path));
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| not_kura(&path, e))?;
        configure_connection(&conn)?;
        let app_id = application_id(&conn, &path)?;
        if app_id != APPLICATION_ID {
            return Err(StoreError::NotKura {
                path,
                reason: if app_id == 0 {
                    "no Kura schema in it (run `kura init` on a new path)".into()
                } else {
                    format!("its application_id is {app_id:#x}")
                },
            });
        }
        Store::finish_open(conn, path, options)
    }

    /// Creates a Kura database at `path` (or opens it if it already is one). Refuses to
    /// take over a file that holds anything else.
    pub fn create(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(StoreError::Invalid(format!(
                "directory {} does not exist",
                dir.display()
            )));
        }
        if !path.exists() {
            // Private from its first byte: SQLite gives the WAL and shared-memory files the
            // database file's mode, so they are 0600 too.
            std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new().write(true).create_new(true),
                0o600,
            )
            .open(&path)
            .map_err(|e| StoreError::Invalid(format!("cannot create {}: {e}", path.display())))?;
        }
        let conn = Connection::open(&path).map_err(|e| not_kura(&path, e))?;
        configure_connection(&conn)?;
        let app_id = application_id(&conn, &path)?;
        if app_id != APPLICATION_ID {
            let tables: i64 =
                conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
            if app_id != 0 || tables != 0 {
                return Err(StoreError::NotKura {
                    path,
                    reason: "it already holds another application's data; refusing to touch it"
                        .into(),
                });
            }
            conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        Store::finish_open(conn, path, options)
    }

    fn finish_open(mut conn: Connection, path: PathBuf, options: &StoreOptions) -> Result<Store> {
        let deadline = Instant::now() + options.busy_timeout;
        let mode: String = retry_busy(deadline, || {
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        })?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Invalid(format!(
                "could not switch {} to WAL mode (got {mode})",
                path.display()
            )));
        }
        conn.pragma_update(None, "synchronous", options.synchronous.pragma())?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Negative: KiB rather than pages.
        conn.pragma_update(None, "cache_size", -i64::from(options.cache_kib))?;
        conn.pragma_update(None, "wal_autocheckpoint", options.wal_autocheckpoint_pages)?;
        // A turn runs a few dozen distinct statements; rusqlite keeps 16 by default, so each
        // turn evicted and re-parsed (and re-compiled triggers for) most of them.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let schema_gaps = migrations::check_schema(&conn, &path)?;
        migrations::apply(&mut conn, deadline)?;
        Ok(Store {
            conn,
            path,
            busy_timeout: options.busy_timeout,
            schema_gaps,
            sealer: options.sealer.clone(),
        })
    }

    /// Signs the seals made from now on with `sealer` (none: unsigned).
    pub fn set_sealer(&mut self, sealer: Option<kura_tlog::sealer::Sealer>) {
        self.sealer = sealer;
    }

    /// The key that signs this store's seals, if any.
    pub fn sealer(&self) -> Option<&kura_tlog::sealer::Sealer> {
        self.sealer.as_ref()
    }

    /// Triggers and indexes of Kura's schema that the file lacks, as (type, name): someone
    /// removed them (the immutability triggers, say). `verify` reports each.
    pub(crate) fn schema_gaps(&self) -> &[(String, String)] {
        &self.schema_gaps
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Direct read access to the connection, for read-only reports (e.g. `verify`).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// SQLite's change counter for this connection (`PRAGMA data_version`): it moves when
    /// another connection — another process — commits. A read of shared memory (about a
    /// microsecond), so watchers (the console, the fleet publisher) can ask it often.
    pub fn data_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    /// The transparency log's rows, for reading (size, roots, proofs, checks, witnesses).
    pub fn seal_log(&self) -> crate::SealLog<'_> {
        crate::SealLog(&self.conn)
    }

    /// Runs `f` inside one `BEGIN IMMEDIATE` transaction: it takes the write lock up front, so
    /// concurrent writers queue on the busy timeout instead of failing mid-transaction. `f`
    /// composes the store's operations on the [`Tx`](crate::Tx); all of them commit together.
    pub fn write<T>(&mut self, f: impl FnOnce(&crate::Tx<'_>) -> Result<T>) -> Result<T> {
        self.write_raw(|tx| f(&crate::Tx(tx)))
    }

    /// [`Store::write`] on the bare transaction, for the store's own operations.
    pub(crate) fn write_raw<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.busy_timeout;
        loop {
            match self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
            {
                Ok(tx) => {
                    let out = f(&tx)?;
                    tx.commit()?;
                    return Ok(out);
                }
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && Instant::now() < deadline => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Runs `PRAGMA integrity_check` and returns its lines (`["ok"]` when healthy).
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare("PRAGMA integrity_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Prepared statements kept per connection: more than every daemon's hot path uses.
const STATEMENT_CACHE: usize = 256;

/// One round of [`busy_wait`]. SQLite busy handlers are plain function pointers and cannot
/// carry a per-store timeout, so the handler waits at most one short round and
/// [`Store::write`] repeats rounds until that store's own `busy_timeout` has passed. Readers
/// get one round: in WAL mode they wait only while another connection recovers the WAL.
const BUSY_ROUND: Duration = Duration::from_millis(200);

/// Step of [`busy_wait`] once a wait has gone on for a while: short, so a waiting writer gets
/// the lock within a fraction of a millisecond of it being released (SQLite's default handler
/// backs off to 100 ms sleeps and lets one busy writer starve the others).
const BUSY_STEP: Duration = Duration::from_micros(250);

/// Step of the first [`BUSY_QUICK_STEPS`] retries. A Kura transaction holds the write lock
/// for a few hundred microseconds (its work and one fsync), so most waits end within the first
/// millisecond; a 250 µs step there cost the next writer of a turn (a worker's claim right
/// after minato's dispatch) up to 250 µs of idle lock each time.
const BUSY_QUICK_STEP: Duration = Duration::from_micros(40);

/// Retries at [`BUSY_QUICK_STEP`] before the wait settles into [`BUSY_STEP`]s (2 ms).
const BUSY_QUICK_STEPS: u32 = 50;

/// Busy handler: retry at short steps, then every [`BUSY_STEP`], for one [`BUSY_ROUND`].
fn busy_wait(attempt: i32) -> bool {
    let attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
    let quick = attempt.min(BUSY_QUICK_STEPS);
    let spent = BUSY_QUICK_STEP.saturating_mul(quick)
        + BUSY_STEP.saturating_mul(attempt.saturating_sub(BUSY_QUICK_STEPS));
    if spent >= BUSY_ROUND {
        return false;
    }
    std::thread::sleep(if attempt < BUSY_QUICK_STEPS {
        BUSY_QUICK_STEP
    } else {
        BUSY_STEP
    });
    true
}

/// Repeats `f` while it fails with `SQLITE_BUSY` and `deadline` has not passed; `f` must be
/// safe to repeat (it is only ever a statement that took no lock).
fn retry_busy<T>(
    deadline: Instant,
    mut f: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    loop {
        match f() {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline => {}
            other => return other,
        }
    }
}

/// The first settings of every connection, before anything is read from the file.
fn configure_connection(conn: &Connection) -> Result<()> {
    conn.busy_handler(Some(busy_wait))?;
    // Functions with side effects may not run from views or triggers stored in the file:
    // a database is input, and Kura's own schema needs none.
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    Ok(())
}

/// Reads `application_id`, turning "file is not a database" into a clear refusal.
fn application_id(conn: &Connection, path: &Path) -> Result<i32> {
    conn.query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| not_kura(path, e))
}

fn not_kura(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => StoreError::NotKura {
            path: path.to_path_buf(),
            reason: "not an SQLite database (corrupt, or some other file)".into(),
        },
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => StoreError::NotKura {
            path: path.to_path_buf(),
            reason: "the SQLite file is corrupt".into(),
        },
        Some(rusqlite::ErrorCode::CannotOpen) => {
            StoreError::Invalid(format!("cannot open {}: {e}", path.display()))
        }
        _ => StoreError::Sqlite(e),
    }
}

/// Parses a user-supplied id.
/// Parses a user-supplied id as the kind `T` the caller expects (`Uuid` when the kind is not
/// known yet).
pub fn parse_id<T: From<Uuid>>(text: &str) -> Result<T> {
    proto::ids::parse_id(text.trim())
        .map(T::from)
        .ok_or_else(|| StoreError::InvalidId(text.to_owned()))
}

#[cfg(test)]
mod tests;
