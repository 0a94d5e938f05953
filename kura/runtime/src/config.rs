//! Daemon config: defaults, then a TOML file, then `KURA_*` environment variables.
//!
//! Environment names: `KURA_<KEY>` for a top-level key or a key of `[common]` (`KURA_DB`,
//! `KURA_NATS_URL`), `KURA_<TABLE>__<KEY>` for a key in a table (`KURA_PROVIDER__KIND`).
//! Values are read as TOML (`5000`, `true`, `["a","b"]`) where the setting is not text, and
//! as text otherwise. Variables naming tables this daemon does not have are ignored, so one
//! environment can serve every daemon; a variable naming a key this daemon's own table does
//! not have gets a warning (a typo would otherwise silently do nothing). An unknown key in
//! the file is an error.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use toml::{Table, Value};

/// The prefix of every Kura environment variable.
pub const ENV_PREFIX: &str = "KURA_";

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The file is not TOML, or a value has the wrong type or an unknown key.
    #[error("invalid config{where_}: {message}")]
    Invalid {
        /// ` in <file>` or ``.
        where_: String,
        /// What was wrong.
        message: String,
    },
}

/// Loads `T` from its defaults, the optional TOML file at `path`, and the environment.
pub fn load<T: Serialize + DeserializeOwned + Default>(
    path: Option<&Path>,
) -> Result<T, ConfigError> {
    let (config, warnings) = load_with_env(path, std::env::vars())?;
    for w in warnings {
        tracing::warn!("{w}");
        eprintln!("warning: {w}");
    }
    Ok(config)
}

/// [`load`] with an explicit environment; returns the config and the warnings to show.
pub fn load_with_env<T: Serialize + DeserializeOwned + Default>(
    path: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
) -> Result<(T, Vec<String>), ConfigError> {
    let invalid = |where_: &str, message: String| ConfigError::Invalid {
        where_: where_.to_owned(),
        message,
    };
    let mut base = match Value::try_from(T::default()) {
        Ok(Value::Table(t)) => t,
        Ok(_) | Err(_) => return Err(invalid("", "defaults do not form a table".into())),
    };
    let mut where_ = String::new();
    if let Some(path) = path {
        where_ = format!(" in {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            path: path.display().to_string(),
            cause,
        })?;
        let file: Table =
            toml::from_str(&text).map_err(|e| invalid(&where_, e.message().to_owned()))?;
        merge(&mut base, file);
    }
    // Where each environment-set key came from, by its dotted path.
    let mut from_env: Vec<(String, String)> = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let keys: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let path = match keys.as_slice() {
            [key] if base.get(key).is_some_and(|v| !v.is_table()) => vec![key.clone()],
            [key] if base.get("common").is_some_and(Value::is_table) => {
                vec!["common".into(), key.clone()]
            }
            [table, _, ..] if base.get(table).is_some_and(Value::is_table) => keys.clone(),
            _ => continue,
        };
        set(&mut base, &path, &value);
        from_env.push((path.join("."), name));
    }
    let mut ignored = BTreeSet::new();
    let config = serde_ignored::deserialize(Value::Table(base), |p| {
        ignored.insert(p.to_string());
    })
    .map_err(|e| invalid(&where_, e.to_string()))?;
    let mut warnings = Vec::new();
    for key in ignored {
        match from_env.iter().find(|(p, _)| *p == key) {
            // `KURA_FOO` may be meant for another program or another daemon's [common].
            Some((_, _)) if !key.contains('.') || key.starts_with("common.") => {}
            Some((_, var)) => warnings.push(format!(
                "{var} is ignored: [{}] has no key {:?}",
                key.split('.').next().unwrap_or(""),
                key.rsplit('.').next().unwrap_or("")
            )),
            None => return Err(invalid(&where_, format!("unknown key `{key}`"))),
        }
    }
    Ok((config, warnings))
}

/// The default config as TOML text (for `print-default-config`).
pub fn to_toml<T: Serialize>(config: &T) -> String {
    toml::to_string_pretty(config).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
}

fn parse_env_value(text: &str) -> Value {
    toml::from_str::<Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(text.to_owned()))
}

