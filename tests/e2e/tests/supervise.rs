//! The real `mikado` binary runs the bundled nats-server, restarts it when it dies, and
//! stops it on SIGTERM.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `f` for up to 20 s; on timeout the panic shows mikado's log (if there is one).
fn wait_for(what: &str, log: Option<&std::path::Path>, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; mikado log:\n{}",
            log.and_then(|l| std::fs::read_to_string(l).ok())
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids whose command line mentions `needle` (scanning /proc, no extra tools).
fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn supervises_restarts_and_stops_the_bundled_nats_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = kura_testkit::free_port();
    let log = dir.path().join("mikado.log");
    let keys = dir.path().join("keys");
    kura_runtime::identity::init(&keys, &[]).expect("keys");
    let mut mikado = Command::new(kura_testkit::bin("mikado"))
        .arg("run")
        .env("KURA_NATS_URL", format!("nats://127.0.0.1:{port}"))
        .env("KURA_NATS__CONFIG_DIR", dir.path())
        .env("KURA_NATS__KEYS_DIR", &keys)
        .env("KURA_NATS_SEED", keys.join("mikado.nk"))
        .env("KURA_DB", dir.path().join("kura.db"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn mikado");
    // The generated config: a fresh private file in the config directory.
    let find_conf = || {
        std::fs::read_dir(dir.path())
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("kura-nats-"))
            })
    };
    let mut conf = std::path::PathBuf::new();
    // Our own server, not just anything answering on the port: the generated config exists,
    // exactly one nats-server runs with it, and the port accepts connections.
    wait_for("nats-server to listen", Some(&log), || {
        if let Ok(Some(status)) = mikado.try_wait() {
            panic!(
                "mikado exited early ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        let Some(found) = find_conf() else {
            return false;
        };
        conf = found;
        pids_with(&conf.display().to_string()).len() == 1
            && TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let needle = conf.display().to_string();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&conf).expect("meta").permissions()
        ) & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&conf).expect("generated config");
    assert!(
        text.contains("host: \"127.0.0.1\"") && text.contains(&format!("port: {port}")),
        "{text}"
    );
    let first = pids_with(&needle);
    assert_eq!(first.len(), 1, "one nats-server child");

    // It dies; mikado starts a new one.
    Command::new("kill")
        .args(["-KILL", &first[0].to_string()])
        .status()
        .expect("kill");
    wait_for("a new nats-server", Some(&log), || {
        let now = pids_with(&needle);
        now.len() == 1 && now[0] != first[0] && TcpStream::connect(("127.0.0.1", port)).is_ok()
    });

    // SIGTERM: mikado stops its server and exits 0.
    Command::new("kill")
        .args(["-TERM", &mikado.id().to_string()])
        .status()
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = mikado.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "mikado did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    wait_for("the server to be gone", Some(&log), || {
        pids_with(&needle).is_empty()
    });
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(!conf.exists(), "the generated config is removed on stop");
}

#[test]
fn external_mode_starts_no_server_and_bad_config_is_exit_2() {
    let port = kura_testkit::free_port();
    let mut mikado = Command::new(kura_testkit::bin("mikado"))
        .arg("run")
        .env("KURA_NATS_URL", format!("nats://127.0.0.1:{port}"))
        .env("KURA_NATS__MODE", "external")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no server in external mode"
    );
    Command::new("kill")
        .args(["-TERM", &mikado.id().to_string()])
        .status()
        .expect("kill");
    assert_eq!(mikado.wait().expect("wait").code(), Some(0));

    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("m.toml");
    std::fs::write(&cfg, "[nats]\nmood = \"happy\"\n").expect("write");
    let out = Command::new(kura_testkit::bin("mikado"))
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mood"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(kura_testkit::bin("mikado"))
        .arg("print-default-config")
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("mode = \"embedded\""));
}
