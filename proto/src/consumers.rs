//! The registry of consumer names: each names a cursor in SQLite, advanced in the same
//! transaction as the work it did. The daemons and `kura status` read them from here only.

/// minato: the request queue.
pub const MINATO_REQUESTS: &str = "minato.requests";
/// minato: completed turns, deciding what comes next.
pub const MINATO_COMPLETIONS: &str = "minato.completions";
/// mikado: completed turns, extracting memory.
pub const MIKADO_MEMORY: &str = "mikado.memory";
/// aegis: approval requests (a queue by state, no cursor; named for logs).
pub const AEGIS_REQUESTS: &str = "aegis.requests";
/// hashi: turns to claim (leases, no cursor; named for logs).
pub const HASHI_TURNS: &str = "hashi.turns";

/// Every consumer that keeps a cursor.
pub const WITH_CURSORS: [&str; 3] = [MINATO_REQUESTS, MINATO_COMPLETIONS, MIKADO_MEMORY];
