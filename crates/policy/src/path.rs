//! The one normal form of a workspace path, shared by hashi (which runs the tool) and aegis
//! (which rules on an edit): a rule, a record, a person's signature and the tool all see the
//! same spelling.

use serde_json::{Map, Value};

/// Why a path has no normal form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The empty string.
    #[error("path is empty")]
    Empty,
    /// A NUL byte.
    #[error("path contains a NUL byte")]
    Nul,
    /// It starts with `/`.
    #[error("path {0:?} is absolute; paths are relative to the workspace")]
    Absolute(String),
    /// A `..` climbs past the top.
    #[error("path {0:?} leaves the workspace (..)")]
    Escapes(String),
}

/// `./a//b/../c/` becomes `a/c`; the workspace itself is `.`. Absolute paths, paths that
/// climb out (`..` past the top) and NUL bytes are refused. Names are taken literally (no
/// case folding or Unicode normalisation: Linux does not do either).
pub fn normalize(rel: &str) -> Result<String, PathError> {
    if rel.is_empty() {
        return Err(PathError::Empty);
    }
    if rel.contains('\0') {
        return Err(PathError::Nul);
    }
    if rel.starts_with('/') {
        return Err(PathError::Absolute(rel.to_owned()));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathError::Escapes(rel.to_owned()));
                }
            }
            name => parts.push(name),
        }
    }
    Ok(if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    })
}

/// The arguments as a tool takes them: the `path` argument in its normal form. A path with
/// no normal form is left as given (the tool refuses it); [`check_normal_args`] says so.
pub fn normalize_args(arguments: &mut Map<String, Value>) {
    if let Some(Value::String(p)) = arguments.get_mut("path")
        && let Ok(n) = normalize(p)
    {
        *p = n;
    }
}

/// Why arguments are not in normal form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotNormal {
    /// The path has no normal form at all.
    #[error("{0}; hashi would refuse to run it")]
    Invalid(PathError),
    /// The path has another spelling than its normal form.
    #[error(
        "path {given:?} is not in normal form: sign {normal:?} instead (the spelling policy rules \
         on and the tool runs)"
    )]
    Spelling {
        /// The path as given.
        given: String,
        /// Its normal form.
        normal: String,
    },
}

/// Whether `arguments` are already in normal form, so a tool runs exactly what was signed:
/// the reason when a path has none, or what the normal form would be.
pub fn check_normal_args(arguments: &Map<String, Value>) -> Result<(), NotNormal> {
    let Some(Value::String(p)) = arguments.get("path") else {
        return Ok(());
    };
    match normalize(p) {
        Err(e) => Err(NotNormal::Invalid(e)),
        Ok(n) if &n != p => Err(NotNormal::Spelling {
            given: p.clone(),
            normal: n,
        }),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_in_any_other_spelling_is_refused() {
        for raw in ["./secrets/x", "a/../secrets/x", "secrets//x", "secrets/x/"] {
            let mut args = Map::new();
            args.insert("path".into(), Value::String(raw.into()));
            assert!(check_normal_args(&args).is_err(), "{raw}");
            normalize_args(&mut args);
            assert_eq!(args["path"], "secrets/x");
            assert!(check_normal_args(&args).is_ok());
        }
        let mut climbs = Map::new();
        climbs.insert("path".into(), Value::String("../x".into()));
        assert!(check_normal_args(&climbs).is_err());
    }
}