/// Sets the key at `path` to the environment's `text`: as TOML when the default there is not
/// text (numbers, lists, booleans), as text otherwise or when there is no default.
fn set(table: &mut Table, path: &[String], text: &str) {
    let (Some(last), parents) = (path.last(), &path[..path.len().saturating_sub(1)]) else {
        return;
    };
    let mut t = table;
    for p in parents {
        match t.get_mut(p) {
            Some(Value::Table(inner)) => t = inner,
            _ => return,
        }
    }
    let value = match t.get(last) {
        Some(Value::String(_)) | None => Value::String(text.to_owned()),
        Some(_) => parse_env_value(text),
    };
    t.insert(last.clone(), value);
}

fn merge(base: &mut Table, over: Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Cfg {
        common: crate::Common,
        worker: Worker,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Worker {
        lease_ms: u64,
        tools: Vec<String>,
        name: String,
    }

    impl Default for Worker {
        fn default() -> Self {
            Worker {
                lease_ms: 30_000,
                tools: vec!["fs.read".into()],
                name: "w".into(),
            }
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn defaults_file_then_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[common]\ndb = \"/x.db\"\n[worker]\nlease_ms = 100\n",
        )
        .expect("write");
        let (c, warnings): (Cfg, _) = load_with_env(
            Some(&path),
            env(&[
                ("KURA_NATS_URL", "nats://10.0.0.1:4222"),
                ("KURA_WORKER__TOOLS", "[\"a\", \"b\"]"),
                ("KURA_WORKER__NAME", "123"),
                ("KURA_SOMETHING_ELSE", "ignored"),
                ("KURA_OTHER__KEY", "another daemon's table"),
                ("KURA_WORKER__LEASE_MSEC", "5"),
                ("KURA_WORKER__INNER__DEPTH", "3"),
                ("KURA_INSTANCE", "w-1"),
                ("OCLAW_DB", "/old-name.db"),
                ("HOME", "/root"),
            ]),
        )
        .expect("load");
        assert_eq!(c.common.db, std::path::PathBuf::from("/x.db"));
        assert_eq!(c.common.nats_url, "nats://10.0.0.1:4222");
        assert_eq!(c.common.poll_interval_ms, 5000);
        assert_eq!(c.worker.lease_ms, 100);
        assert_eq!(c.worker.tools, ["a", "b"]);
        assert_eq!(c.worker.name, "123", "strings stay strings");
        assert_eq!(c.common.instance.as_deref(), Some("w-1"), "an unset option");
        assert_eq!(
            warnings,
            ["KURA_WORKER__LEASE_MSEC is ignored: [worker] has no key \"lease_msec\""],
            "a misspelled key of this daemon's own table warns; other tables stay quiet"
        );
    }

    #[test]
    fn a_bad_mode_fails_at_load_naming_the_key() {
        let err =
            load_with_env::<Cfg>(None, env(&[("KURA_SYNCHRONOUS", "fast")])).expect_err("bad mode");
        assert!(err.to_string().contains("synchronous"), "{err}");
        assert!(err.to_string().contains("fast"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_types_are_clear_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[worker]\nlease_msec = 1\n").expect("write");
        let err = load_with_env::<Cfg>(Some(&path), env(&[])).expect_err("unknown key");
        assert!(err.to_string().contains("lease_msec"), "{err}");
        std::fs::write(&path, "[worker]\nlease_ms = \"soon\"\n").expect("write");
        assert!(load_with_env::<Cfg>(Some(&path), env(&[])).is_err());
        std::fs::write(&path, "not = [toml").expect("write");
        assert!(load_with_env::<Cfg>(Some(&path), env(&[])).is_err());
        assert!(matches!(
            load_with_env::<Cfg>(Some(&dir.path().join("missing.toml")), env(&[])),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn default_config_round_trips_through_toml() {
        let text = to_toml(&Cfg::default());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, &text).expect("write");
        let (back, _): (Cfg, _) = load_with_env(Some(&path), env(&[])).expect("load");
        assert_eq!(back, Cfg::default());
    }
}
