//! The seal log against a consistent rewrite: signed checkpoints, a witness directory, the
//! signer that refuses, and `kura verify` that holds the store to what was signed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kura_testkit::cli::{Kura, bin};

/// A session with one sealed ledger holding `text`; returns the ledger id.
fn seal_text(k: &Kura, session: &str, label: &str, text: &str) -> String {
    k.seal_text(session, label, text)
}

/// Makes a log key `file` for `kura.test/log`; returns its path and verifier key.
fn log_key(k: &Kura, file: &str) -> (std::path::PathBuf, String) {
    k.note_key(file, "kura.test/log", false)
}

/// Runs `kura serve` with `config` until `done` holds (or 30 s), then stops it.
fn serve_until(k: &Kura, config: &Path, done: impl Fn() -> bool) -> String {
    let log = k.dir.path().join("serve.log");
    let mut child = Command::new(bin())
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("KURA_SERVE_CONFIG")
        .env("KURA_DB", &k.db)
        .env("KURA_NATS_URL", "nats://127.0.0.1:1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    std::fs::read_to_string(&log).unwrap_or_default()
}

/// Attack: a script rewrote a sealed deliverable ("paid 10 EUR to alice" → "paid 9000 EUR to
/// mallory") and recomputed every hash down the chain, so `kura verify --all` said every
/// hash matched. Here the attacker goes further — rebuilds history from a copy taken before
/// the payment, so the database is consistent by construction, and deletes the signer's
/// last checkpoint too. The checkpoint in the witness directory still catches it.
#[test]
fn a_consistent_rewrite_is_caught_by_the_checkpoint_and_refused_by_signer_and_witness() {
    let k = Kura::new();
    let (key, vkey) = log_key(&k, "log.key");
    let witness = k.dir.path().join("usb");
    let config = k.dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlog_key = {:?}\nlog_verifier = {vkey:?}\nwitness_dirs = [{:?}]\nsweep_interval_ms = 3600000\n",
            key.display().to_string(),
            witness.display().to_string()
        ),
    )
    .expect("config");
    let session = k.ok(&["session", "new", "--label", "payments"]);
    seal_text(&k, &session, "groceries", "bought rice");
    // Before the payment, the attacker keeps a copy.
    let early = k.dir.path().join("early.db");
    std::fs::copy(&k.db, &early).expect("copy");
    seal_text(&k, &session, "payment", "paid 10 EUR to alice");
    // kura serve signs the log (2 leaves) and hands the checkpoint to the witness.
    let cp_path = witness.join("checkpoint");
    serve_until(&k, &config, || {
        std::fs::read_to_string(&cp_path).is_ok_and(|t| t.contains("\n2\n"))
    });
    let honest = std::fs::read_to_string(&cp_path).expect("witness checkpoint");
    assert!(honest.starts_with("kura.test/log\n2\n"), "{honest}");
    let verify = |k: &Kura| {
        k.cmd(&["verify", "--all"])
            .env("KURA_SERVE_CONFIG", &config)
            .output()
            .expect("verify")
    };
    let ok = verify(&k);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(
        String::from_utf8_lossy(&ok.stdout)
            .contains("checked against checkpoint kura.test/log (size 2)"),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    // The rewrite: history rebuilt from the copy, the payment now to mallory; the signer's
    // state deleted.
    std::fs::copy(&early, &k.db).expect("rewrite");
    let _ = std::fs::remove_file(k.dir.path().join("kura.db-wal"));
    let forged = seal_text(&k, &session, "payment", "paid 9000 EUR to mallory");
    let mut state = k.db.as_os_str().to_owned();
    state.push(".checkpoint");
    std::fs::remove_file(&state).expect("delete the signer's state");
    // On its own, the database is consistent: every hash matches.
    let alone = k.run(&["verify", "--all"]);
    assert_eq!(
        alone.status.code(),
        Some(0),
        "the rewrite is consistent by construction"
    );

    // `kura verify` with no flags finds the witness's checkpoint and names the first leaf
    // that changed.
    let caught = verify(&k);
    let text = String::from_utf8_lossy(&caught.stdout);
    assert_eq!(caught.status.code(), Some(1), "{text}");
    assert!(text.contains("checkpoint size 2 from"), "{text}");
    assert!(
        text.contains(&witness.join("checkpoint").display().to_string()),
        "{text}"
    );
    assert!(text.contains("the first changed leaf is 1"), "{text}");
    assert!(
        text.contains(&format!("checkpoint {forged}")),
        "names the ledger: {text}"
    );

    // The witness refuses the signer's fresh checkpoint of the rewritten log (the signer's
    // own memory was deleted), and says so loudly; its checkpoint is untouched.
    let log = serve_until(&k, &config, || std::fs::read_to_string(&state).is_ok());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        log.contains("ALARM: a witness refused the checkpoint"),
        "{log}"
    );
    assert_eq!(std::fs::read_to_string(&cp_path).expect("witness"), honest);

    // With its memory intact, the signer itself refuses: restore the honest checkpoint as
    // its state and ask it to sign on demand.
    std::fs::write(&state, &honest).expect("state");
    let (_, err) = k.fails(2, &["checkpoint", "--key", key.to_str().expect("utf8")]);
    assert!(err.contains("refusing to sign"), "{err}");
    assert_eq!(std::fs::read_to_string(&state).expect("state"), honest);
}

