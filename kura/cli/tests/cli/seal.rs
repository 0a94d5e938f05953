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
    // The signer's history starts here (a log with leaves needs a person to say so).
    k.ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
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

    // The signer does not start a fresh log because its memory was deleted: it says so
    // loudly and signs nothing; the witness's checkpoint is untouched.
    let serve_log = k.dir.path().join("serve.log");
    let log = serve_until(&k, &config, || {
        std::fs::read_to_string(&serve_log).is_ok_and(|l| l.contains("ALARM"))
    });
    assert!(log.contains("ALARM: not signing a checkpoint"), "{log}");
    assert!(!Path::new(&state).exists(), "{log}");
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
    let note = k.ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
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
    k.ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
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
        [
            "checkpoint kura.test/log size 3",
            "checkpoint kura.test/log size 2"
        ],
        "{subjects}\n{log}"
    );
    let work_s = work.to_str().expect("utf8");
    let committed = git(&["-C", work_s, "show", "HEAD:checkpoint"]);
    let state = std::fs::read_to_string(k.dir.path().join("kura.db.checkpoint")).expect("state");
    assert_eq!(committed, state);
    assert_eq!(
        git(&["-C", work_s, "show", "HEAD:leaves"]).lines().count(),
        3
    );
    let out = k
        .cmd(&["verify", "--all"])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("checked against checkpoint kura.test/log (size 3)"),
        "{text}"
    );
}

/// Attack: anyone with write access to the file could seal a ledger, and it looked the same
/// as one a daemon sealed. Each seal now carries the sealer's signature; `kura verify` with
/// the install's keyring names a ledger sealed by a stranger's key, one sealed unsigned,
/// and a signature moved onto another key; `kura log` shows who sealed each.
#[test]
fn a_ledger_sealed_by_an_unknown_key_or_unsigned_is_a_named_failure() {
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    k.ok(&["keys", "init", "--dir", keys.to_str().expect("utf8")]);
    let ring = keys.join("identities.toml");
    let ring_s = ring.to_str().expect("utf8");
    let operator = keys.join("operator.nk");
    let session = k.ok(&["session", "new"]);
    let seal = |label: &str, key: Option<&Path>| {
        let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", label]);
        let mut args = vec!["ledger", "seal", &ledger];
        let key_s;
        if let Some(key) = key {
            key_s = key.to_str().expect("utf8").to_owned();
            args.extend(["--sealer-key", &key_s]);
        }
        k.ok(&args);
        ledger
    };
    let good = seal("by-operator", Some(&operator));
    k.ok(&["verify", "--all", "--keyring", ring_s]);
    let config = k.dir.path().join("serve.toml");
    std::fs::write(&config, format!("[serve]\nkeyring = {ring:?}\n")).expect("config");
    let log = k
        .cmd(&["log", &session])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("log");
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("Sealer:  operator (U"), "{log}");

    // A stranger's key: a valid seed from another install's keys, not in this keyring.
    let elsewhere = k.dir.path().join("elsewhere");
    k.ok(&["keys", "init", "--dir", elsewhere.to_str().expect("utf8")]);
    let stranger = elsewhere.join("operator.nk");
    let by_stranger = seal("by-stranger", Some(&stranger));
    let unsigned = seal("unsigned", None);
    // Without a keyring every signature still verifies; nothing is said about who.
    k.ok(&["verify", "--all"]);
    let (out, _) = k.fails(1, &["verify", "--all", "--keyring", ring_s]);
    assert!(
        out.contains("sealer_unknown") && out.contains(&by_stranger),
        "{out}"
    );
    assert!(
        out.contains("sealer_missing") && out.contains(&unsigned),
        "{out}"
    );
    assert!(!out.contains(&good), "{out}");

    // The attacker moves the operator's name onto their own seal: the signature breaks.
    let operator_nkey =
        kura_tlog::storage::LogStorage::sealer_of(&kura_store::SealLog::over(&k.raw()), &good)
            .expect("read")
            .expect("signed");
    let conn = k.drop_triggers();
    conn.execute(
        "UPDATE ledger_seals SET sealer = ?1 WHERE ledger_id = ?2",
        [&operator_nkey, &by_stranger],
    )
    .expect("tamper");
    drop(conn);
    let (out, _) = k.fails(1, &["verify", "--all"]);
    assert!(
        out.contains("sealer_signature") && out.contains(&by_stranger),
        "{out}"
    );
}

