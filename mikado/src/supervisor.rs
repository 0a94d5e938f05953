//! The nats-server supervisor: generated config, child process, restart with backoff.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::Command;

use crate::Config;

/// Host and port from a `nats://host:port` URL.
fn listen_addr(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url.strip_prefix("nats://").unwrap_or(url);
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    let (host, port) = rest
        .rsplit_once(':')
        .with_context(|| format!("nats_url {url:?} has no port"))?;
    let port: u16 = port
        .trim_end_matches('/')
        .parse()
        .with_context(|| format!("nats_url {url:?} has an invalid port"))?;
    Ok((host.trim_matches(['[', ']']).to_owned(), port))
}

/// The keys directory: configured, or handed over by systemd.
fn keys_dir(config: &Config) -> anyhow::Result<PathBuf> {
    config
        .nats
        .keys_dir
        .clone()
        .or_else(|| std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from))
        .context(
            "the bus has no identities: run `kura keys init --dir DIR` and set [nats] keys_dir \
             (the server never runs without authentication)",
        )
}

/// Writes the generated server config into the state directory (the database's, unless
/// `nats.config_dir` says otherwise) under a fresh random name, created exclusively with
/// mode 0600 — never a predictable path in a shared directory that another local user could
/// plant first or point at the database. Removed when the returned handle drops.
fn write_config(config: &Config) -> anyhow::Result<tempfile::TempPath> {
    let (url_host, port) = listen_addr(&config.common.nats_url)?;
    let host = config.nats.listen.clone().unwrap_or(url_host);
    let dir = match &config.nats.config_dir {
        Some(d) => d.clone(),
        None => std::path::Path::new(&config.common.db)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(std::path::Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let keys = keys_dir(config)?;
    let text = kura_runtime::identity::server_config(
        &host,
        port,
        &keys,
        &config.common.subjects()?,
        config.nats.hub.as_ref(),
    )?;
    let mut file = tempfile::Builder::new()
        .prefix("kura-nats-")
        .suffix(".conf")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(&dir)
        .with_context(|| format!("cannot create the nats-server config in {}", dir.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())
        .with_context(|| format!("cannot write {}", file.path().display()))?;
    Ok(file.into_temp_path())
}

/// Runs the bundled nats-server until `shutdown`, restarting it with backoff if it exits.
pub async fn supervise(config: &Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let bin =
        kura_runtime::natsbin::find(config.nats.binary.as_deref()).map_err(anyhow::Error::msg)?;
    let conf = write_config(config)?;
    let max_backoff = Duration::from_millis(config.nats.max_backoff_ms.max(100));
    let mut backoff = Duration::from_millis(100);
    tokio::pin!(shutdown);
    loop {
        let started = Instant::now();
        let mut child = Command::new(&bin)
            .arg("-c")
            .arg(&*conf)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        tracing::info!(binary = %bin.display(), config = %conf.display(), pid = child.id(), "nats-server started");
        tokio::select! {
            status = child.wait() => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = Duration::from_millis(100);
                }
                tracing::warn!(%status, restart_in_ms = backoff.as_millis() as u64, "nats-server exited; restarting");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = &mut shutdown => return Ok(()),
                }
                backoff = (backoff * 2).min(max_backoff);
            }
            _ = &mut shutdown => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                tracing::info!("nats-server stopped");
                let _ = std::fs::remove_file(&conf);
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn listen_addresses_come_from_the_url() {
        assert_eq!(
            listen_addr("nats://127.0.0.1:4222").expect("url"),
            ("127.0.0.1".into(), 4222)
        );
        assert_eq!(
            listen_addr("nats://u:p@localhost:5000").expect("url"),
            ("localhost".into(), 5000)
        );
        assert!(listen_addr("nats://localhost").is_err());
        assert!(listen_addr("nats://localhost:http").is_err());
    }

    /// Attack: mikado wrote `/tmp/kura-nats-PORT.conf`, a path any local user could create
    /// first or point at the database.
    #[test]
    fn nats_config_is_private_and_never_follows_a_planted_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("kura.db");
        std::fs::write(&db, "DATABASE").expect("db");
        // What an attacker plants at the old predictable name.
        std::os::unix::fs::symlink(&db, dir.path().join("kura-nats-4222.conf")).expect("plant");
        let mut config = Config::default();
        config.common.db = db.clone();
        config.common.nats_url = "nats://127.0.0.1:4222".into();
        let keys = dir.path().join("keys");
        kura_runtime::identity::init(&keys, &[]).expect("keys");
        config.nats.keys_dir = Some(keys);
        let conf = write_config(&config).expect("config");
        assert_eq!(
            conf.parent(),
            Some(dir.path()),
            "in the database's directory"
        );
        assert_eq!(
            std::fs::read_to_string(&db).expect("db"),
            "DATABASE",
            "untouched"
        );
        let meta = std::fs::symlink_metadata(&conf).expect("meta");
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(
            std::fs::read_to_string(&conf)
                .expect("read")
                .contains("port: 4222")
        );
        let path = conf.to_path_buf();
        drop(conf);
        assert!(!path.exists(), "removed when mikado stops");
    }

    /// Attack: the bundled server admitted anyone on its port.
    #[test]
    fn the_generated_server_config_requires_nkeys_and_tls_or_refuses_to_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.common.db = dir.path().join("kura.db");
        config.common.nats_url = "nats://0.0.0.0:4222".into();
        let err = write_config(&config).expect_err("no keys");
        assert!(err.to_string().contains("kura keys init"), "{err}");
        let keys = dir.path().join("keys");
        kura_runtime::identity::init(&keys, &[]).expect("keys");
        config.nats.keys_dir = Some(keys);
        let text = std::fs::read_to_string(write_config(&config).expect("config")).expect("read");
        assert!(text.contains("authorization {"), "{text}");
        assert!(text.contains("nkey: \"U"), "{text}");
        assert!(text.contains("tls {"), "{text}");
        assert!(!text.contains("password"), "{text}");
    }

    /// In a fleet, mikado's server dials the hub as a leaf node with the Pi's own leaf seed,
    /// pins the hub's CA, and lets no doorbell cross either way; without the seed it refuses
    /// to start rather than join unauthenticated.
    #[test]
    fn a_fleet_pi_joins_the_hub_as_a_leaf_node_and_keeps_its_doorbells() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.common.db = dir.path().join("kura.db");
        let keys = dir.path().join("keys");
        kura_runtime::identity::init(&keys, &[]).expect("keys");
        config.nats.keys_dir = Some(keys.clone());
        let seed = dir.path().join("leaf.seed");
        let leaf = nkeys::KeyPair::new_user();
        std::fs::write(&seed, leaf.seed().expect("seed")).expect("write");
        std::fs::set_permissions(&seed, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
        config.nats.hub = Some(kura_runtime::identity::HubLink {
            urls: vec!["tls://hub.lan:7422".into()],
            seed: Some(dir.path().join("missing.seed")),
            ca: Some(keys.join("nats-ca.pem")),
        });
        assert!(
            write_config(&config).is_err(),
            "a missing leaf seed must refuse"
        );
        if let Some(h) = config.nats.hub.as_mut() {
            h.seed = Some(seed);
        }
        let text = std::fs::read_to_string(write_config(&config).expect("config")).expect("read");
        assert!(text.contains("leafnodes {"), "{text}");
        assert!(text.contains("\"tls://hub.lan:7422\""), "{text}");
        assert!(text.contains("deny_exports: [\"oclaw.v1.>\"]"), "{text}");
        assert!(text.contains("deny_imports: [\"oclaw.v1.>\"]"), "{text}");
        assert!(text.contains("ca_file:"), "{text}");
    }
}