/// A checkpoint signed by another key, or edited, is not trusted: verify says so and fails.
#[test]
fn a_checkpoint_under_another_key_or_edited_is_refused() {
    let k = Kura::new();
    let (key, _) = log_key(&k, "log.key");
    let (_, other_vkey) = log_key(&k, "other.key");
    let session = k.ok(&["session", "new"]);
    seal_text(&k, &session, "a", "one");
    let note = k.ok(&["checkpoint", "--key", key.to_str().expect("utf8")]);
    let file = k.dir.path().join("cp");
    std::fs::write(&file, format!("{note}\n")).expect("cp");
    let (out, _) = k.fails(
        1,
        &[
            "verify",
            "--all",
            "--checkpoint",
            file.to_str().expect("utf8"),
            "--log-key",
            &other_vkey,
        ],
    );
    assert!(out.contains("checkpoint_signature"), "{out}");
    assert!(out.contains("no signed checkpoint found"), "{out}");
    // The consistency proof from it to now is empty and consistent.
    let proof = k.json(&["prove-consistency", file.to_str().expect("utf8")]);
    assert_eq!(proof["consistent"], true, "{proof}");
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git").args(args).output().expect("git");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git witness gets each checkpoint and the leaf copy as a commit, pushed to the remote the
/// operator configured; `kura verify` holds the store to it.
#[test]
fn a_git_witness_commits_and_pushes_every_checkpoint() {
    let k = Kura::new();
    let (key, vkey) = log_key(&k, "log.key");
    let remote = k.dir.path().join("remote.git");
    let remote_s = remote.to_str().expect("utf8");
    git(&["init", "-q", "--bare", remote_s]);
    let work = k.dir.path().join("witness-repo");
    let config = k.dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlog_key = {key:?}\nlog_verifier = {vkey:?}\nsweep_interval_ms = 3600000\nsign_interval_ms = 1000\n\n[[serve.witness_git]]\npath = {work:?}\npush = {remote_s:?}\n"
        ),
    )
    .expect("config");
    let session = k.ok(&["session", "new"]);
    seal_text(&k, &session, "a", "one");
    seal_text(&k, &session, "b", "two");
    let pushed = |size: u64| {
        move || {
            git(&["--git-dir", remote_s, "log", "--all", "--format=%s"])
                .contains(&format!("size {size}"))
        }
    };
    serve_until(&k, &config, pushed(2));
    seal_text(&k, &session, "c", "three");
    let log = serve_until(&k, &config, pushed(3));
    let subjects = git(&["--git-dir", remote_s, "log", "--all", "--format=%s"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        ["checkpoint kura.test/log size 3", "checkpoint kura.test/log size 2"],
        "{subjects}\n{log}"
    );
    let work_s = work.to_str().expect("utf8");
    let committed = git(&["-C", work_s, "show", "HEAD:checkpoint"]);
    let state = std::fs::read_to_string(k.dir.path().join("kura.db.checkpoint")).expect("state");
    assert_eq!(committed, state);
    assert_eq!(git(&["-C", work_s, "show", "HEAD:leaves"]).lines().count(), 3);
    let out = k
        .cmd(&["verify", "--all"])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("checked against checkpoint kura.test/log (size 3)"), "{text}");
}
