//! `shell.run` under the real sandbox helper (`hashi sandbox-exec`): each test is an attack a
//! model tried through tool arguments, and shows it refused by the kernel with nothing
//! outside the workspace read or changed.

use std::path::{Path, PathBuf};

use hashi::sandbox::SandboxState;
use hashi::tools::{Toolbox, ToolsConfig, Workspace};
use serde_json::{Map, Value, json};

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hashi"))
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    toolbox: Toolbox,
}

fn setup(tweak: impl FnOnce(&mut ToolsConfig)) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("workspaces");
    let mut config = ToolsConfig {
        workspace_root: root.display().to_string(),
        shell_allowlist: [
            "ls", "cat", "wc", "echo", "date", "sh", "sleep", "head", "python3",
        ]
        .map(String::from)
        .to_vec(),
        shell_timeout_ms: 20_000,
        ..ToolsConfig::default()
    };
    tweak(&mut config);
    let toolbox = Toolbox::new(config, helper());
    Setup {
        _dir: dir,
        root,
        toolbox,
    }
}

impl Setup {
    fn ws(&self, session: &str) -> Workspace {
        self.toolbox.workspace(session).expect("workspace")
    }

    fn run(&self, session: &str, argv: &[&str]) -> Result<Value, hashi::tools::ToolError> {
        let args: Map<String, Value> = json!({"argv": argv}).as_object().cloned().expect("object");
        let tool = self.toolbox.get("shell.run").expect("shell.run");
        tool.run(&self.ws(session), &args)
    }

    /// Runs `argv` in session s1 and asserts the kernel refused it: a failing exit and
    /// "Permission denied" on stderr, and `forbidden` nowhere in the output.
    fn refused(&self, argv: &[&str], forbidden: &str) {
        let r = self.run("s1", argv).expect("the program ran");
        assert_ne!(r["exit_code"], 0, "{argv:?} succeeded: {r}");
        let text = r.to_string();
        assert!(
            r["stderr"]
                .as_str()
                .unwrap_or("")
                .contains("Permission denied"),
            "{argv:?}: {r}"
        );
        assert!(
            !text.contains(forbidden),
            "{argv:?} leaked {forbidden:?}: {r}"
        );
    }
}

fn require_landlock(s: &Setup) -> bool {
    match s.toolbox.sandbox_state() {
        SandboxState::Landlock(_) => true,
        other => {
            // CI and the Pi have Landlock; say loudly where a kernel does not.
            eprintln!("SKIPPED: no Landlock on this kernel ({other})");
            false
        }
    }
}

#[test]
fn probe_reports_landlock_abi() {
    let s = setup(|_| {});
    let state = s.toolbox.sandbox_state().clone();
    assert!(
        matches!(state, SandboxState::Landlock(v) if v >= 1),
        "this machine has Landlock; the probe said {state}"
    );
}

/// Attack: `cat ../<other-session>/secret.txt` read another session's workspace.
#[test]
fn shell_arg_reads_other_sessions_workspace() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    s.ws("s1");
    std::fs::write(s.ws("s2").root().join("secret.txt"), "OTHER-SESSION").expect("write");
    s.refused(&["cat", "../s2/secret.txt"], "OTHER-SESSION");
    s.refused(&["head", "-c", "100", "../s2/secret.txt"], "OTHER-SESSION");
}

/// Attack: `ls -la ..` listed every session.
#[test]
fn shell_arg_lists_parent_directory() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    s.ws("s1");
    s.ws("s2-private");
    s.refused(&["ls", "-la", ".."], "s2-private");
    s.refused(&["ls", "/"], "etc");
}

/// Attack: `wc -c <the database>` reached the store.
#[test]
fn shell_arg_reads_the_database() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    let db = s.root.parent().expect("parent").join("kura.db");
    std::fs::write(&db, "SQLite format 3\0DATABASE-BYTES").expect("write");
    let db = db.display().to_string();
    s.refused(&["wc", "-c", &db], "DATABASE-BYTES");
    s.refused(&["cat", &db], "DATABASE-BYTES");
}

