//! The kernel sandbox for tool children. hashi re-executes itself as `hashi sandbox-exec`
//! (the design of OpenAI Codex's Linux sandbox): the fresh helper process lowers its rlimits,
//! confines itself with Landlock (read-write beneath the session workspace, read-only on what
//! running programs needs) and a seccomp filter (no sockets unless granted, no ptrace,
//! io_uring, namespaces or new sessions), then `exec`s the program. Everything it starts
//! inherits all of it, and it runs in its own process group so a timeout kills it whole.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{SeccompAction, SeccompFilter, SeccompRule, TargetArch};
use serde::{Deserialize, Serialize};

/// The Landlock ABI whose rights we ask for; older kernels get what they support
/// (best effort), kernels without Landlock get no sandbox and `shell.run` is refused.
const TARGET_ABI: ABI = ABI::V6;

/// Exit code of the helper when it could not set the sandbox up or start the program
/// (the shell's "cannot execute").
pub const EXIT_SETUP: u8 = 126;

/// What executing an allowlisted program needs to read: programs, their libraries, the
/// loader cache, time zones and locales. Missing paths are skipped.
const READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/locale.alias",
    "/dev/urandom",
    "/dev/random",
];

/// Character devices every program may write to and read from.
const READ_WRITE_DEVICES: &[&str] = &["/dev/null", "/dev/zero"];

/// Whether tool children are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Landlock + seccomp + rlimits; `shell.run` is refused where the kernel lacks Landlock.
    Landlock,
    /// No Landlock or seccomp (rlimits and the process group still apply). Only for kernels
    /// without Landlock, set explicitly by the operator.
    Off,
}

/// Resource limits of one tool child (and everything it starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU seconds.
    pub cpu_secs: u64,
    /// Largest file it may write, in bytes (the workspace quota).
    pub file_bytes: u64,
    /// Processes of hashi's user (the kernel counts per user, not per sandbox).
    pub processes: u64,
    /// Address space, in bytes.
    pub address_space: u64,
}

/// The arguments of `hashi sandbox-exec`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    /// Confine, print the Landlock state on stdout and exit (what `kura status` shows).
    #[arg(long)]
    pub probe: bool,
    /// The session workspace: the only place it may write.
    #[arg(long, required_unless_present = "probe")]
    pub workspace: Option<PathBuf>,
    /// Extra read-only paths (programs outside /usr, say).
    #[arg(long = "read-only")]
    pub read_only: Vec<PathBuf>,
    /// Extra writable paths (an outbox shared with another program, say).
    #[arg(long = "read-write")]
    pub read_write: Vec<PathBuf>,
    /// Allow sockets.
    #[arg(long)]
    pub network: bool,
    /// Skip Landlock and seccomp (`tools.sandbox = "off"`).
    #[arg(long)]
    pub no_confine: bool,
    /// RLIMIT_CPU in seconds.
    #[arg(long, default_value_t = 60)]
    pub cpu_secs: u64,
    /// RLIMIT_FSIZE in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub file_bytes: u64,
    /// RLIMIT_NPROC.
    #[arg(long, default_value_t = 512)]
    pub processes: u64,
    /// RLIMIT_AS in bytes.
    #[arg(long, default_value_t = 2 << 30)]
    pub address_space: u64,
    /// The program and its arguments.
    #[arg(last = true)]
    pub argv: Vec<OsString>,
}

/// The sandbox this hashi gives its tool children, found by probing at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    /// Landlock is enforced; the kernel's ABI version.
    Landlock(i32),
    /// The operator turned it off.
    Off,
    /// Landlock is wanted but this kernel (or the helper) cannot give it: why.
    Unavailable(String),
}

impl std::fmt::Display for SandboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxState::Landlock(abi) => write!(f, "landlock v{abi}"),
            SandboxState::Off => f.write_str("off"),
            SandboxState::Unavailable(why) => write!(f, "unavailable ({why})"),
        }
    }
}

/// The command that runs `argv` confined to `workspace` through the helper at `helper`.
pub fn command(
    helper: &Path,
    mode: SandboxMode,
    workspace: &Path,
    (read_only, read_write): (&[PathBuf], &[PathBuf]),
    network: bool,
    limits: Limits,
    argv: &[String],
) -> Command {
    let mut cmd = Command::new(helper);
    cmd.arg("sandbox-exec")
        .arg("--workspace")
        .arg(workspace)
        .arg(format!("--cpu-secs={}", limits.cpu_secs))
        .arg(format!("--file-bytes={}", limits.file_bytes))
        .arg(format!("--processes={}", limits.processes))
        .arg(format!("--address-space={}", limits.address_space));
    for p in read_only {
        cmd.arg("--read-only").arg(p);
    }
    for p in read_write {
        cmd.arg("--read-write").arg(p);
    }
    if network {
        cmd.arg("--network");
    }
    if mode == SandboxMode::Off {
        cmd.arg("--no-confine");
    }
    cmd.arg("--").args(argv);
    // Its own process group: the timeout kills the program and everything it started.
    cmd.process_group(0);
    cmd
}

/// Runs the helper in probe mode: what sandbox tool children get on this kernel.
pub fn probe(helper: &Path, mode: SandboxMode) -> SandboxState {
    if mode == SandboxMode::Off {
        return SandboxState::Off;
    }
    let out = Command::new(helper)
        .args(["sandbox-exec", "--probe"])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            match text.trim().strip_prefix("landlock v").map(str::parse) {
                Some(Ok(abi)) => SandboxState::Landlock(abi),
                _ => SandboxState::Unavailable(format!("the probe said {:?}", text.trim())),
            }
        }
        Ok(o) => SandboxState::Unavailable(
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.chars().take(200).collect())
                .unwrap_or_else(|| format!("the probe exited with {}", o.status)),
        ),
        Err(e) => SandboxState::Unavailable(format!("cannot run {}: {e}", helper.display())),
    }
}

