//! A database written by an older Kura opens, verifies and keeps working under this one.
//!
//! The fixture in `fixtures/main-2026-11-25/` was made by `./scripts/demo` on main at 09db26c
//! (before the issue-25 re-shape moved the seal log into kura-tlog, typed the record contents
//! and gave the store a small API): two sessions, tool calls, a signed approval, memory, the
//! seal log, a signed checkpoint and an offline inclusion proof. Only public keys are kept
//! (`identities.toml`, the log's verifier key); nothing here can sign.
//!
//! The fixture in `fixtures/main-352de05/` is the previous release's (main at 352de05, before
//! this round moved the house): the same demo run by that release's binaries, then a writ
//! granted and one revoked by the demo person (the authority ledger, the writs table), and a
//! checkpoint over all of it; `reads.json` is what that release's `kura` read back from it.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kura_runtime::identity::{IDENTITIES_FILE, Identities, Retired};
use kura_testkit::Stack;

const MINUTE: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/main-2026-11-25")
        .join(name)
}

fn kura(args: &[&str], db: &Path) -> Output {
    kura_testkit::cli::Cli::on(db).run(args)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `kura verify --all` against the old checkpoint with the given keyring.
fn verify(db: &Path, keyring: &Path) -> Output {
    let vkey = std::fs::read_to_string(fixture("log_verifier")).expect("log_verifier");
    let checkpoint = fixture("checkpoint");
    kura(
        &[
            "verify",
            "--all",
            "--log-key",
            vkey.trim(),
            "--checkpoint",
            checkpoint.to_str().expect("utf-8 path"),
            "--keyring",
            keyring.to_str().expect("utf-8 path"),
        ],
        db,
    )
}

#[test]
fn a_database_written_by_main_of_2026_11_25_opens_verifies_and_keeps_working() {
    let script = r#"{"turns": [[{"tool": "fs.write", "args": {"path": "note.md", "content": "after the upgrade"}}, {"deliver": "done after the upgrade"}]]}"#;
    let mut s = Stack::new(script);
    std::fs::copy(fixture("kura.db"), &s.db).expect("copy the fixture");
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", s.db.display()));
    }

    // Every old hash, seal signature and the signed checkpoint still verify.
    let out = verify(&s.db, &fixture("identities.toml"));
    assert!(out.status.success(), "old database: {}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("32 records, 8 ledgers, 2 sessions checked; every hash matches"),
        "{said}"
    );
    assert!(
        said.contains("checked against checkpoint kura.demo/log (size 8)"),
        "{said}"
    );

    // The proof the old code printed still checks offline, with no database.
    let proof = fixture("proof.json");
    let vkey = std::fs::read_to_string(fixture("log_verifier")).expect("log_verifier");
    let out = kura(
        &[
            "verify-proof",
            proof.to_str().expect("utf-8 path"),
            "--log-key",
            vkey.trim(),
        ],
        Path::new("/nonexistent"),
    );
    assert!(out.status.success(), "old proof: {}", text(&out));
    assert!(
        text(&out).contains("signed by the log key"),
        "{}",
        text(&out)
    );

    // What the old sessions learned is still found.
    let out = kura(&["search", "rice"], &s.db);
    assert!(out.status.success(), "search: {}", text(&out));
    assert!(
        text(&out).contains("dinner needs rice, miso and nori"),
        "{}",
        text(&out)
    );

    // And new work lands on top of the old history: aegis publishes this stack's policy
    // (allow) over the old one (writes asked a person) and rules the write.
    for daemon in ["aegis", "minato", "hashi"] {
        s.spawn(daemon, daemon);
    }
    let request = s.submit("keep working after the upgrade");
    let done = s.wait_complete(request, MINUTE);
    let deliverable = done.deliverable.expect("a deliverable");
    assert!(
        deliverable
            .content
            .to_string()
            .contains("done after the upgrade"),
        "{:?}",
        deliverable.content
    );

    // The grown log still extends the old checkpoint. The old install's statement keys are
    // this install's retired ones (as `kura keys rotate` keeps them): each verifies the seals
    // it made before this stack's keys took over.
    let old = Identities::load_file(&fixture("identities.toml")).expect("old identities");
    let mut ids = Identities::load(s.nats.keys_dir()).expect("this stack's identities");
    for id in &mut ids.list {
        if let Some(signer) = old.get(&id.name).and_then(|o| o.signer.clone()) {
            id.retired.push(Retired {
                key: signer,
                until: None,
            });
        }
    }
    let both = s.path("rotated");
    std::fs::create_dir_all(&both).expect("mkdir");
    ids.save(&both).expect("save the keyring");
    let both = both.join(IDENTITIES_FILE);
    let out = verify(&s.db, &both);
    assert!(out.status.success(), "after new work: {}", text(&out));
    assert!(text(&out).contains("3 sessions checked"), "{}", text(&out));
}

