//! Where history is anchored and who can reach it: a git witness that never runs what
//! another process planted in its repository, a signer that never starts a fresh log
//! because its head file went missing, and `kura status` / `kura verify` that say so when
//! history is anchored nowhere.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kura_testkit::cli::{Kura, bin};

/// Runs `kura serve` with `config` (and `env`, e.g. `$CREDENTIALS_DIRECTORY` as systemd hands
/// the log key over) until `done` holds (or 30 s), then stops it; returns its log.
fn serve_until(
    k: &Kura,
    config: &Path,
    env: &[(&str, std::ffi::OsString)],
    done: impl Fn() -> bool,
) -> String {
    let log = k.dir.path().join("serve.log");
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config"])
        .arg(config)
        .env_remove("KURA_SERVE_CONFIG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .env("KURA_DB", &k.db)
        .env("KURA_NATS_URL", "nats://127.0.0.1:1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = cmd.spawn().expect("serve");
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

fn git(args: &[&str]) -> String {
    let out = Command::new("git").args(args).output().expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An executable shell script at `path` that appends `what` to `marker`.
fn evil_script(path: &Path, marker: &Path, what: &str) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\necho {what} >> '{}'\nenv >> '{}'\n",
            marker.display(),
            marker.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Plants in the git witness's repository everything that makes git run a program: hooks
/// (in `.git/hooks` and in a `core.hooksPath` of its own), an fsmonitor, a clean filter
/// for every path, a pager and an editor. Each writes to `marker`.
fn plant(work: &Path, marker: &Path) {
    let hooks = work.join(".git/hooks");
    std::fs::create_dir_all(&hooks).expect("hooks");
    let elsewhere = work.join(".git/evil-hooks");
    std::fs::create_dir_all(&elsewhere).expect("evil hooks");
    for hook in [
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "pre-push",
        "reference-transaction",
        "post-index-change",
        "pre-auto-gc",
    ] {
        evil_script(&hooks.join(hook), marker, hook);
        evil_script(&elsewhere.join(hook), marker, &format!("hooksPath-{hook}"));
    }
    let fsmonitor = work.join(".git/fsmonitor.sh");
    evil_script(&fsmonitor, marker, "fsmonitor");
    let filter = work.join(".git/filter.sh");
    std::fs::write(
        &filter,
        format!("#!/bin/sh\necho filter >> '{}'\ncat\n", marker.display()),
    )
    .expect("filter");
    std::fs::set_permissions(&filter, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::create_dir_all(work.join(".git/info")).expect("info");
    std::fs::write(work.join(".git/info/attributes"), "* filter=evil\n").expect("attributes");
    let config = work.join(".git/config");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "[core]\n\tfsmonitor = {fs}\n\thooksPath = {hp}\n\tpager = {fs}\n\teditor = {fs}\n\
         [filter \"evil\"]\n\tclean = {f}\n\tsmudge = {f}\n\trequired = true\n\
         [commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {fs}\n",
        fs = fsmonitor.display(),
        hp = elsewhere.display(),
        f = filter.display(),
    ));
    std::fs::write(&config, text).expect("config");
}

/// Attack: `kura serve` ran `git add/commit/push` in a work tree every unit could write, so a
/// daemon planted a hook (or `core.fsmonitor`, a filter, a pager) that ran inside `kura serve`
/// with `$CREDENTIALS_DIRECTORY` and copied the log key. Git now runs with hooks, fsmonitor,
/// filters and pagers off and a scrubbed environment: nothing planted runs, and the
/// checkpoint is still committed and pushed.
#[test]
fn git_witness_never_runs_a_planted_hook() {
    let k = Kura::new();
    let (key, vkey) = k.note_key("log.key", "kura.test/log", false);
    let remote = k.dir.path().join("remote.git");
    let remote_s = remote.to_str().expect("utf8");
    git(&["init", "-q", "--bare", remote_s]);
    let work = k.dir.path().join("witness-repo");
    git(&["init", "-q", work.to_str().expect("utf8")]);
    let marker = k.dir.path().join("marker");
    plant(&work, &marker);
    // A credentials directory as systemd hands it over: what a hook would copy.
    let creds = k.dir.path().join("credentials");
    std::fs::create_dir(&creds).expect("creds");
    std::fs::copy(&key, creds.join("log.key")).expect("log.key");
    std::fs::set_permissions(
        creds.join("log.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    let config = k.dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlog_verifier = {vkey:?}\nsweep_interval_ms = 3600000\nsign_interval_ms = 1000\n\n[[serve.witness_git]]\npath = {work:?}\npush = {remote_s:?}\n"
        ),
    )
    .expect("config");
    let session = k.ok(&["session", "new"]);
    k.seal_text(&session, "a", "one");
    trust_current(&k, &key);
    let pushed = || {
        Command::new("git")
            .args(["--git-dir", remote_s, "log", "--all", "--format=%s"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("size 1"))
    };
    // Every git kura serve runs goes through a wrapper that records its environment.
    let bin_dir = k.dir.path().join("bin");
    std::fs::create_dir(&bin_dir).expect("bin");
    let env_log = k.dir.path().join("git-env");
    let real_git = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .expect("sh")
            .stdout,
    )
    .expect("utf8");
    std::fs::write(
        bin_dir.join("git"),
        format!(
            "#!/bin/sh
env >> '{}'
printf '%s\\n' \"$@\" >> '{}.args'
exec '{}' \"$@\"\n",
            env_log.display(),
            env_log.display(),
            real_git.trim()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(bin_dir.join("git"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [
        ("CREDENTIALS_DIRECTORY", creds.clone().into_os_string()),
        ("PATH", path.into()),
        ("GIT_CONFIG_PARAMETERS", "'core.hookspath'='/tmp'".into()),
    ];
    let log = serve_until(&k, &config, &env, pushed);
    let seen = std::fs::read_to_string(&env_log).expect("git ran");
    assert!(!seen.contains("CREDENTIALS_DIRECTORY"), "{seen}");
    assert!(!seen.contains("GIT_CONFIG_PARAMETERS"), "{seen}");
    assert!(seen.contains("GIT_CONFIG_NOSYSTEM=1"), "{seen}");
    // ssh reads ~/.ssh/config from the passwd home (writable by every unit): never here.
    let args = std::fs::read_to_string(env_log.with_extension("args")).expect("git args");
    assert!(
        args.lines()
            .any(|a| a.starts_with("core.sshCommand=ssh -F /dev/null ")),
        "{args}"
    );
    assert!(
        !marker.exists(),
        "a planted program ran inside kura serve:\n{}\nserve log:\n{log}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    let work_s = work.to_str().expect("utf8");
    assert_eq!(
        git(&["--git-dir", remote_s, "log", "--all", "--format=%s"]).trim(),
        "checkpoint kura.test/log size 1",
        "{log}"
    );
    let committed = git(&["-C", work_s, "show", "HEAD:checkpoint"]);
    assert!(committed.starts_with("kura.test/log\n1\n"), "{committed}");
    assert_eq!(
        git(&["-C", work_s, "show", "HEAD:leaves"]).lines().count(),
        1
    );
}

/// The operator's explicit act that starts the signer's head on a log that already has
/// leaves (a fresh install signs its empty log on its own).
fn trust_current(k: &Kura, key: &Path) {
    k.ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
}

/// `kura verify --all` and `kura status` as the installed config has them.
fn with_config(k: &Kura, config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = k
        .cmd(args)
        .env("KURA_SERVE_CONFIG", config)
        .output()
        .expect("kura");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Attack: on the default install (no witness) the signer's head sat beside the database,
/// writable by every daemon. A compromised daemon rewrote history consistently, deleted the
/// head, and within one sign interval the signer signed the rewritten log as a fresh one —
/// no alarm, and `kura verify --all` said every hash matched. A missing head with a
/// non-empty log is now an ALARM: nothing is signed until a person trusts the log as it is,
/// and `kura status` / `kura verify` say history is anchored nowhere.
#[test]
fn deleting_the_checkpoint_file_does_not_hide_a_rewrite() {
    let k = Kura::new();
    let (key, vkey) = k.note_key("log.key", "kura.test/log", false);
    let config = k.dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlog_key = {key:?}\nlog_verifier = {vkey:?}\nsweep_interval_ms = 3600000\nsign_interval_ms = 1000\n"
        ),
    )
    .expect("config");
    let head = k.dir.path().join("kura.db.checkpoint");
    let signed = |size: u64| {
        let head = head.clone();
        move || std::fs::read_to_string(&head).is_ok_and(|t| t.contains(&format!("\n{size}\n")))
    };
    // A fresh install: the signer starts its head on the empty log by itself.
    serve_until(&k, &config, &[], signed(0));
    let session = k.ok(&["session", "new", "--label", "payments"]);
    k.seal_text(&session, "groceries", "bought rice");
    let early = k.dir.path().join("early.db");
    std::fs::copy(&k.db, &early).expect("copy");
    k.seal_text(&session, "payment", "paid 10 EUR to alice");
    serve_until(&k, &config, &[], signed(2));

    // The rewrite, consistent by construction, and the head deleted.
    std::fs::copy(&early, &k.db).expect("rewrite");
    let _ = std::fs::remove_file(k.dir.path().join("kura.db-wal"));
    k.seal_text(&session, "payment", "paid 9000 EUR to mallory");
    std::fs::remove_file(&head).expect("delete the head");

    // The signer refuses, loudly, says what to do, and signs nothing.
    let log = serve_until(&k, &config, &[], || {
        std::fs::read_to_string(k.dir.path().join("serve.log"))
            .is_ok_and(|l| l.matches("ALARM").count() >= 2)
    });
    assert!(log.contains("ALARM"), "{log}");
    assert!(log.contains("--trust-current"), "says what to do: {log}");
    assert!(!head.exists(), "nothing signed:\n{log}");
    let (_, status) = with_config(&k, &config, &["status"]);
    assert!(status.contains("ALARM"), "{status}");
    assert!(status.contains("anchored nowhere"), "{status}");
    let (code, verify) = with_config(&k, &config, &["verify", "--all"]);
    assert!(verify.contains("anchored nowhere"), "{verify}");
    assert_eq!(code, Some(0), "every hash does match: {verify}");

    // Signing on demand is refused the same way, until a person says to trust the log.
    let (_, err) = k.fails(2, &["checkpoint", "--key", key.to_str().expect("utf8")]);
    assert!(err.contains("--trust-current"), "{err}");
    assert!(!head.exists());
    trust_current(&k, &key);
    assert!(std::fs::read_to_string(&head).is_ok_and(|t| t.contains("\n2\n")));
    let log = serve_until(&k, &config, &[], || {
        std::fs::read_to_string(k.dir.path().join("serve.log"))
            .is_ok_and(|l| l.contains("checkpoint signed"))
    });
    assert!(!log.contains("ALARM"), "{log}");
}

/// Cost: with a witness directory on by default, every sign round rewrote the signer's head
/// and the witness's checkpoint (and fsynced its leaves) though the log had not grown — a
/// durable write a minute on an SD card for nothing. An unchanged log writes nothing.
#[test]
fn an_unchanged_log_is_not_written_again_every_round() {
    use std::os::unix::fs::MetadataExt as _;
    let k = Kura::new();
    let (key, vkey) = k.note_key("log.key", "kura.test/log", false);
    let witness = k.dir.path().join("witness");
    let config = k.dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nlog_key = {key:?}\nlog_verifier = {vkey:?}\nwitness_dirs = [{witness:?}]\nsweep_interval_ms = 3600000\nsign_interval_ms = 1000\n"
        ),
    )
    .expect("config");
    let head = k.dir.path().join("kura.db.checkpoint");
    let files = [
        head.clone(),
        witness.join("checkpoint"),
        witness.join("leaves"),
    ];
    serve_until(&k, &config, &[], || files.iter().all(|f| f.exists()));
    let stamp = || -> Vec<(u64, i64, i64)> {
        files
            .iter()
            .chain([&witness])
            .map(|f| {
                let m = std::fs::metadata(f).expect("metadata");
                (m.ino(), m.mtime(), m.mtime_nsec())
            })
            .collect()
    };
    let before = stamp();
    let log = serve_until(&k, &config, &[], || {
        std::fs::read_to_string(k.dir.path().join("serve.log"))
            .is_ok_and(|l| l.matches("checkpoint signed").count() >= 3)
    });
    assert!(log.matches("checkpoint signed").count() >= 3, "{log}");
    assert_eq!(
        stamp(),
        before,
        "an unchanged log was written again:\n{log}"
    );
    // A log that grows is still signed and witnessed.
    let session = k.ok(&["session", "new"]);
    k.seal_text(&session, "a", "one");
    serve_until(&k, &config, &[], || {
        std::fs::read_to_string(witness.join("checkpoint")).is_ok_and(|t| t.contains("\n1\n"))
    });
    assert!(std::fs::read_to_string(&head).is_ok_and(|t| t.contains("\n1\n")));
}