/// `hashi sandbox-exec`: confine this process, then become the program. Returns only on
/// failure (or after a probe).
pub fn exec(args: ExecArgs) -> ExitCode {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("kura sandbox: {what}: {e}");
        ExitCode::from(EXIT_SETUP)
    };
    if args.probe {
        return match landlock(Path::new("/nonexistent"), &[], &[], false) {
            Ok(abi) => {
                println!("landlock v{abi}");
                ExitCode::SUCCESS
            }
            Err(e) => fail("landlock", &e),
        };
    }
    let Some(workspace) = args.workspace.as_deref() else {
        return fail("usage", &"--workspace is required");
    };
    let limits = Limits {
        cpu_secs: args.cpu_secs,
        file_bytes: args.file_bytes,
        processes: args.processes,
        address_space: args.address_space,
    };
    if let Err(e) = set_limits(limits) {
        return fail("rlimits", &e);
    }
    if !args.no_confine {
        if let Err(e) = landlock(workspace, &args.read_only, &args.read_write, args.network) {
            return fail("landlock", &e);
        }
        if let Err(e) = seccomp(args.network) {
            return fail("seccomp", &e);
        }
    }
    let Some((program, rest)) = args.argv.split_first() else {
        return fail("usage", &"no program given");
    };
    let e = Command::new(program).args(rest).exec();
    eprintln!(
        "kura sandbox: cannot run {}: {e}",
        program.to_string_lossy()
    );
    ExitCode::from(127)
}

fn set_limits(l: Limits) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let both = |v: u64| Rlimit {
        current: Some(v),
        maximum: Some(v),
    };
    setrlimit(Resource::Cpu, both(l.cpu_secs))?;
    setrlimit(Resource::Fsize, both(l.file_bytes))?;
    setrlimit(Resource::Nproc, both(l.processes))?;
    setrlimit(Resource::As, both(l.address_space))?;
    setrlimit(Resource::Core, both(0))?;
    Ok(())
}

/// Why this process could not be confined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The kernel has no (enforcing) Landlock.
    #[error("{0}")]
    Unavailable(&'static str),
    /// Building or applying a ruleset or filter failed.
    #[error("{0}")]
    Setup(String),
}

impl SandboxError {
    fn setup(e: impl std::fmt::Display) -> SandboxError {
        SandboxError::Setup(e.to_string())
    }
}

/// Confines this process with Landlock; the kernel's ABI version on success.
fn landlock(
    workspace: &Path,
    extra_read_only: &[PathBuf],
    extra_read_write: &[PathBuf],
    network: bool,
) -> Result<i32, SandboxError> {
    let abi = TARGET_ABI;
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(SandboxError::setup)?
        .scope(Scope::from_all(abi))
        .map_err(SandboxError::setup)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(SandboxError::setup)?;
    }
    let mut rules: Vec<PathBeneath<PathFd>> = Vec::new();
    let mut add = |path: &Path, access: landlock::BitFlags<AccessFs>| {
        // Paths this system lacks are skipped (e.g. /lib32).
        let Ok(fd) = PathFd::new(path) else { return };
        let file_only = std::fs::metadata(path).is_ok_and(|m| !m.is_dir());
        let access = if file_only {
            access & AccessFs::from_file(abi)
        } else {
            access
        };
        rules.push(PathBeneath::new(fd, access));
    };
    for p in READ_ONLY {
        add(Path::new(p), read);
    }
    for p in extra_read_only {
        add(p, read);
    }
    for p in READ_WRITE_DEVICES {
        add(Path::new(p), read | AccessFs::WriteFile);
    }
    for p in extra_read_write
        .iter()
        .map(PathBuf::as_path)
        .chain([workspace])
    {
        add(p, AccessFs::from_all(abi));
    }
    let created = ruleset
        .create()
        .and_then(|c| c.add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>)))
        .map_err(SandboxError::setup)?;
    let status = created.restrict_self().map_err(SandboxError::setup)?;
    match (status.ruleset, status.landlock) {
        (RulesetStatus::NotEnforced, _) | (_, LandlockStatus::NotEnabled) => {
            Err(SandboxError::Unavailable(
                "this kernel does not enforce Landlock (see README: the tool sandbox)",
            ))
        }
        (_, LandlockStatus::NotImplemented) => Err(SandboxError::Unavailable(
            "this kernel has no Landlock (see README: the tool sandbox)",
        )),
        (_, LandlockStatus::Available { effective_abi, .. }) => Ok(effective_abi as i32),
    }
}

/// System calls a tool child never needs and an escaping one would: debugging other
/// processes, bypassing seccomp through io_uring, kernel programs, key rings, namespaces,
/// mounts, and leaving the process group the timeout kills.
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_setsid,
    libc::SYS_setpgid,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
];

/// Installs the seccomp filter: [`DENIED`] always, and `socket` unless network is granted.
fn seccomp(network: bool) -> Result<(), SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&s| (s, vec![])).collect();
    if !network {
        rules.insert(libc::SYS_socket, vec![]);
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(SandboxError::setup)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(SandboxError::setup)?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SandboxError::setup(e))?;
    seccompiler::apply_filter(&program).map_err(SandboxError::setup)
}