/// Every record content the old code wrote, read into today's typed `proto::content` and
/// written back, is the same canonical JSON, byte for byte: the typed writers hash as the old
/// `json!` ones did on real data, not only on hand-made vectors.
#[test]
fn typed_contents_rewrite_the_old_databases_records_byte_for_byte() {
    use proto::content::{
        ApprovalRequestContent, DeliverableContent, ExpiryContent, PolicyDecisionContent,
        SignedVoteContent, TextContent, ToolCallContent, ToolResultContent,
    };
    use serde_json::Value;

    fn again<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Option<String> {
        let typed: T = serde_json::from_value(v.clone()).ok()?;
        proto::canonical_json(&typed).ok()
    }
    // A copy: even a read-only open of a WAL database leaves files beside it.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("kura.db");
    std::fs::copy(fixture("kura.db"), &db).expect("copy the fixture");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open the copy");
    let mut stmt = conn
        .prepare("SELECT record_type, content FROM records ORDER BY record_id")
        .expect("query");
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("read");
    let mut checked = 0;
    for (kind, stored) in rows {
        let v: Value = serde_json::from_str(&stored).expect("stored JSON");
        let candidates: Vec<Option<String>> = match kind.as_str() {
            "task.instruction" | "agent.thought" => vec![again::<TextContent>(&v)],
            "tool.call" => vec![again::<ToolCallContent>(&v)],
            "tool.result" => vec![again::<ToolResultContent>(&v)],
            "task.deliverable" => vec![again::<DeliverableContent>(&v)],
            "approval.request" => vec![again::<ApprovalRequestContent>(&v)],
            "approval.decision" => vec![
                again::<SignedVoteContent>(&v),
                again::<PolicyDecisionContent>(&v),
                again::<ExpiryContent>(&v),
            ],
            _ => continue,
        };
        let canonical = proto::canonical_json(&v).expect("canonical");
        assert!(
            candidates.iter().flatten().any(|c| *c == canonical),
            "{kind} does not survive its typed form:\n stored  {canonical}\n rewritten {candidates:?}"
        );
        checked += 1;
    }
    assert_eq!(checked, 30, "every typed record of the fixture was checked");
}

/// The previous release's database opens under this build, verifies against its signed
/// checkpoint, reads back exactly what that release read (sessions, every session's log,
/// the writs, the memory), and not one row changes for being read.
#[test]
fn the_previous_releases_database_opens_and_reads_back_unchanged() {
    let at = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/main-352de05")
            .join(name)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("kura.db");
    std::fs::copy(at("kura.db"), &db).expect("copy the fixture");
    let before = kura_testkit::cli::fingerprint(&db);
    let cli = kura_testkit::cli::Cli::on(&db);
    let vkey = std::fs::read_to_string(at("log_verifier")).expect("log_verifier");
    let path = |p: PathBuf| p.to_str().expect("utf-8 path").to_owned();
    let said = cli.ok(&[
        "verify",
        "--all",
        "--log-key",
        vkey.trim(),
        "--checkpoint",
        &path(at("checkpoint")),
        "--keyring",
        &path(at("identities.toml")),
    ]);
    assert!(said.contains("every hash matches"), "{said}");
    let old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(at("reads.json")).expect("reads.json"))
            .expect("json");
    assert_eq!(cli.json(&["session", "list"]), old["sessions"]);
    let logs = old["logs"].as_object().expect("logs");
    assert_eq!(logs.len(), 3, "two demo sessions and the authority session");
    for (session, log) in logs {
        assert_eq!(&cli.json(&["log", session]), log, "kura log {session}");
    }
    assert_eq!(cli.json(&["writ", "list"]), old["writs"]);
    assert_eq!(cli.json(&["query", "--type", "memory.fact"]), old["memory"]);
    assert_eq!(
        kura_testkit::cli::fingerprint(&db),
        before,
        "reading the old database changed it"
    );
}
