//! Test support for Kura's suites (a dev-dependency only): a real `nats-server` on a free
//! port, the workspace's binaries, the whole daemon stack as processes, the `kura` CLI.

// Unpublished test support: its items are named for what they do; docs on every field would
// repeat the names.
#![allow(missing_docs)]
pub mod cli;
pub mod console;
pub mod hub;
pub mod nats;
pub mod openai;
pub mod python;
pub mod rogue;
pub mod stack;
pub mod wal;

use kura_work::WorkTx;
use std::path::{Path, PathBuf};

pub use nats::{NatsServer, free_port, publish_as};
pub use stack::Stack;

/// `target/<profile>/<name>`, where cargo put the workspace's binaries. Panics (test helper)
/// when it is missing, naming the command that builds it.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    // Test binaries live in target/<profile>/deps, benches likewise.
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        p.display()
    );
    p
}

/// A pending turn for `instruction`, filed the way minato files one (a queued request, a
/// sealed context ledger holding the instruction), for in-process tests of hashi and aegis.
pub fn pending_turn(store: &mut kura_store::Store, instruction: &str) -> proto::TurnId {
    use kura_work::submit;
    let request = submit(store, instruction, "user:oles", None).expect("submit");
    let session = store.create_session("s").expect("session");
    let ctx = store
        .open_ledger(session.session_id, "turn-1-ctx", &[])
        .expect("ctx");
    store
        .write(|tx| tx.append_existing(ctx.ledger_id, request.record_id))
        .expect("append");
    store.seal_ledger(ctx.ledger_id).expect("seal");
    store
        .write(|tx| tx.insert_turn(session.session_id, 1, request.request_seq, ctx.ledger_id))
        .expect("turn")
}
