//! `kura up` from nothing (issue 39): keys, config, database and a person's key made under a
//! state directory, the bundled bus and every daemon under one supervisor; the console
//! answers, a session runs through the shell `kura up --env` sets up, a killed daemon is
//! started again, a second `kura up` finds it up, and `kura down` leaves no process.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kura_testkit::bin;

fn kura(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(bin("kura"));
    cmd.args(args).arg("--dir").arg(dir);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
        cmd.env_remove(k);
    }
    cmd.output().expect("kura")
}

/// Processes whose environment names the state directory: the supervisor's daemons.
fn ours(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&needle))
        })
        .collect()
}

/// The pid the daemon `name` runs as (by its `KURA_INSTANCE`).
fn daemon_pid(dir: &Path, name: &str) -> Option<u32> {
    ours(dir).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
            env.split(|b| *b == 0)
                .any(|v| v == format!("KURA_INSTANCE={name}").as_bytes())
        })
    })
}

#[test]
fn kura_up_runs_the_stack_from_nothing_restarts_a_killed_daemon_and_kura_down_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("state");
    let started = Instant::now();
    let up = kura(&dir, &["up"]);
    let said = String::from_utf8_lossy(&up.stdout).into_owned();
    assert!(
        up.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(
        said.starts_with("Kura is up") && said.contains("http://127.0.0.1:"),
        "{said}"
    );
    println!(
        "kura up: the console answered {} ms after the first command",
        started.elapsed().as_millis()
    );
    let chosen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("up.json")).expect("up.json"))
            .expect("json");
    let port = chosen["console_port"].as_u64().expect("port") as u16;
    let (status, _, page) = kura_testkit::console::http(port, "GET", "/login", &[], "");
    assert_eq!(status, 200, "{page}");

    // A shell set up by `kura up --env` runs a session through the stack.
    let env = String::from_utf8_lossy(&kura(&dir, &["up", "--env"]).stdout).into_owned();
    let mut submit = Command::new(bin("minato"));
    submit.args([
        "submit",
        "Make a shopping list",
        "--wait",
        "--timeout",
        "60",
    ]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
        submit.env_remove(k);
    }
    for line in env.lines() {
        let (k, v) = line
            .strip_prefix("export ")
            .and_then(|l| l.split_once('='))
            .expect("an export line");
        submit.env(k, v.trim_matches('\''));
    }
    let out = submit.output().expect("minato submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Make a shopping list"));

    // A daemon killed is started again by the supervisor.
    let hashi = daemon_pid(&dir, "hashi").expect("hashi runs");
    let killed = Command::new("kill")
        .args(["-KILL", &hashi.to_string()])
        .status();
    assert!(killed.is_ok_and(|s| s.success()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if daemon_pid(&dir, "hashi").is_some_and(|p| p != hashi) {
            break;
        }
        assert!(Instant::now() < deadline, "hashi was not started again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let again = kura(&dir, &["up"]);
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("Kura is already up"));

    let down = kura(&dir, &["down"]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(String::from_utf8_lossy(&down.stdout).starts_with("Kura is down"));
    assert_eq!(ours(&dir), Vec::<u32>::new(), "kura down leaves no process");
    let twice = kura(&dir, &["down"]);
    assert!(String::from_utf8_lossy(&twice.stdout).starts_with("Kura is not running"));
}