/// Attack: `cat /proc/<minato pid>/environ` put an API key into a record.
#[test]
fn shell_arg_reads_another_process_environ() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .env("OPENAI_API_KEY", "sk-VICTIM-KEY")
        .spawn()
        .expect("victim");
    let environ = format!("/proc/{}/environ", victim.id());
    s.refused(&["cat", &environ], "sk-VICTIM-KEY");
    s.refused(&["cat", "/proc/self/environ"], "KURA_SESSION_ID=");
    let _ = victim.kill();
    let _ = victim.wait();
}

/// Attack: `date -f /etc/hostname` read a file outside through an option.
#[test]
fn shell_option_reads_a_file_outside() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let r = s.run("s1", &["date", "-f", "/etc/hostname"]).expect("ran");
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("Permission denied"),
        "{r}"
    );
    if !hostname.trim().is_empty() {
        assert!(!r.to_string().contains(hostname.trim()), "{r}");
    }
    s.refused(&["cat", "/etc/passwd"], "root:");
}

/// Writes outside the workspace are refused; inside they work.
#[test]
fn shell_writes_only_inside_the_workspace() {
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    let outside = s.root.parent().expect("parent").join("planted");
    let target = outside.display().to_string();
    let r = s
        .run(
            "s1",
            &[
                "sh",
                "-c",
                &format!("echo x > {target}; echo ok > inside.txt; cat inside.txt"),
            ],
        )
        .expect("ran");
    assert_eq!(r["stdout"], "ok\n", "{r}");
    assert!(
        !outside.exists(),
        "a file was created outside the workspace"
    );
    assert_eq!(
        std::fs::read_to_string(s.ws("s1").root().join("inside.txt")).expect("read"),
        "ok\n"
    );
}

/// Network is denied by seccomp unless a rule grants it to the tool.
#[test]
fn shell_network_denied_unless_granted() {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let code = "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n    print('socket-open')\nexcept PermissionError:\n    print('socket-denied')";
    let s = setup(|_| {});
    if !require_landlock(&s) {
        return;
    }
    let r = s.run("s1", &["python3", "-c", code]).expect("ran");
    assert_eq!(r["stdout"], "socket-denied\n", "{r}");
    let granted = setup(|c| c.network = vec!["shell.run".into()]);
    let r = granted.run("s1", &["python3", "-c", code]).expect("ran");
    assert_eq!(r["stdout"], "socket-open\n", "{r}");
}

