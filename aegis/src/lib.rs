//! Aegis, the shield: decides every tool call hashi asks about — by policy at once
//! (`allow`/`deny`), or by people (`ask`) whose Ed25519-signed decisions it verifies and
//! records in the ledger; unanswered asks expire (denied by `sys:aegis`).

pub mod client;
pub mod decide;
pub mod keys;
pub mod limit;
pub mod notify;
pub mod pending;
pub mod policy;
#[cfg(test)]
mod tests;

use kura_work::WorkTx;
use proto::TurnId;
use std::future::Future;
use std::sync::{Arc, Mutex};

use kura_runtime::{Common, Daemon, Reply};
use proto::consumers::AEGIS_REQUESTS;
use proto::doorbell::{
    ApprovalDecision, PendingQuery, RecordFetch, ToolApprove, ToolApproved, Verdicted,
    WorkerDispatch,
};
use serde::{Deserialize, Serialize};

/// Aegis's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Policy and approvers.
    pub aegis: AegisConfig,
    /// Who may grant writs (outside agents' calls are checked against theirs).
    pub writs: kura_policy::writ::WritsConfig,
}

/// A person whose decisions are trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approver {
    /// Their name; decisions are authored `user:<name>`.
    pub name: String,
    /// Hex Ed25519 public key (from `aegis keygen`).
    pub public_key: String,
}

/// The trusted approvers: no name and no key twice (refused at load), so M-of-N can only be
/// met by M different keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Approver>", into = "Vec<Approver>")]
pub struct Approvers(Vec<Approver>, Vec<(String, String)>);

/// Why a list of approvers is refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApproversError {
    /// A name appears twice.
    #[error("approver {0:?} is listed twice")]
    NameTwice(String),
    /// Two names share a key (M-of-N needs M keys).
    #[error("approvers {0:?} and {1:?} have the same public key; each person needs their own")]
    SharedKey(String, String),
}

impl TryFrom<Vec<Approver>> for Approvers {
    type Error = ApproversError;
    fn try_from(list: Vec<Approver>) -> Result<Self, ApproversError> {
        for (i, a) in list.iter().enumerate() {
            for b in &list[..i] {
                if a.name == b.name {
                    return Err(ApproversError::NameTwice(a.name.clone()));
                }
                if a.public_key.eq_ignore_ascii_case(&b.public_key) {
                    return Err(ApproversError::SharedKey(b.name.clone(), a.name.clone()));
                }
            }
        }
        Ok(Approvers(list, Vec::new()))
    }
}

impl Approvers {
    /// Less those `ids` records as removed: `kura keys remove NAME` ends a person's approvals
    /// however they arrive (their own bus key, or the console's relay of a decision their
    /// browser signed). The removed are remembered, to say so.
    ///
    /// One key, one purpose: an approver whose decision key is also listed as a bus login
    /// key (a list from before bus keys were derived) is refused too — whoever plays the bus
    /// server could get a decision signed as a login nonce.
    pub fn listed_in(self, ids: &kura_runtime::identity::Identities) -> Approvers {
        let logins: Vec<String> = ids
            .list
            .iter()
            .filter_map(|i| kura_runtime::identity::check_user_nkey(&i.nkey).ok())
            .map(hex::encode)
            .collect();
        let (mut kept, mut refused) = (Vec::new(), Vec::new());
        for a in self.0 {
            if ids.removed.contains(&a.name) {
                refused.push((
                    a.name,
                    "was removed (`kura keys remove`, recorded in identities.toml)".to_owned(),
                ));
            } else if logins.contains(&a.public_key.to_ascii_lowercase()) {
                refused.push((
                    a.name,
                    "signs with a key that also logs in to the bus (identities.toml lists it \
                     as an nkey): list the bus key `aegis keygen` now derives instead \
                     (`kura keys remove`, then `kura keys add-approver`)"
                        .to_owned(),
                ));
            } else {
                kept.push(a);
            }
        }
        Approvers(kept, refused)
    }

