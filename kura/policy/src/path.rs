//! The one normal form of a path, whoever spells it (hashi's workspace-relative paths, an
//! outside agent's absolute ones): the gate rules on it, a writ's globs match it, a person
//! signs it and the tool runs it, so `//`, `/./` and `/../` never change what a rule matches.

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

/// The arguments that name a path: hashi's `path`, and outside agents' `file_path` and
/// `notebook_path` (Claude Code's tools).
pub const PATH_KEYS: [&str; 3] = ["path", "file_path", "notebook_path"];

/// A path's lexical normal form, relative or absolute: empty parts and `.` dropped, `..`
/// resolved, a trailing `/` or `/.` gone (`/home/ana/proj//secrets/./key` is
/// `/home/ana/proj/secrets/key`; `/home/ana/proj/../.bashrc` is `/home/ana/.bashrc`). A path
/// that climbs above its start (`../x`, `/..`) or holds a NUL has none: no rule or writ glob
/// may match it, and the gate refuses the call.
pub fn normal(p: &str) -> Result<String, PathError> {
    if p.is_empty() {
        return Err(PathError::Empty);
    }
    if p.contains('\0') {
        return Err(PathError::Nul);
    }
    let absolute = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathError::Escapes(p.to_owned()));
                }
            }
            name => parts.push(name),
        }
    }
    let joined = parts.join("/");
    Ok(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    })
}

/// The path arguments of a call, as given (strings only: a path that is not a string is
/// the tool's to refuse).
pub fn paths_of(args: &Map<String, Value>) -> impl Iterator<Item = (&'static str, &str)> {
    PATH_KEYS
        .into_iter()
        .filter_map(|k| args.get(k).and_then(Value::as_str).map(|v| (k, v)))
}

/// The arguments in normal form: every path argument ([`PATH_KEYS`]) respelled by
/// [`normal`]. A path with no normal form is left as given and named in the error.
pub fn normalize_args(arguments: &mut Map<String, Value>) -> Result<(), PathError> {
    let mut first_error = None;
    for k in PATH_KEYS {
        if let Some(Value::String(p)) = arguments.get_mut(k) {
            match normal(p) {
                Ok(n) => *p = n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
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
    for (_, p) in paths_of(arguments) {
        match normal(p) {
            Err(e) => return Err(NotNormal::Invalid(e)),
            Ok(n) if n != p => {
                return Err(NotNormal::Spelling {
                    given: p.to_owned(),
                    normal: n,
                });
            }
            Ok(_) => {}
        }
    }
    Ok(())
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
            normalize_args(&mut args).expect("normal");
            assert_eq!(args["path"], "secrets/x");
            assert!(check_normal_args(&args).is_ok());
        }
        let mut climbs = Map::new();
        climbs.insert("path".into(), Value::String("../x".into()));
        assert!(check_normal_args(&climbs).is_err());
    }

    /// Attack: an outside agent spells a path so a deny rule misses it or an allow rule
    /// takes it. Every spelling has one normal form, absolute or relative.
    #[test]
    fn every_spelling_of_a_path_has_one_normal_form() {
        for (given, want) in [
            (
                "/home/ana/proj//secrets/key",
                Ok("/home/ana/proj/secrets/key"),
            ),
            (
                "/home/ana/proj/./secrets/key",
                Ok("/home/ana/proj/secrets/key"),
            ),
            (
                "/home/ana/proj/x/../secrets/key",
                Ok("/home/ana/proj/secrets/key"),
            ),
            ("/home/ana/proj/secrets/.", Ok("/home/ana/proj/secrets")),
            ("/home/ana/proj/secrets/", Ok("/home/ana/proj/secrets")),
            ("/home/ana/proj/../.bashrc", Ok("/home/ana/.bashrc")),
            ("notes//a.md", Ok("notes/a.md")),
            ("./notes/./a.md", Ok("notes/a.md")),
            ("/", Ok("/")),
            (".", Ok(".")),
            ("/..", Err(())),
            ("../x", Err(())),
            ("a/../../x", Err(())),
            ("", Err(())),
        ] {
            assert_eq!(normal(given).ok().as_deref(), want.ok(), "{given}");
        }
        let mut args = Map::new();
        args.insert("file_path".into(), Value::String("/p//a/../b".into()));
        args.insert("notebook_path".into(), Value::String("/p/./n.ipynb".into()));
        normalize_args(&mut args).expect("normal");
        assert_eq!(args["file_path"], "/p/b");
        assert_eq!(args["notebook_path"], "/p/n.ipynb");
        args.insert("path".into(), Value::String("../up".into()));
        assert!(normalize_args(&mut args).is_err());
    }
}
