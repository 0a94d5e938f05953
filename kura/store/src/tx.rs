//! The store's write transaction as callers see it: [`Tx`], handed out by
//! [`Store::write`](crate::Store::write), with the named operations a daemon may run inside
//! one transaction — the SQL stays inside the store, and `kura-work`'s operations on the work
//! tables reach the connection only through [`Db::sql`].

use proto::record::{NewRecord, Record};
use proto::{Ledger, SessionStatus};
use proto::{LedgerId, RecordId, SessionId};

use crate::error::Result;
use crate::store::{Appended, Session};
use kura_tlog::sealer::Sealer;

/// What the store's reads run on: a [`crate::Store`] or a [`Tx`] (sealed; the connection
/// inside stays the store's).
pub trait Db: sealed::Sealed {
    /// The SQL connection to read with: the seam for `kura-work`, which reads the work
    /// tables this store's migrations create.
    fn sql(&self) -> &rusqlite::Connection {
        sealed::Sealed::db(self)
    }
}

pub(crate) mod sealed {
    /// The connection under a [`super::Db`].
    pub trait Sealed {
        /// The SQLite connection to run statements on.
        fn db(&self) -> &rusqlite::Connection;
    }
}

impl sealed::Sealed for rusqlite::Connection {
    fn db(&self) -> &rusqlite::Connection {
        self
    }
}
impl Db for rusqlite::Connection {}
impl sealed::Sealed for rusqlite::Transaction<'_> {
    fn db(&self) -> &rusqlite::Connection {
        self
    }
}
impl Db for rusqlite::Transaction<'_> {}
impl sealed::Sealed for crate::Store {
    fn db(&self) -> &rusqlite::Connection {
        self.conn()
    }
}
impl Db for crate::Store {}
impl sealed::Sealed for Tx<'_> {
    fn db(&self) -> &rusqlite::Connection {
        self.0
    }
}
impl Db for Tx<'_> {}

/// The connection under `db`, for the store's own functions.
pub(crate) fn conn(db: &(impl Db + ?Sized)) -> &rusqlite::Connection {
    sealed::Sealed::db(db)
}

/// One `BEGIN IMMEDIATE` write transaction of [`crate::Store::write`]: everything done
/// through it commits together or not at all.
pub struct Tx<'a>(pub(crate) &'a rusqlite::Transaction<'a>);

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tx")
    }
}

impl Tx<'_> {
    /// Reads one record.
    pub fn read_record(&self, id: RecordId) -> Result<Record> {
        crate::store::read_record_in(self.0, id)
    }

    /// Appends a new record to an open ledger.
    pub fn append(&self, ledger_id: LedgerId, new: &NewRecord) -> Result<Appended> {
        crate::store::append_in(self.0, ledger_id, new)
    }

    /// Appends a record already in the store to an open ledger; returns its position.
    pub fn append_existing(&self, ledger_id: LedgerId, record_id: RecordId) -> Result<u64> {
        crate::store::append_existing_in(self.0, ledger_id, record_id)
    }

    /// Opens a ledger in a session on top of sealed `parents`.
    pub fn open_ledger(
        &self,
        session_id: SessionId,
        label: &str,
        parents: &[LedgerId],
    ) -> Result<Ledger> {
        crate::store::open_ledger_in(self.0, session_id, label, parents)
    }

    /// Seals a ledger (a leaf in the seal log, signed by `sealer` if given); true if it was
    /// sealed now rather than already.
    pub fn seal(&self, ledger_id: LedgerId, sealer: Option<&Sealer>) -> Result<(Ledger, bool)> {
        crate::store::seal_in(self.0, ledger_id, sealer)
    }

    /// Creates a session.
    pub fn create_session(&self, label: &str) -> Result<Session> {
        crate::store::create_session_in(self.0, label)
    }

    /// Reads a session.
    pub fn read_session(&self, id: SessionId) -> Result<Session> {
        crate::store::read_session_in(self.0, id)
    }

    /// Sets a session's status.
    pub fn set_session_status(&self, id: SessionId, status: SessionStatus) -> Result<()> {
        crate::store::set_session_status_in(self.0, id, status)
    }

    /// Stores a record on its own (not in any ledger); content already stored returns the
    /// existing record.
    pub fn write_record(&self, new: &NewRecord) -> Result<Record> {
        crate::store::write_record_in(self.0, new)
    }
}
