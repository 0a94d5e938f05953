//! The transparency log's rows in this database: [`SealLog`] implements `kura_tlog`'s
//! [`LogStorage`] with the SQL over `seal_log_leaves`, `seal_log_hashes`, `ledger_seals` and
//! `ledgers`; the log's algorithms (append's hashes, roots, proofs, checks) are kura-tlog's.

use kura_tlog::Result;
use kura_tlog::storage::{LeafNow, LogStorage, SealRow, storage_error as db};
use proto::LedgerId;
use rusqlite::{Connection, OptionalExtension as _, params};
use tlog_tiles::Hash;

/// The seal log kept in a store's database: on the store's connection for reading
/// ([`crate::Store::seal_log`]), on the sealing transaction for appending.
#[derive(Clone, Copy)]
pub struct SealLog<'a>(pub(crate) &'a Connection);

impl<'a> SealLog<'a> {
    /// The seal log on `conn` (a scratch connection or transaction of the store's database).
    pub fn over(conn: &'a Connection) -> SealLog<'a> {
        SealLog(conn)
    }
}

impl std::fmt::Debug for SealLog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealLog")
    }
}

/// The seal log's size in the store at `path`, opened read-only and without migrating (for
/// a process that may run as root on a file the daemons write).
pub fn seal_log_size_read_only(path: &std::path::Path) -> crate::Result<u64> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    Ok(kura_tlog::seallog::size(&SealLog(&conn))?)
}

/// Runs `f` over each row of `sql` with `args` until it answers `false`.
fn scan<P: rusqlite::Params, T>(
    conn: &Connection,
    sql: &str,
    args: P,
    row: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    each: &mut dyn FnMut(T) -> Result<bool>,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(sql).map_err(db)?;
    let mut rows = stmt.query(args).map_err(db)?;
    while let Some(r) = rows.next().map_err(db)? {
        if !each(row(r).map_err(db)?)? {
            break;
        }
    }
    Ok(())
}