    /// A list past the load-time checks (what an old database or a bug could hold).
    #[cfg(test)]
    pub(crate) fn unchecked(list: Vec<Approver>) -> Approvers {
        Approvers(list, Vec::new())
    }

    /// Why `name`, in aegis's config, is refused (removed, or a key that logs in), if it is.
    pub fn refused(&self, name: &str) -> Option<&str> {
        self.1
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.as_str())
    }
}

impl From<Approvers> for Vec<Approver> {
    fn from(a: Approvers) -> Self {
        a.0
    }
}

impl std::ops::Deref for Approvers {
    type Target = [Approver];
    fn deref(&self) -> &[Approver] {
        &self.0
    }
}

/// Policy and approvers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AegisConfig {
    /// The policy file (TOML); unset means the defaults only (read allowed, write and
    /// external asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Whose signed decisions count.
    pub approvers: Approvers,
    /// An ask nobody answers is denied after this long.
    pub ask_timeout_ms: u64,
    /// A decision's `signed_at` must be within this long of aegis's clock (either way).
    pub signed_within_ms: u64,
    /// identities.toml: approvers it records as removed (`kura keys remove`) are refused;
    /// unset: `$CREDENTIALS_DIRECTORY/identities.toml` when systemd passes it, else the
    /// identities.toml beside aegis's own seed (the keys directory), else no such check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyring: Option<std::path::PathBuf>,
    /// For people's commands: the aegis daemon's public nkey (`kura keys list` shows it).
    /// Every reply must be signed by it; the commands refuse to run without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_key: Option<String>,
    /// Who to tell when a request waits for people (webhooks, ntfy, Gotify).
    pub notify: notify::NotifyConfig,
}

impl Default for AegisConfig {
    fn default() -> Self {
        AegisConfig {
            policy: None,
            approvers: Approvers::default(),
            ask_timeout_ms: 3_600_000,
            signed_within_ms: 600_000,
            keyring: None,
            reply_key: None,
            notify: notify::NotifyConfig::default(),
        }
    }
}

/// The approvers whose decisions count: the configured ones, less those identities.toml no
/// longer lists (when aegis can read it).
fn trusted_approvers(
    config: &AegisConfig,
    common: &kura_runtime::Common,
) -> anyhow::Result<Approvers> {
    let beside = |dir: &std::path::Path| {
        Some(dir.join(kura_runtime::identity::IDENTITIES_FILE)).filter(|p| p.exists())
    };
    let keyring = config
        .keyring
        .clone()
        .or_else(|| std::env::var_os("CREDENTIALS_DIRECTORY").and_then(|d| beside(d.as_ref())))
        .or_else(|| {
            common
                .nats_seed
                .as_deref()
                .and_then(std::path::Path::parent)
                .filter(|d| !d.as_os_str().is_empty())
                .and_then(beside)
        });
    let Some(path) = keyring else {
        return Ok(config.approvers.clone());
    };
    let ids = kura_runtime::identity::Identities::load_file(&path)?;
    let approvers = config.approvers.clone().listed_in(&ids);
    for (name, why) in &approvers.1 {
        tracing::warn!(approver = %name, keyring = %path.display(),
            "an approver in aegis's config {why}: their decisions are refused");
    }
    Ok(approvers)
}

/// What aegis's request handlers share: the store, the policy, who may decide, the refusal
/// limiter and the bus (to wake a turn a decision frees).
struct Handlers {
    store: Mutex<kura_store::Store>,
    policy: Arc<policy::Policy>,
    issuers: Arc<[kura_policy::writ::Issuer]>,
    approvers: Arc<Approvers>,
    limiter: Arc<Mutex<limit::Limiter>>,
    bus: kura_runtime::Bus,
    ask_timeout_ms: i64,
    signed_within: std::time::Duration,
    notifier: notify::Notifier,
}

