//! Consumer cursors: how far each consumer has worked through its queue.

use rusqlite::{OptionalExtension, params};

use kura_store::{Db, Result};

/// The consumer's position (0 before its first unit of work).
pub fn cursor(conn: &impl Db, consumer: &str) -> Result<i64> {
    let conn = conn.sql();
    Ok(conn
        .prepare_cached("SELECT position FROM cursors WHERE consumer = ?1")?
        .query_row([consumer], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Moves the consumer's position; call inside the transaction that did the work.
pub fn set_cursor(conn: &impl Db, consumer: &str, position: i64) -> Result<()> {
    let conn = conn.sql();
    conn.prepare_cached(
        "INSERT INTO cursors (consumer, position) VALUES (?1, ?2)
         ON CONFLICT (consumer) DO UPDATE SET position = excluded.position",
    )?
    .execute(params![consumer, position])?;
    Ok(())
}
