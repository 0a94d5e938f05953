//! `execute` and `query_row` through the connection's prepared-statement cache: rusqlite's
//! own `Connection::execute`/`query_row` parse their SQL on every call (and compile every
//! trigger the statement fires), which was a tenth of a worker's CPU per turn. Public for
//! `kura-work`, which runs its SQL through the same cache.

use rusqlite::{Connection, Params, Row};

/// Cached counterparts of `Connection::execute` and `Connection::query_row`.
pub trait Cached {
    /// `execute`, with the statement kept prepared for the next call.
    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;

    /// `query_row`, with the statement kept prepared for the next call.
    fn query_row_cached<T, P: Params, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn execute_cached<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn query_row_cached<T, P: Params, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}