impl Handlers {
    fn store(&self) -> Reply<std::sync::MutexGuard<'_, kura_store::Store>> {
        self.store
            .lock()
            .map_err(|_| Verdicted::refused("store unavailable"))
    }

    /// Rings the outside agents waiting on `request_id` (through `kura serve`).
    fn decided(&self, request_id: proto::RequestId) {
        self.bus.ring(
            self.bus.subjects.approval_decided(),
            &proto::doorbell::ApprovalDecided { request_id },
        );
    }

    fn wake(&self, turn: Option<TurnId>) {
        if let Some(turn_id) = turn {
            self.bus.ring(
                self.bus.subjects.worker_dispatch(),
                &WorkerDispatch { turn_id },
            );
        }
    }

    /// hashi asks: decide by policy now and answer, so allow/deny cost one round trip.
    fn tool_approve(&self, req: ToolApprove) -> Reply<ToolApproved> {
        let mut store = self.store()?;
        match decide::evaluate(
            &mut store,
            &self.policy,
            &self.issuers,
            self.ask_timeout_ms,
            Some(req.request_id),
        ) {
            Ok(Some(e)) => {
                self.wake(e.woke);
                if e.state.is_decided() {
                    self.decided(e.request_id);
                }
                if e.asked_now {
                    self.notifier.asked(e.request_id);
                }
                Ok(ToolApproved {
                    ok: true,
                    request_id: e.request_id,
                    state: e.state,
                })
            }
            Ok(None) => Err(Verdicted::refused("no such request")),
            Err(e) => Err(Verdicted::refused(e.to_string())),
        }
    }

    /// People decide.
    fn decide(&self, d: ApprovalDecision) -> Reply<Verdicted> {
        let mut store = self.store()?;
        let Ok(mut limiter) = self.limiter.lock() else {
            return Err(Verdicted::refused("limiter unavailable"));
        };
        let ruled = decide::Ruled {
            policy: &self.policy,
            issuers: &self.issuers,
        };
        match decide::decide(
            &mut store,
            &self.approvers,
            self.signed_within,
            &mut limiter,
            &d,
            ruled,
        ) {
            Ok(v) => {
                self.wake(v.woke);
                if ["approved", "denied"].contains(&v.verdict.state.as_str()) {
                    self.decided(d.request_id);
                }
                Ok(v.verdict)
            }
            Err(e) => Err(Verdicted::refused(e.to_string())),
        }
    }

    /// People ask what is waiting: pages that fit a message, each request as its record.
    fn pending(&self, q: PendingQuery) -> Reply<pending::PendingPage> {
        let store = self.store()?;
        pending::page(&store, q.after).map_err(|e| Verdicted::refused(e.to_string()))
    }

    /// ... and fetch the content too big to send inline, piece by piece.
    fn fetch(&self, f: RecordFetch) -> Reply<pending::Chunk> {
        let store = self.store()?;
        match pending::fetch(&store, f.request_id, f.offset) {
            Ok(Some(chunk)) => Ok(chunk),
            Ok(None) => Err(Verdicted::refused("no such request")),
            Err(e) => Err(Verdicted::refused(e.to_string())),
        }
    }
}

/// Answers hashi's and people's requests, each subject with its handler.
async fn serve(handlers: Arc<Handlers>) -> anyhow::Result<()> {
    let (bus, h) = (handlers.bus.clone(), handlers.clone());
    bus.serve(bus.subjects.tool_approve(), move |r| h.tool_approve(r))
        .await?;
    // A decision may carry edited arguments, so its cap is larger than a doorbell's.
    let h = handlers.clone();
    let cap = proto::doorbell::MAX_DECISION_BYTES;
    bus.serve_capped(bus.subjects.approval_decide(), cap, move |d| h.decide(d))
        .await?;
    let h = handlers.clone();
    bus.serve(bus.subjects.approval_pending(), move |q| h.pending(q))
        .await?;
    let h = handlers;
    bus.serve(bus.subjects.approval_fetch(), move |f| h.fetch(f))
        .await?;
    Ok(())
}