/// A timeout kills the program and everything it started (its own process group), and the
/// call returns without waiting for the background child.
#[test]
fn shell_timeout_kills_the_whole_process_group() {
    let s = setup(|c| c.shell_timeout_ms = 500);
    // Durations no other process on the machine is likely to be sleeping: the check below
    // reads the whole process table.
    let n = 400_000 + std::process::id() % 100_000;
    let (a, b, c) = (
        format!("sleep {n}"),
        format!("sleep {}", n + 1),
        format!("sleep {}", n + 2),
    );
    let err = s
        .run("s1", &["sh", "-c", &format!("{a} & {b}")])
        .expect_err("timed out");
    assert!(err.to_string().contains("timed out"), "{err}");
    // Background descendants of a program that exits are killed too.
    let r = s
        .run("s1", &["sh", "-c", &format!("{c} & echo started")])
        .expect("ran");
    assert_eq!(r["stdout"], "started\n", "{r}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .expect("ps");
    let ps = String::from_utf8_lossy(&ps.stdout);
    for left in [&a, &b, &c] {
        assert!(
            !ps.lines().any(|l| l.trim() == left.as_str()),
            "{left} survived: {ps}"
        );
    }
}

/// The children's largest-file rlimit is the workspace quota.
#[test]
fn shell_file_size_limited_to_the_quota() {
    let s = setup(|c| c.workspace_quota_mib = 1);
    let r = s
        .run(
            "s1",
            &["sh", "-c", "head -c 3000000 /dev/zero > big; echo done"],
        )
        .expect("ran");
    let size = std::fs::metadata(s.ws("s1").root().join("big"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        size <= 1 << 20,
        "wrote {size} bytes past a 1 MiB quota: {r}"
    );
}

/// Attack (issue 24 item 7): the quota bounded each file, not the sum — one `shell.run`
/// wrote eight 4 MiB files into a 4 MiB workspace. The total is bounded now: the program is
/// stopped once the workspace passes its quota, the files it made are removed, the call says
/// so, and a full workspace runs nothing more until something is removed.
#[test]
fn shell_cannot_fill_the_workspace_past_its_quota_with_many_files() {
    let s = setup(|c| c.workspace_quota_mib = 4);
    let quota = 4u64 << 20;
    let err = s
        .run(
            "s1",
            &[
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8; do head -c 4194304 /dev/zero > f$i; done; echo done",
            ],
        )
        .expect_err("stopped at the quota");
    assert!(err.to_string().contains("quota"), "{err}");
    let used = s.ws("s1").usage().expect("usage");
    assert!(used <= quota, "{used} bytes in a {quota}-byte workspace");
    // Filled exactly to its quota, the workspace takes no more.
    let r = s
        .run("s1", &["sh", "-c", "head -c 4194304 /dev/zero > full"])
        .expect("exactly the quota");
    assert_eq!(r["exit_code"], 0, "{r}");
    let again = s
        .run("s1", &["sh", "-c", "echo more > g"])
        .expect_err("a full workspace takes no more");
    assert!(again.to_string().contains("quota is used up"), "{again}");
    assert!(!s.ws("s1").root().join("g").exists());
}

/// The way around a rollback of new files only: grow the files that were already there.
/// Each grown file is cut back to its size before the run.
#[test]
fn shell_cannot_fill_the_workspace_past_its_quota_by_growing_old_files() {
    let s = setup(|c| c.workspace_quota_mib = 4);
    let quota = 4u64 << 20;
    s.run(
        "s2",
        &[
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7 8; do echo $i > f$i; done",
        ],
    )
    .expect("small files");
    let before = s.ws("s2").usage().expect("usage");
    let err = s
        .run(
            "s2",
            &[
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8; do head -c 4194304 /dev/zero >> f$i; done",
            ],
        )
        .expect_err("stopped at the quota");
    assert!(err.to_string().contains("cut back"), "{err}");
    let used = s.ws("s2").usage().expect("usage");
    assert!(used <= quota, "{used} bytes in a {quota}-byte workspace");
    assert_eq!(used, before, "every grown file is back to its size");
    let one = std::fs::read_to_string(s.ws("s2").root().join("f1")).expect("f1");
    assert_eq!(one, "1\n");
}

/// Output beyond what a record holds is cut, with the full size and digest.
#[test]
fn shell_huge_output_is_bounded() {
    let s = setup(|_| {});
    let r = s
        .run("s1", &["head", "-c", "5000000", "/dev/zero"])
        .expect("ran");
    assert_eq!(
        r["stdout_bytes"],
        5_000_000,
        "{}",
        hashi::tools::excerpt(&r.to_string(), 300)
    );
    assert!(r.to_string().len() < 512 * 1024);
}

/// Where the kernel has no Landlock, shell.run is refused (not run unconfined).
#[test]
fn shell_refused_when_the_sandbox_is_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toolbox = Toolbox::with_state(
        ToolsConfig {
            workspace_root: dir.path().display().to_string(),
            ..ToolsConfig::default()
        },
        helper(),
        SandboxState::Unavailable("test kernel".into()),
    );
    let ws = toolbox.workspace("s1").expect("ws");
    let args = json!({"argv": ["echo", "hi"]})
        .as_object()
        .cloned()
        .expect("object");
    let err = toolbox
        .get("shell.run")
        .expect("tool")
        .run(&ws, &args)
        .expect_err("refused");
    assert!(err.to_string().contains("sandbox is unavailable"), "{err}");
}
