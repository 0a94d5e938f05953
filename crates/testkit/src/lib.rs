//! Test support for Kura's suites (a dev-dependency only): a real `nats-server` on a free
//! port, the workspace's binaries, the whole daemon stack as processes, the `kura` CLI.

// Unpublished test support: its items are named for what they do; docs on every field would
// repeat the names.
#![allow(missing_docs)]
pub mod cli;
pub mod nats;
pub mod stack;

use std::path::{Path, PathBuf};

pub use nats::{NatsServer, free_port};
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
