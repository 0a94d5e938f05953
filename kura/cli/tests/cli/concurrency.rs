//! Two OS processes appending to one database file at once lose nothing and never fork a ledger.

use std::process::Command;

use kura_store::{Store, StoreOptions};
use proto::record::{Content, NewRecord, RecordType};

const PER_PROCESS: usize = 400;
const WRITER_ENV: &str = "KURA_TEST_WRITER";

/// In a child process (env set): append PER_PROCESS records, each its own durable transaction.
fn act_as_writer(spec: &str) {
    let mut parts = spec.split('|');
    let (Some(db), Some(ledger), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad writer spec {spec:?}");
    };
    let mut store = Store::open(db, &StoreOptions::default()).expect("open");
    let ledger = kura_store::store::parse_id(ledger).expect("ledger id");
    // Start barrier: say we are ready, then wait for the parent's "go", so both write at once.
    let dir = std::path::Path::new(db).parent().expect("db dir");
    std::fs::write(dir.join(format!("ready-{tag}")), b"").expect("ready file");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.join("go").exists() {
        assert!(std::time::Instant::now() < deadline, "no go signal");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for i in 0..PER_PROCESS {
        let rec = NewRecord::new(
            RecordType::AgentThought,
            Content::text(format!("{tag}-{i:04}")),
            "agent:writer",
        );
        store.append(ledger, &rec).expect("append");
        // A daemon works between appends. In a tight loop SQLite's backing-off busy handler lets
        // the writer holding the lock win every time (CI saw one writer finish before the other
        // started), and the test would prove nothing about concurrent writers.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn two_processes_append_to_one_ledger_without_loss_or_fork() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        act_as_writer(&spec);
        return;
    }
    let k = kura_testkit::cli::Kura::new();
    let session = k.ok(&["session", "new"]);
    let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", "shared"]);
    let exe = std::env::current_exe().expect("test exe");
    let children: Vec<_> = ["A", "B"]
        .iter()
        .map(|tag| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "concurrency::two_processes_append_to_one_ledger_without_loss_or_fork",
                    "--nocapture",
                ])
                .env(WRITER_ENV, format!("{}|{ledger}|{tag}", k.db.display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn writer")
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(k.dir.path().join("ready-A").exists() && k.dir.path().join("ready-B").exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "writers never got ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::fs::write(k.dir.path().join("go"), b"").expect("go");
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a writer failed");
    }

    let store = Store::open(&k.db, &StoreOptions::default()).expect("open");
    let lid = kura_store::store::parse_id(&ledger).expect("id");
    let members = store.members(lid).expect("members");
    assert_eq!(members.len(), 2 * PER_PROCESS, "nothing lost");
    assert_eq!(
        store.read_ledger(lid).expect("ledger").record_count,
        (2 * PER_PROCESS) as u64
    );
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m.position, i as u64, "positions are dense: no fork, no gap");
    }
    let texts: Vec<String> = store
        .hydrate(lid)
        .expect("hydrate")
        .iter()
        .map(|r| r.content["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    for tag in ["A", "B"] {
        let seq: Vec<&String> = texts.iter().filter(|t| t.starts_with(tag)).collect();
        let want: Vec<String> = (0..PER_PROCESS).map(|i| format!("{tag}-{i:04}")).collect();
        assert_eq!(seq.len(), PER_PROCESS, "all of {tag}'s records are there");
        assert!(
            seq.iter().zip(&want).all(|(a, b)| *a == b),
            "{tag}'s records keep their order"
        );
    }
    let interleaved = texts.windows(2).filter(|w| w[0][..1] != w[1][..1]).count();
    eprintln!("writers alternated {interleaved} times");
    assert!(
        interleaved > 1,
        "the two writers never ran at the same time; the test proved nothing"
    );
    drop(store);
    k.ok(&["ledger", "seal", &ledger]);
    k.ok(&["verify", "--all"]);
}