/// Broke in the demo: a serve config that names only a keyring (no log key yet) made every
/// `kura verify` exit 2 asking for `--log-key`; it must verify, with the keyring applied.
#[test]
fn a_serve_config_without_a_log_key_does_not_demand_one() {
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    k.ok(&["keys", "init", "--dir", keys.to_str().expect("utf8")]);
    let session = k.ok(&["session", "new"]);
    let ledger = k.ok(&[
        "ledger",
        "open",
        "--session",
        &session,
        "--label",
        "unsigned",
    ]);
    k.ok(&["ledger", "seal", &ledger]);
    let config = k.dir.path().join("serve.toml");
    let ring = keys.join("identities.toml");
    std::fs::write(&config, format!("[serve]\nkeyring = {ring:?}\n")).expect("config");
    let out = k
        .cmd(&["verify", "--all"])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("verify");
    let text = String::from_utf8_lossy(&out.stdout);
    // Exit 1 naming the unsigned seal: the keyring was applied and no log key was asked for.
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("sealer_missing") && text.contains(&ledger),
        "{text}"
    );
}

/// One proof from a record to a signed checkpoint, checked offline with only the log's
/// verifier key: record → ledger root → ledger hash → seal-log leaf → checkpoint root →
/// signature. Every link that is edited, or a checkpoint under another key, fails it.
#[test]
fn a_record_proves_all_the_way_to_a_signed_checkpoint_offline() {
    let k = Kura::new();
    let (key, vkey) = log_key(&k, "log.key");
    let (_, other_vkey) = log_key(&k, "other.key");
    let session = k.ok(&["session", "new"]);
    let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", "pay"]);
    let record = k.ok(&[
        "record",
        "add",
        "--ledger",
        &ledger,
        "--type",
        "task.deliverable",
        "--author",
        "agent:hashi",
        "--text",
        "paid 10 EUR to alice",
    ]);
    k.ok(&["ledger", "seal", &ledger]);
    seal_text(&k, &session, "next", "another");
    let note = k.ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
    let cp = k.dir.path().join("cp");
    std::fs::write(&cp, format!("{note}\n")).expect("cp");
    let cp_s = cp.to_str().expect("utf8");
    let proof = k.ok(&[
        "prove",
        &record,
        "--ledger",
        &ledger,
        "--checkpoint",
        cp_s,
        "--log-key",
        &vkey,
    ]);
    // Offline: a fresh directory with no database.
    let offline = Kura::uninit();
    let file = offline.dir.path().join("proof.json");
    let check = |text: &str, vkey: &str| {
        std::fs::write(&file, text).expect("proof");
        offline.run(&[
            "verify-proof",
            file.to_str().expect("utf8"),
            "--log-key",
            vkey,
        ])
    };
    let ok = check(&proof, &vkey);
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{said}");
    assert!(
        said.contains(
            "chain ok: the ledger is leaf 0 of the seal log in checkpoint kura.test/log of size 2"
        ),
        "{said}"
    );
    let v: serde_json::Value = serde_json::from_str(&proof).expect("json");
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut w = v.clone();
        f(&mut w);
        w.to_string()
    };
    let forged = [
        edit(&|w| {
            let leaf = w["seal_log"]["leaf_data"]
                .as_str()
                .expect("leaf")
                .to_owned();
            w["seal_log"]["leaf_data"] = leaf
                .replacen("\"ledger_hash\":\"", "\"ledger_hash\":\"0", 1)
                .into();
        }),
        edit(&|w| w["seal_log"]["audit_path"][0] = "00".repeat(32).into()),
        edit(&|w| w["seal_log"]["leaf_index"] = 1.into()),
        edit(&|w| {
            let c = w["seal_log"]["checkpoint"]
                .as_str()
                .expect("cp")
                .replacen("\n2\n", "\n3\n", 1);
            w["seal_log"]["checkpoint"] = c.into();
        }),
    ];
    for text in &forged {
        let out = check(text, &vkey);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("PROOF FAILED"));
    }
    assert_eq!(check(&proof, &other_vkey).status.code(), Some(1));
    // A ledger sealed after the checkpoint cannot be chained to it yet.
    let later = seal_text(&k, &session, "later", "after the checkpoint");
    let later_record = k.json(&["show", &later])["records"][0]["record_id"]
        .as_str()
        .expect("record")
        .to_owned();
    let (_, err) = k.fails(
        2,
        &[
            "prove",
            &later_record,
            "--ledger",
            &later,
            "--checkpoint",
            cp_s,
            "--log-key",
            &vkey,
        ],
    );
    assert!(err.contains("sealed after that checkpoint"), "{err}");
}