fn at(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl LogStorage for SealLog<'_> {
    fn last_leaf_index(&self) -> Result<Option<i64>> {
        let sql = "SELECT max(leaf_index) FROM seal_log_leaves";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        stmt.query_row([], |r| r.get(0)).map_err(db)
    }

    fn stored_hash(&self, index: u64) -> Result<Option<Vec<u8>>> {
        let sql = "SELECT hash FROM seal_log_hashes WHERE hash_index = ?1";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        stmt.query_row([at(index)], |r| r.get(0))
            .optional()
            .map_err(db)
    }

    fn put_leaf(
        &self,
        index: u64,
        id: LedgerId,
        data: &str,
        first: u64,
        hs: &[Hash],
    ) -> Result<()> {
        let sql =
            "INSERT INTO seal_log_leaves (leaf_index, ledger_id, leaf_data) VALUES (?1, ?2, ?3)";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        stmt.execute(params![at(index), id.to_string(), data])
            .map_err(db)?;
        let sql = "INSERT INTO seal_log_hashes (hash_index, hash) VALUES (?1, ?2)";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        for (k, h) in (first..).zip(hs) {
            stmt.execute(params![at(k), &h.0[..]]).map_err(db)?;
        }
        Ok(())
    }

    fn leaf_of(&self, ledger_id: LedgerId) -> Result<Option<(u64, String)>> {
        let sql = "SELECT leaf_index, leaf_data FROM seal_log_leaves WHERE ledger_id = ?1";
        let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?));
        let found = self.0.query_row(sql, [ledger_id.to_string()], row);
        let found = found.optional().map_err(db)?;
        Ok(found.map(|(i, d)| (u64::try_from(i).unwrap_or(0), d)))
    }

    fn scan_leaves(
        &self,
        from: u64,
        to: u64,
        each: &mut dyn FnMut(u64, String, String) -> Result<bool>,
    ) -> Result<()> {
        let sql = "SELECT leaf_index, ledger_id, leaf_data FROM seal_log_leaves
                    WHERE leaf_index >= ?1 AND leaf_index < ?2 ORDER BY leaf_index";
        let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?));
        let each =
            &mut |(i, l, d): (i64, String, String)| each(u64::try_from(i).unwrap_or(0), l, d);
        scan(self.0, sql, [at(from), at(to)], row, each)
    }

    fn scan_leaves_now(&self, each: &mut dyn FnMut(LeafNow) -> Result<bool>) -> Result<()> {
        let sql =
            "SELECT s.leaf_index, s.ledger_id, s.leaf_data, l.session_id, l.ledger_hash, l.state
                     FROM seal_log_leaves s LEFT JOIN ledgers l ON l.ledger_id = s.ledger_id
                    ORDER BY s.leaf_index";
        let row = |r: &rusqlite::Row<'_>| {
            Ok(LeafNow {
                index: r.get(0)?,
                ledger_id: r.get(1)?,
                data: r.get(2)?,
                session_id: r.get(3)?,
                ledger_hash: r.get(4)?,
                state: r.get(5)?,
            })
        };
        scan(self.0, sql, [], row, each)
    }

    fn unlogged(&self, limit: u32) -> Result<Vec<String>> {
        let sql = "SELECT l.ledger_id FROM ledgers l
                     LEFT JOIN seal_log_leaves s ON s.ledger_id = l.ledger_id
                    WHERE l.state = 'sealed' AND s.ledger_id IS NULL LIMIT ?1";
        let mut out = Vec::new();
        scan(self.0, sql, [limit], |r| r.get(0), &mut |id| {
            out.push(id);
            Ok(true)
        })?;
        Ok(out)
    }

    fn hash_count(&self) -> Result<i64> {
        let sql = "SELECT count(*) FROM seal_log_hashes";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        stmt.query_row([], |r| r.get(0)).map_err(db)
    }

    fn scan_hashes(&self, each: &mut dyn FnMut(i64, Vec<u8>) -> Result<bool>) -> Result<()> {
        let sql = "SELECT hash_index, hash FROM seal_log_hashes ORDER BY hash_index";
        let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?));
        scan(self.0, sql, [], row, &mut |(i, h)| each(i, h))
    }

    fn sealed_ledgers(&self) -> Result<Vec<(String, String, Option<String>)>> {
        let sql = "SELECT ledger_id, session_id, ledger_hash FROM ledgers
                    WHERE state = 'sealed' ORDER BY sealed_at, ledger_id";
        let mut out = Vec::new();
        let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
        scan(self.0, sql, [], row, &mut |l| {
            out.push(l);
            Ok(true)
        })?;
        Ok(out)
    }

    fn put_seal(&self, ledger_id: &str, sealer: &str, signature: &str) -> Result<()> {
        let sql = "INSERT INTO ledger_seals (ledger_id, sealer, signature) VALUES (?1, ?2, ?3)";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        stmt.execute(params![ledger_id, sealer, signature])
            .map_err(db)?;
        Ok(())
    }

    fn sealer_of(&self, ledger_id: &str) -> Result<Option<String>> {
        let sql = "SELECT sealer FROM ledger_seals WHERE ledger_id = ?1";
        let found = self.0.query_row(sql, [ledger_id], |r| r.get(0));
        found.optional().map_err(db)
    }

    fn signing_since(&self) -> Result<Option<i64>> {
        let sql = "SELECT MIN(leaf_index) FROM ledger_seals_since";
        let found = self.0.query_row(sql, [], |r| r.get(0)).optional();
        Ok(found.map_err(db)?.flatten())
    }

    fn first_leaves(&self) -> Result<Vec<(String, i64)>> {
        let sql = "SELECT s.sealer, MIN(g.leaf_index) FROM ledger_seals s
                     JOIN seal_log_leaves g ON g.ledger_id = s.ledger_id GROUP BY s.sealer";
        let mut out = Vec::new();
        let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?));
        scan(self.0, sql, [], row, &mut |l| {
            out.push(l);
            Ok(true)
        })?;
        Ok(out)
    }

    fn seal_of(&self, ledger_id: &str) -> Result<Option<SealRow>> {
        let sql = "SELECT l.ledger_hash, s.sealer, s.signature, g.leaf_index
                     FROM ledgers l
                     LEFT JOIN ledger_seals s ON s.ledger_id = l.ledger_id
                     LEFT JOIN seal_log_leaves g ON g.ledger_id = l.ledger_id
                    WHERE l.ledger_id = ?1 AND l.state = 'sealed'";
        let mut stmt = self.0.prepare_cached(sql).map_err(db)?;
        let row = |r: &rusqlite::Row<'_>| {
            Ok(SealRow {
                ledger_hash: r.get(0)?,
                sealer: r.get(1)?,
                signature: r.get(2)?,
                leaf: r.get(3)?,
            })
        };
        stmt.query_row([ledger_id], row).optional().map_err(db)
    }
}
