//! UUIDv7 identifiers: time-sortable, so id order is creation order.

use uuid::Uuid;

/// A fresh UUIDv7. Within one process, ids are strictly increasing.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// Parses a textual id, accepting only the hyphenated form Kura writes.
pub fn parse_id(text: &str) -> Option<Uuid> {
    if text.len() != 36 {
        return None;
    }
    Uuid::try_parse(text).ok()
}

/// A textual id that is not one of Kura's (36 characters, hyphenated UUID).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a {what} id (a hyphenated UUID): {text:?}")]
pub struct BadId {
    /// Which kind of id was expected.
    pub what: &'static str,
    /// What was given, cut to 64 characters.
    pub text: String,
}

/// Declares an id newtype over a UUIDv7 (atuin's `new_uuid!` habit): a turn id does not
/// type-check where a session id belongs. It serializes as the hyphenated text Kura has
/// always written (JSON and record hashes unchanged) and, with the `sql` feature, is stored
/// and read as that text by SQLite.
macro_rules! new_uuid {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh id (UUIDv7: later ids sort after earlier ones). Deliberately not
            /// `Default`: a defaulted field must never mint a new random id unseen.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                $name(new_id())
            }

            /// The UUID underneath.
            pub const fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(u: Uuid) -> Self {
                $name(u)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl PartialEq<Uuid> for $name {
            fn eq(&self, other: &Uuid) -> bool {
                self.0 == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "format": "uuid", "description": $what})
            }
        }

        impl std::str::FromStr for $name {
            type Err = BadId;

            fn from_str(s: &str) -> Result<Self, BadId> {
                parse_id(s).map($name).ok_or_else(|| BadId {
                    what: $what,
                    text: s.chars().take(64).collect(),
                })
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.0.to_string()))
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::FromSql for $name {
            fn column_result(
                v: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                v.as_str()?
                    .parse()
                    .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

new_uuid!(
    /// A record: one immutable, content-addressed step.
    RecordId, "record"
);
new_uuid!(
    /// A ledger: an ordered, sealable collection of records.
    LedgerId, "ledger"
);
new_uuid!(
    /// A session: a branch of ledgers with a head.
    SessionId, "session"
);
new_uuid!(
    /// A turn: one worker's run from a context ledger to an output ledger.
    TurnId, "turn"
);
new_uuid!(
    /// An approval request: a tool call waiting for a ruling or a person.
    RequestId, "approval request"
);
new_uuid!(
    /// A writ: a person's signed grant of authority (or a delegation from one).
    WritId, "writ"
);
new_uuid!(
    /// A plan filed from a planning turn's `agent.plan` record: its steps run as sessions.
    PlanId, "plan"
);

/// Declares a name newtype over text someone else chose (a model's call id, a role in the
/// roster): a call id does not type-check where a role belongs. It serializes as the bare
/// string (record hashes unchanged), reads as `&str` where text is wanted, and with the `sql`
/// feature is stored and read as that text.
macro_rules! new_name {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(String);

        // Quoted like the text it is, so a message that quotes a name (`{role:?}`) reads as
        // it did when names were strings.
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            /// The name as given.
            pub fn new(text: impl Into<String>) -> Self {
                $name(text.into())
            }

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }

        impl From<&$name> for $name {
            fn from(n: &$name) -> Self {
                n.clone()
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> String {
                n.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "description": $what})
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.0.as_str()))
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::FromSql for $name {
            fn column_result(
                v: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                Ok($name(v.as_str()?.to_owned()))
            }
        }
    };
}

new_name!(
    /// A tool call's pairing id: chosen by the model (or by Kura for an outside agent's
    /// declaration), it pairs a `tool.call` with its `tool.result` and its approval.
    CallId, "a tool call's pairing id"
);
new_name!(
    /// A role in the roster (`[roles.<name>]`): what a request, a plan step or a writ's
    /// `role:<name>` holder names.
    RoleName, "a role in the roster"
);

impl RecordId {
    /// The approval request this `approval.request` record opens (a request is known by its
    /// record's id).
    pub const fn as_request(self) -> RequestId {
        RequestId(self.0)
    }
}

impl RequestId {
    /// The `approval.request` record that opened this request.
    pub const fn record(self) -> RecordId {
        RecordId(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v7_and_increasing() {
        let a = new_id();
        let b = new_id();
        assert_eq!(a.get_version_num(), 7);
        assert!(b > a, "{b} should sort after {a}");
    }

    #[test]
    fn parse_rejects_other_forms() {
        let id = new_id();
        assert_eq!(parse_id(&id.to_string()), Some(id));
        assert_eq!(parse_id(&id.simple().to_string()), None);
        assert_eq!(parse_id("not-an-id"), None);
    }

    #[test]
    fn typed_ids_keep_the_text_kura_always_wrote() {
        let u = new_id();
        let t = TurnId::from(u);
        assert_eq!(t.to_string(), u.to_string());
        assert_eq!(
            serde_json::to_string(&t).expect("json"),
            serde_json::to_string(&u).expect("json")
        );
        let back: TurnId = u.to_string().parse().expect("parse");
        assert_eq!(back, t);
        let err = "nope".parse::<SessionId>().expect_err("refused");
        assert_eq!(err.what, "session");
        assert!(SessionId::new() < SessionId::new());
    }

    #[test]
    fn names_keep_the_text_and_do_not_mix() {
        let c = CallId::from("call_1");
        assert_eq!(serde_json::to_string(&c).expect("json"), "\"call_1\"");
        let back: CallId = serde_json::from_str("\"call_1\"").expect("parse");
        assert_eq!(back, c);
        assert_eq!(c, "call_1");
        assert_eq!(c.as_str(), "call_1");
        let r: RoleName = serde_json::from_str("\"writer\"").expect("parse");
        assert_eq!(r.to_string(), "writer");
        assert_eq!(format!("{r:?}"), "\"writer\"", "quoted as the text it is");
        // A content carrying one hashes as before: the newtype is transparent.
        let t = crate::ToolCallContent::new("fs.read", serde_json::Map::new(), "c1");
        assert_eq!(t.to_value()["call_id"], "c1");
    }
}
