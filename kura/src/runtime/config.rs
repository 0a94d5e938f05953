//! Daemon config: defaults, then a TOML file, then `OCLAW_*` environment variables.
//!
//! Environment names: `OCLAW_<KEY>` for a top-level key or a key of `[common]`
//! (`OCLAW_DB`, `OCLAW_NATS_URL`), `OCLAW_<TABLE>__<KEY>` for a key in a table
//! (`OCLAW_PROVIDER__KIND`). Values are read as TOML (`5000`, `true`, `["a","b"]`) and fall
//! back to plain strings. Variables naming keys this daemon does not have are ignored, so
//! one environment can serve every daemon.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use toml::{Table, Value};

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
    load_with_env(path, std::env::vars())
}

/// [`load`] with an explicit environment (for tests).
pub fn load_with_env<T: Serialize + DeserializeOwned + Default>(
    path: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
) -> Result<T, ConfigError> {
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
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("OCLAW_") else {
            continue;
        };
        let keys: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let parsed = parse_env_value(&value);
        if !set_existing(&mut base, &keys, parsed.clone()) && keys.len() == 1 {
            set_existing(&mut base, &["common".into(), keys[0].clone()], parsed);
        }
    }
    T::deserialize(Value::Table(base)).map_err(|e| invalid(&where_, e.to_string()))
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

/// Sets `keys` in `table` if that key exists in the defaults; returns whether it did.
/// (So configs use empty strings or lists, not `Option`, for "unset".)
fn set_existing(table: &mut Table, keys: &[String], value: Value) -> bool {
    match keys {
        [] => false,
        [last] if table.contains_key(last) => {
            let value = match (table.get(last), value) {
                // An env var always arrives as text or a guess; keep strings as strings.
                (Some(Value::String(_)), v @ Value::String(_)) => v,
                (Some(Value::String(_)), v) => {
                    Value::String(v.to_string().trim_matches('"').to_owned())
                }
                (_, v) => v,
            };
            table.insert(last.clone(), value);
            true
        }
        [_] => false,
        [first, rest @ ..] => match table.get_mut(first) {
            Some(Value::Table(inner)) => set_existing(inner, rest, value),
            _ => false,
        },
    }
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
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        common: crate::runtime::Common,
        worker: Worker,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
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
        let c: Cfg = load_with_env(
            Some(&path),
            env(&[
                ("OCLAW_NATS_URL", "nats://10.0.0.1:4222"),
                ("OCLAW_WORKER__TOOLS", "[\"a\", \"b\"]"),
                ("OCLAW_WORKER__NAME", "123"),
                ("OCLAW_SOMETHING_ELSE", "ignored"),
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
        let back: Cfg = load_with_env(Some(&path), env(&[])).expect("load");
        assert_eq!(back, Cfg::default());
    }
}