/// Attack (issue 24 item 9): after `kura keys rotate`, every earlier seal verified as
/// `sealer_unknown`, so `verify --keyring` (and the sweep) failed forever and a real
/// problem drowned in it. A rotated key stays in the keyring for what it sealed before its
/// successor began, and nothing after: a stolen old seed cannot seal new history.
#[test]
fn a_rotated_key_verifies_what_it_sealed_before_and_nothing_after() {
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    let keys_s = keys.to_str().expect("utf8");
    k.ok(&["keys", "init", "--dir", keys_s]);
    let ring = keys.join("identities.toml");
    let ring_s = ring.to_str().expect("utf8");
    let seed = keys.join("operator.nk");
    let stolen = k.dir.path().join("old-operator.nk");
    std::fs::copy(&seed, &stolen).expect("copy");
    let session = k.ok(&["session", "new"]);
    let seal = |label: &str, key: &Path| {
        let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", label]);
        k.ok(&[
            "ledger",
            "seal",
            &ledger,
            "--sealer-key",
            key.to_str().expect("utf8"),
        ]);
        ledger
    };
    let before = seal("before", &seed);
    k.ok(&["keys", "rotate", "--dir", keys_s, "operator"]);
    // Where the old key stopped is recorded with it: the seal log's size at the rotation.
    let ids = kura_runtime::identity::Identities::load(&keys).expect("ids");
    let retired = &ids.get("operator").expect("operator").retired;
    assert_eq!(retired.len(), 1);
    assert_eq!(retired[0].until, Some(1), "{retired:?}");
    let after = seal("after", &seed);
    k.ok(&["verify", "--all", "--keyring", ring_s]);
    // The old seed, kept by someone, seals after its successor began: named, not trusted.
    let forged = seal("forged", &stolen);
    let (out, _) = k.fails(1, &["verify", "--all", "--keyring", ring_s]);
    assert!(
        out.contains("sealer_retired") && out.contains(&forged),
        "{out}"
    );
    assert!(!out.contains(&before) && !out.contains(&after), "{out}");
}

