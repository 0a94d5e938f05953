//! The .deb in a fresh Debian root (issue 39): `apt install ./kura_*.deb` makes the kura user,
//! keys, configs and database and starts nothing; a plain user's `kura up` runs the installed
//! binaries; a session's write is approved in the console from Chromium; `kura verify --all`
//! passes; `kura down` leaves no process; `apt remove` keeps the history, `apt purge` leaves
//! the root as it found it, but for what the owner asked to keep; a tarball install is
//! refused until `install.sh --uninstall`, and then taken over with its keys; an upgrade
//! makes and starts nothing.
//!
//! Needs root (chroot, a mount namespace): as root, or through `sudo -n`. The root comes from
//! `deploy/debian-root` (debootstrap, cached under `target/`); the package and the x86_64
//! bundle from `deploy/package` and `deploy/bundle`, run first so what is tested is this
//! tree's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::console::browser::{Browser, enrol, log_in, until};
use crate::console::decide_first;

/// Where the workspace is (the test runs in `tests/e2e`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A command run as root: directly when the test is root, else through `sudo -n`.
fn as_root(program: &str) -> Command {
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to the process's own user.
    if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", program]);
        c
    }
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `deploy/<script>` for this machine and returns the file it names on its
/// `<what>: PATH (N bytes)` line: this tree's .deb or bundle, built or found up to date.
fn deploy(script: &str, what: &str) -> PathBuf {
    let mut cmd = Command::new(repo().join("deploy").join(script));
    // What `cargo test` tells a test is not the build's: a build script that reads
    // CARGO_MANIFEST_DIR (ring's) would make the whole release build again, twice.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k == "CARGO"
            || k == "CARGO_TARGET_TMPDIR"
            || k == "CARGO_PRIMARY_PACKAGE"
            || k == "CARGO_RUSTC_CURRENT_DIR"
            || [
                "CARGO_MANIFEST_",
                "CARGO_PKG_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd.current_dir(repo()).output().expect(script);
    assert!(out.status.success(), "deploy/{script}: {}", said(&out));
    let prefix = format!("{what}: ");
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .unwrap_or_else(|| panic!("deploy/{script} names its {what}"));
    repo().join(line.split(' ').next().expect("a path"))
}

/// A fresh Debian root in a temporary directory, removed (as root, never across a mount)
/// when dropped.
struct Root {
    dir: PathBuf,
}

impl Root {
    fn make() -> Root {
        let dir = tempfile::Builder::new()
            .prefix("kura-debian-")
            .tempdir()
            .expect("tempdir")
            .keep();
        let out = as_root(repo().join("deploy/debian-root").to_str().expect("utf-8"))
            .arg(&dir)
            .current_dir(repo())
            .output()
            .expect("deploy/debian-root");
        // Canonical: the kernel names a process's root so.
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let root = Root { dir };
        assert!(out.status.success(), "deploy/debian-root: {}", said(&out));
        root
    }

    /// `script` in the root as `user`, with a clean environment and /proc mounted in a mount
    /// namespace of its own (it goes when the last process in it does; the host never sees it).
    fn run(&self, user: &str, script: &str) -> Output {
        let home = if user == "root" {
            "/root".to_owned()
        } else {
            format!("/home/{user}")
        };
        as_root("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(
                "mount -t proc proc \"$1/proc\" && exec chroot \"$1\" /usr/sbin/runuser -u \"$2\" -- \
                 /usr/bin/env -i HOME=\"$3\" USER=\"$2\" LANG=C.UTF-8 \
                 PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c \"$4\"",
            )
            .arg("sh")
            .arg(&self.dir)
            .arg(user)
            .arg(home)
            .arg(script)
            .output()
            .expect("chroot")
    }

    /// [`Root::run`], which must succeed; what it printed.
    fn ok(&self, user: &str, script: &str) -> String {
        let out = self.run(user, script);
        assert!(out.status.success(), "{script}: {}", said(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Processes whose root directory is this root.
    fn processes(&self) -> Vec<String> {
        let out = as_root("sh")
            .arg("-c")
            .arg(
                "for p in /proc/[0-9]*; do [ \"$(readlink \"$p/root\" 2>/dev/null)\" = \"$1\" ] \
                 && echo \"${p#/proc/} $(tr '\\0' ' ' < \"$p/cmdline\")\"; done; true",
            )
            .arg("sh")
            .arg(&self.dir)
            .output()
            .expect("ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every path in the root but package managers' bookkeeping, logs, caches and homes, with
    /// its type, mode and owner: what an install may add and a purge must take away again.
    fn tree(&self) -> BTreeSet<String> {
        let out = self.run(
            "root",
            "find / -xdev \\( -path /proc -o -path /var/lib/dpkg -o -path /var/lib/apt \
             -o -path /var/cache -o -path /var/log -o -path /home -o -path /tmp \
             -o -path /root -o -name '*-' \\) -prune -o -printf '%p %y %m %U %G\\n' | sort",
        );
        assert!(out.status.success(), "find: {}", said(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // A test that failed half-way leaves the stack it started: stop it first (again, while
        // a supervisor starts what was killed).
        for _ in 0..20 {
            let left = self.processes();
            if left.is_empty() {
                break;
            }
            for pid in left.iter().filter_map(|p| p.split(' ').next()) {
                let _ = as_root("kill").args(["-KILL", pid]).status();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = as_root("rm")
            .args(["-rf", "--one-file-system"])
            .arg(&self.dir)
            .status();
    }
}

/// The first turn of every session: one file write, which the default policy asks a person
/// about.
const SCRIPT: &str = r#"{"turns": [[
  {"tool": "fs.write", "args": {"path": "lists/shopping.md", "content": "- rice\n"}},
  {"deliver": "the list is written"}
]]}"#;

#[test]
fn the_deb_installs_into_a_fresh_debian_root_runs_kura_up_for_a_plain_user_and_purges_cleanly() {
    let deb = deploy("package", "package");
    let bundle = deploy("bundle", "bundle");
    let root = Root::make();
    root.ok("root", "useradd -m -s /bin/sh alice");
    let before = root.tree();
    let copied = as_root("cp")
        .arg(&deb)
        .arg(root.dir.join("tmp/kura.deb"))
        .status()
        .expect("cp");
    assert!(copied.success());

    // apt installs it offline (its dependencies are in every Debian); postinst sets up and
    // starts nothing.
    let install = root.ok("root", "apt-get install -y /tmp/kura.deb 2>&1");
    assert!(
        install.contains("Kura is installed; nothing was started."),
        "{install}"
    );
    let made = root.ok(
        "root",
        "id -u kura >/dev/null && stat -c '%n %a %U' /etc/kura/keys /etc/kura/log.key \
         /var/lib/kura /var/lib/kura/kura.db /var/lib/kura-serve /var/lib/kura-serve/checkpoint \
         && grep -c '^log_verifier' /etc/kura/serve.toml && readlink /usr/bin/kura",
    );
    for want in [
        "/etc/kura/keys 700 root",
        "/etc/kura/log.key 600 root",
        "/var/lib/kura 750 kura",
        "/var/lib/kura/kura.db 600 kura",
        "/var/lib/kura-serve 700 kura",
        "/opt/kura/bin/kura",
    ] {
        assert!(made.contains(want), "{want} in {made}");
    }
    assert_eq!(root.processes(), Vec::<String>::new(), "nothing started");
    let enabled = root.ok(
        "root",
        "ls /etc/systemd/system/*.wants 2>/dev/null | grep kura; true",
    );
    assert_eq!(enabled, "", "nothing enabled");
    // Every path the units start or hand over is where the package and its set-up put it.
    let missing = root.ok(
        "root",
        "for u in mikado serve aegis minato hashi; do \
           sed -n -e 's/^ExecStart=\\([^ ]*\\).*/\\1/p' -e 's/^LoadCredential=[^:]*:\\(.*\\)/\\1/p' \
             /usr/lib/systemd/system/kura-$u.service; \
         done | while read -r p; do test -e \"$p\" || echo \"missing: $p\"; done",
    );
    assert_eq!(missing, "", "the units name what the package installed");
    // The system's own (empty) history verifies, as its owner checks it with sudo, and that
    // leaves nothing of root's among the kura user's files.
    root.ok("root", "kura --db /var/lib/kura/kura.db verify --all");
    let roots = root.ok("root", "find /var/lib/kura /var/lib/kura-serve -user root");
    assert_eq!(roots, "", "root-owned files where the kura user writes");

    // A plain user: kura up from nothing, with the installed binaries.
    let up = root.ok("alice", "kura up");
    assert!(up.starts_with("Kura is up"), "{up}");
    let state = "$HOME/.local/share/kura";
    let chosen: serde_json::Value =
        serde_json::from_str(&root.ok("alice", &format!("cat {state}/up.json"))).expect("up.json");
    let port = chosen["console_port"].as_u64().expect("port") as u16;
    let running = root.processes();
    for daemon in ["mikado", "minato", "hashi", "aegis", "nats-server"] {
        assert!(
            running
                .iter()
                .any(|p| p.contains(&format!("/opt/kura/bin/{daemon}"))),
            "{daemon} runs from the package: {running:?}"
        );
    }

    // Her browser enrols; kura up lets it in (and takes a script with a write).
    let b = Browser::start(port);
    let key = b.run(enrol(&b.c, &b.url, "alice-laptop"));
    // Her own name is her command-line key's: refused with what to do, nothing restarted
    // (it once left aegis unable to start and the console silent).
    let same = root.run("alice", &format!("kura up --enrol alice {key}"));
    assert_eq!(same.status.code(), Some(2), "{}", said(&same));
    assert!(said(&same).contains("alice-laptop"), "{}", said(&same));
    root.ok(
        "alice",
        &format!(
            "cat > {state}/script.json <<'EOF'\n{SCRIPT}\nEOF\nkura up --enrol alice-laptop {key}"
        ),
    );
    b.run(log_in(&b.c, &b.url));

    // A session from her shell; its write waits for her, and she approves it in the browser.
    let submitted = std::thread::scope(|scope| {
        let session = scope.spawn(|| {
            root.run(
                "alice",
                "eval \"$(kura up --env)\" && minato submit 'Write the shopping list' --wait --timeout 120",
            )
        });
        let outcome = b.run(async {
            let c = &b.c;
            let waiting = "document.querySelector('table.sessions a.badge')";
            until(c, "the session's waiting approval, live", waiting).await;
            decide_first(c, "approve", "rice is fine", None, None).await
        });
        assert!(
            outcome.contains("approved by user:alice-laptop"),
            "{outcome}"
        );
        session.join().expect("submit")
    });
    assert!(submitted.status.success(), "{}", said(&submitted));
    let written = root.ok(
        "alice",
        &format!("cat {state}/workspaces/*/lists/shopping.md"),
    );
    assert_eq!(written, "- rice\n");
    // Her shell holds her stack's history to her stack's signed head, not to the machine's
    // /etc/kura/serve.toml (whose head is the system's, and not hers to read).
    let verified = root.ok(
        "alice",
        "eval \"$(kura up --env)\" && kura verify --all 2>&1",
    );
    let status = root.ok("alice", "eval \"$(kura up --env)\" && kura status 2>&1");
    for out in [&verified, &status] {
        assert!(
            !out.contains("anchored nowhere") && !out.contains("/var/lib/kura-serve"),
            "{out}"
        );
    }
    drop(b);

    let down = root.ok("alice", "kura down");
    assert!(down.starts_with("Kura is down"), "{down}");
    assert_eq!(
        root.processes(),
        Vec::<String>::new(),
        "kura down leaves no process"
    );

    // remove keeps the history and what verifies it; purge takes everything away.
    root.ok("root", "apt-get remove -y kura 2>&1");
    root.ok(
        "root",
        "test ! -e /opt/kura && test ! -e /usr/bin/kura && test -s /var/lib/kura/kura.db \
         && test -s /etc/kura/log.key && id kura",
    );
    // A fleet hub's node had run here too (its config, its JetStream state). The daemons'
    // user cannot ask to keep anything (its keys would outlive the purge).
    root.ok(
        "root",
        "install -d /etc/kura-hub /var/lib/kura-hub && touch /etc/kura-hub/hub-a.conf \
         && runuser -u kura -- touch /var/lib/kura/keep && apt-get purge -y kura 2>&1",
    );
    let after = root.tree();
    let added: Vec<_> = after.difference(&before).collect();
    let taken: Vec<_> = before.difference(&after).collect();
    assert!(
        added.is_empty() && taken.is_empty(),
        "purge leaves the root as it was: added {added:?}, taken {taken:?}"
    );
    let users = root.ok("root", "cat /etc/passwd /etc/group");
    assert!(
        !users.lines().any(|l| l.starts_with("kura:")),
        "no kura user or group: {users}"
    );

    // Asked to keep the history (by root: /etc/kura is root's, /var/lib/kura the daemons'),
    // purge keeps it and the user who owns it.
    root.ok("root", "apt-get install -y /tmp/kura.deb 2>&1");
    let log_key = root.ok("root", "sha256sum /etc/kura/log.key");
    root.ok("root", "touch /etc/kura/keep && apt-get purge -y kura 2>&1");
    root.ok(
        "root",
        "test ! -e /opt/kura && test -s /var/lib/kura/kura.db && test -s /etc/kura/log.key \
         && test -d /var/lib/kura-serve && id kura",
    );

    // The tarball's install.sh takes what was kept as it is; the package is then refused with
    // what to do (its units would shadow the package's), and after `install.sh --uninstall`
    // it takes the machine over, keys and history as they were.
    let copied = as_root("cp")
        .arg(&bundle)
        .arg(root.dir.join("tmp/bundle.tar.gz"))
        .status()
        .expect("cp");
    assert!(copied.success());
    root.ok(
        "root",
        "cd /tmp && tar xzf bundle.tar.gz && cd kura-*-linux && ./install.sh --no-start 2>&1",
    );
    let refused = root.run("root", "apt-get install -y /tmp/kura.deb 2>&1");
    assert!(
        !refused.status.success() && said(&refused).contains("install.sh --uninstall"),
        "{}",
        said(&refused)
    );
    root.ok(
        "root",
        "test -x /opt/kura/bin/kura && test -L /usr/local/bin/kura && test ! -e /usr/bin/kura",
    );
    root.ok(
        "root",
        "cd /tmp/kura-*-linux && ./install.sh --uninstall 2>&1",
    );
    root.ok("root", "apt-get install -y /tmp/kura.deb 2>&1");
    // An upgrade (postinst is told the version it replaces): nothing new made or started.
    let upgraded = root.ok("root", "dpkg -i /tmp/kura.deb 2>&1");
    assert!(!upgraded.contains("nothing was started"), "{upgraded}");
    assert_eq!(
        root.ok("root", "sha256sum /etc/kura/log.key"),
        log_key,
        "the same log key through keep, install.sh, the package and an upgrade"
    );
    root.ok("root", "kura --db /var/lib/kura/kura.db verify --all");
    assert_eq!(root.processes(), Vec::<String>::new(), "nothing started");
}
