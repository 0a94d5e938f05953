//! `kura export --format=git`: a real repository that `git fsck` accepts, reproducibly.

use std::path::Path;
use std::process::Command;

use kura_testkit::cli::Kura;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn export_is_a_valid_reproducible_git_repository() {
    let k = Kura::new();
    let d = k.demo_session();
    // An open ledger is not exported (it is not sealed history yet).
    k.ok(&[
        "ledger",
        "open",
        "--session",
        &d.session,
        "--label",
        "in-progress",
        "--parent",
        &d.out2,
    ]);
    let a = k.dir.path().join("export-a");
    let b = k.dir.path().join("export-b");
    let ja = k.json(&[
        "export",
        &d.session,
        "--format",
        "git",
        "--out",
        a.to_str().expect("utf8"),
    ]);
    let jb = k.json(&[
        "export",
        &d.session,
        "--format",
        "git",
        "--out",
        b.to_str().expect("utf8"),
    ]);
    assert_eq!(ja["commits"], 4);
    assert_eq!(
        ja["head_commit"], jb["head_commit"],
        "exporting twice gives identical commit ids"
    );

    git(&a, &["fsck", "--strict", "--no-dangling"]);
    let head = git(&a, &["rev-parse", "main"]);
    assert_eq!(serde_json::Value::String(head.clone()), ja["head_commit"]);

    // One commit per sealed ledger, ledger parents as commit parents, in chain order.
    let log = git(&a, &["log", "--format=%s", "main"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["turn-2-out", "turn-2-ctx", "turn-1-out", "turn-1-ctx"]
    );
    let parents = git(&a, &["rev-list", "--parents", "main"]);
    let rows: Vec<Vec<&str>> = parents.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 2, 1]);
    let tag = git(&a, &["rev-parse", &format!("ledger/{}", d.out1)]);
    let msg = git(&a, &["log", "-1", "--format=%B", &tag]);
    assert!(
        msg.contains(&format!("ledger: {}", d.out1)) && msg.contains("root_hash: "),
        "{msg}"
    );

    // Each record is a file in the ledger's commit.
    let files = git(&a, &["ls-tree", "-r", "--name-only", &tag]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [
            "ledger.json",
            "records/000000-agent.thought.json",
            "records/000001-tool.call.json",
            "records/000002-tool.result.json",
            "records/000003-task.deliverable.json"
        ]
    );
    let call = git(
        &a,
        &["show", &format!("{tag}:records/000001-tool.call.json")],
    );
    let v: serde_json::Value = serde_json::from_str(&call).expect("record file is JSON");
    assert_eq!(v["record_id"], serde_json::Value::String(d.call.clone()));
    assert_eq!(v["content"]["tool_name"], "fs.list");

    // Exporting again into the same directory is idempotent.
    let again = k.json(&[
        "export",
        &d.session,
        "--format",
        "git",
        "--out",
        a.to_str().expect("utf8"),
    ]);
    assert_eq!(again["head_commit"], ja["head_commit"]);
    git(&a, &["fsck", "--strict"]);
}

#[test]
fn a_ledger_with_two_parents_is_a_merge_commit() {
    let k = Kura::new();
    let s = k.ok(&["session", "new"]);
    let mut sealed = Vec::new();
    for label in ["left", "right"] {
        let l = k.ok(&["ledger", "open", "--session", &s, "--label", label]);
        k.ok(&[
            "record",
            "add",
            "--ledger",
            &l,
            "--type",
            "agent.thought",
            "--author",
            "agent:x",
            "--text",
            label,
        ]);
        k.ok(&["ledger", "seal", &l]);
        sealed.push(l);
    }
    let m = k.ok(&[
        "ledger",
        "open",
        "--session",
        &s,
        "--label",
        "merge",
        "--parent",
        &sealed[0],
        "--parent",
        &sealed[1],
    ]);
    k.ok(&["ledger", "seal", &m]);
    let out = k.dir.path().join("x");
    k.ok(&[
        "export",
        &s,
        "--format",
        "git",
        "--out",
        out.to_str().expect("utf8"),
    ]);
    git(&out, &["fsck", "--strict", "--no-dangling"]);
    let parents = git(&out, &["rev-list", "--parents", "-1", "main"]);
    assert_eq!(
        parents.split(' ').count(),
        3,
        "merge commit with two parents: {parents}"
    );
}

#[test]
fn export_refuses_a_non_empty_foreign_directory_and_empty_sessions() {
    let k = Kura::new();
    let d = k.demo_session();
    let dir = k.dir.path().join("occupied");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("precious.txt"), "keep me").expect("write");
    let (_, err) = k.fails(
        2,
        &[
            "export",
            &d.session,
            "--format",
            "git",
            "--out",
            dir.to_str().expect("utf8"),
        ],
    );
    assert!(err.contains("not empty or a git repository"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("precious.txt")).expect("read"),
        "keep me"
    );
    let empty = k.ok(&["session", "new"]);
    let (_, err) = k.fails(
        2,
        &[
            "export",
            &empty,
            "--format",
            "git",
            "--out",
            k.dir.path().join("e").to_str().expect("utf8"),
        ],
    );
    assert!(err.contains("no sealed ledger"), "{err}");
    k.fails(
        2,
        &["export", &d.session, "--format", "tarball", "--out", "x"],
    );
}