/// Broke (issue 24 item 10): `kura session fork` without `--sealer-key` on an install with a
/// keyring exited 0 and left a ledger that fails `verify`. It is refused (exit 2, saying
/// which flag), and nothing is written.
#[test]
fn an_unsigned_fork_on_an_install_that_checks_sealers_is_refused_unwritten() {
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    k.ok(&["keys", "init", "--dir", keys.to_str().expect("utf8")]);
    let operator = keys.join("operator.nk");
    let session = k.ok(&["session", "new"]);
    let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", "one"]);
    k.ok(&[
        "ledger",
        "seal",
        &ledger,
        "--sealer-key",
        operator.to_str().expect("utf8"),
    ]);
    let config = k.dir.path().join("serve.toml");
    let ring = keys.join("identities.toml");
    std::fs::write(&config, format!("[serve]\nkeyring = {ring:?}\n")).expect("config");
    let count = |t: &str| -> i64 {
        k.raw()
            .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .expect("count")
    };
    let (sessions, ledgers) = (count("sessions"), count("ledgers"));
    let out = k
        .cmd(&["session", "fork", &ledger])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("fork");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sealer-key"), "{err}");
    assert_eq!((count("sessions"), count("ledgers")), (sessions, ledgers));
    let forked = k
        .cmd(&[
            "session",
            "fork",
            &ledger,
            "--sealer-key",
            operator.to_str().expect("utf8"),
        ])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("fork");
    assert!(forked.status.success());
    let verified = k
        .cmd(&["verify", "--all"])
        .env("KURA_SERVE_CONFIG", &config)
        .output()
        .expect("verify");
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

/// The gap a computed cut-off leaves (issue 24 item 9): until the new key seals anything, an
/// old seed kept by someone could seal at any position. The rotation records the seal log's
/// size, so a seal by the old key after the rotation is named even before the new key's
/// first seal.
#[test]
fn a_rotated_key_cannot_seal_before_its_successor_does() {
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    let keys_s = keys.to_str().expect("utf8");
    k.ok(&["keys", "init", "--dir", keys_s]);
    let ring = keys.join("identities.toml");
    let seed = keys.join("operator.nk");
    let stolen = k.dir.path().join("old-operator.nk");
    std::fs::copy(&seed, &stolen).expect("copy");
    let session = k.ok(&["session", "new"]);
    let seal = |label: &str, key: &Path| {
        let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", label]);
        let key = key.to_str().expect("utf8");
        k.ok(&["ledger", "seal", &ledger, "--sealer-key", key]);
        ledger
    };
    let before = seal("before", &seed);
    k.ok(&["keys", "rotate", "--dir", keys_s, "operator"]);
    let forged = seal("forged", &stolen);
    let (out, _) = k.fails(
        1,
        &["verify", "--all", "--keyring", ring.to_str().expect("utf8")],
    );
    assert!(
        out.contains("sealer_retired") && out.contains(&forged),
        "{out}"
    );
    assert!(!out.contains(&before), "{out}");
}

/// Issue 35 item 16: a Kura seed (a service's, the hub's `hub-admin.seed`) is a root secret
/// whose derived key logs in, so standard NATS tools given it were refused. `kura keys
/// bus-seed` writes the derived login seed, 0600, never over a file, and it is the key the
/// identities list admits.
#[test]
fn the_bus_seed_derived_from_a_kura_seed_is_the_one_the_bus_admits() {
    use std::os::unix::fs::PermissionsExt as _;
    let k = Kura::new();
    let keys = k.dir.path().join("keys");
    k.ok(&["keys", "init", "--dir", keys.to_str().expect("utf8")]);
    let out = k.dir.path().join("serve.bus.nk");
    let (seed, out_s) = (
        keys.join("serve.nk").display().to_string(),
        out.display().to_string(),
    );
    let said = k.ok(&["keys", "bus-seed", "--seed", &seed, "--out", &out_s]);
    let text = std::fs::read_to_string(&out).expect("written");
    let pair = nkeys::KeyPair::from_seed(text.trim()).expect("an nkey seed");
    assert_eq!(
        std::fs::metadata(&out).expect("meta").permissions().mode() & 0o777,
        0o600
    );
    assert!(said.contains(&pair.public_key()), "{said}");
    assert!(
        !said.contains(text.trim()),
        "the seed is never printed: {said}"
    );
    let list = k.ok(&[
        "keys",
        "list",
        "--dir",
        keys.to_str().expect("utf8"),
        "--json",
    ]);
    assert!(
        list.contains(&pair.public_key()),
        "the bus admits it: {list}"
    );
    let serve_root = std::fs::read_to_string(keys.join("serve.nk")).expect("seed");
    let root = nkeys::KeyPair::from_seed(serve_root.trim()).expect("seed");
    assert_ne!(
        root.public_key(),
        pair.public_key(),
        "not the root key itself"
    );
    let (_, err) = k.fails(2, &["keys", "bus-seed", "--seed", &seed, "--out", &out_s]);
    assert!(err.contains("must not exist"), "{err}");
}