/// Runs the daemon until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let policy = Arc::new(match &config.aegis.policy {
        Some(path) => policy::load(std::path::Path::new(path))?,
        None => policy::Policy::default(),
    });
    let timeout = i64::try_from(config.aegis.ask_timeout_ms).unwrap_or(i64::MAX);
    let issuers: Arc<[kura_policy::writ::Issuer]> = config.writs.issuers.clone().into();
    let approvers = Arc::new(trusted_approvers(&config.aegis, &config.common)?);
    let mut daemon = Daemon::start("aegis", &config.common).await?;
    let bus = daemon.bus().clone();
    let mut serve_store = daemon.open_store()?;
    // Published before any request is decided, so hashi applies exactly this policy's allow
    // and deny rules itself (a restart with another file replaces it).
    let policy_hash = serve_store.write(|tx| tx.publish_policy(&policy))?;
    let limiter = Arc::new(Mutex::new(limit::Limiter::default()));
    let notifier = notify::Notifier::start(config.aegis.notify.clone(), daemon.open_store()?)?;
    serve(Arc::new(Handlers {
        store: Mutex::new(serve_store),
        policy: policy.clone(),
        issuers: issuers.clone(),
        approvers: approvers.clone(),
        limiter: limiter.clone(),
        bus: bus.clone(),
        ask_timeout_ms: timeout,
        signed_within: std::time::Duration::from_millis(config.aegis.signed_within_ms),
        notifier: notifier.clone(),
    }))
    .await?;

    // The recovery loop: requests filed while aegis or NATS was down, and expiry (polled at
    // least every second so deadlines hold).
    let mut store = daemon.open_store()?;
    let (b, p, iss) = (bus.clone(), policy.clone(), issuers.clone());
    let poll = config
        .common
        .poll_interval()
        .min(std::time::Duration::from_secs(1));
    // Ungated calls recorded from now on (and the last ten minutes, so one recorded while
    // aegis restarted is not missed) are told to people as they are found.
    let mut ungated = notify::Ungated::since_minutes_ago(10);
    daemon.consumer(AEGIS_REQUESTS, poll, move || {
        // A failed look is said and tried again; it holds up no request's expiry.
        if let Err(e) = ungated.tell(&store, &notifier) {
            tracing::warn!(error = %e, "cannot read the ungated calls for their notices");
        }
        // Refusals held back by the rate limit join the stored counts.
        let held = limiter
            .lock()
            .map(|mut l| l.drain(std::time::Instant::now()))
            .unwrap_or_default();
        decide::add_refusals(&mut store, &held)?;
        let expired = decide::expire_overdue(&mut store, kura_work::now_ms())?;
        let mut woke: Vec<TurnId> = expired.iter().filter_map(|(_, t)| *t).collect();
        let evaluated = decide::evaluate(&mut store, &p, &iss, timeout, None)?;
        woke.extend(evaluated.as_ref().and_then(|e| e.woke));
        let decided = evaluated
            .as_ref()
            .filter(|e| e.state.is_decided())
            .map(|e| e.request_id);
        for request_id in expired.iter().map(|(r, _)| *r).chain(decided) {
            b.ring(
                b.subjects.approval_decided(),
                &proto::doorbell::ApprovalDecided { request_id },
            );
        }
        if let Some(e) = evaluated.as_ref().filter(|e| e.asked_now) {
            notifier.asked(e.request_id);
        }
        for turn_id in woke {
            b.ring(b.subjects.worker_dispatch(), &WorkerDispatch { turn_id });
        }
        Ok(evaluated.is_some())
    })?;
    tracing::info!(
        rules = policy.rules.len(),
        policy = %policy_hash,
        approvers = approvers.len(),
        "aegis policy loaded"
    );
    daemon.run(shutdown).await
}
