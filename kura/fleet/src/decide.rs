//! The fleet core: its decisions, with no I/O: which leaf a checkpoint rides with, what the hub's
//! answer to a published ledger means (placed, already there, or someone else's at this
//! Pi's place — the publisher's ALARM), and when a received checkpoint is the receiver's
//! ALARM. The publisher and the receivers carry them out against a hub ([`crate::port`]).
//! What a received batch must verify against is `pending`'s, also I/O-free.

use proto::fleet;

use crate::FleetError;

/// Leaves published before a checkpoint covers them (bounds what a receiver holds).
pub const LEAVES_PER_CHECKPOINT: u64 = 256;

/// How a halted publisher resumes, said in its ALARM.
pub(crate) const RESUME: &str = "on the hub: `kura fleet reseat <pi> --seq <sequence> --dir <hub dir>`; \
     then on this Pi remove replicas/<pi>.publish.alarm and restart kura serve";

/// Whether the leaf at `index` of a log of `size` leaves ends a batch: its ledger carries
/// a signed checkpoint and the cursor moves after it.
pub fn ends_batch(index: u64, size: u64) -> bool {
    index + 1 == size || (index + 1).is_multiple_of(LEAVES_PER_CHECKPOINT)
}

/// What the hub holds at a stream sequence, as the publisher read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// A ledger of this Pi's at leaf `index` with ledger hash `hash`.
    Ledger {
        /// Its leaf in the seal log.
        index: u64,
        /// Its ledger hash.
        hash: String,
    },
    /// A replication body that is not a ledger.
    NotALedger,
    /// Bytes that are no replication body (why).
    Unreadable(String),
}

/// Where the hub's answer puts a published leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// The ledger is on the hub at this stream sequence.
    At(u64),
    /// The hub already holds this Pi's ledgers up to `index` (its last at `seq`, with
    /// ledger hash `hash`): resume after it once it is checked against the seal log
    /// ([`resume`]).
    HubAhead {
        /// The hub's last leaf of this Pi.
        index: u64,
        /// Its stream sequence.
        seq: u64,
        /// Its ledger hash.
        hash: String,
    },
}

/// The hub took the ledger's message id before, at `seq`, and holds `held` there: placed
/// if that is this very ledger, else someone published under this Pi's id (an ALARM).
pub fn duplicate(
    pi: &str,
    index: u64,
    hash: &str,
    seq: u64,
    held: &Held,
) -> Result<Placed, FleetError> {
    match held {
        Held::Ledger { index: i, hash: h } if *i == index && h == hash => Ok(Placed::At(seq)),
        _ => Err(FleetError::Diverged(format!(
            "the hub holds another message under this Pi's id for leaf {index} (stream sequence \
             {seq} of {}): this Pi never published it; nothing more is published until the \
             hub's operator reseats this Pi ({RESUME})",
            fleet::stream(pi)
        ))),
    }
}

/// The hub refused the ledger at the expected place: its last ledger of this Pi is at
/// `seq` and holds `held`. A ledger of this Pi's at or past the cursor is the hub being
/// ahead (a publisher killed after the hub acknowledged and before the cursor moved); a
/// body that is not a ledger is nobody's word this Pi gave (an ALARM); a hub behind the
/// cursor lost history.
pub fn hub_ahead(pi: &str, index: u64, seq: u64, held: Held) -> Result<Placed, FleetError> {
    let foreign = |what: String| {
        FleetError::Diverged(format!(
            "the hub's last message on {} (stream sequence {seq} of {}) {what}: this Pi never \
             published it; nothing more is published until the hub's operator reseats this Pi ({RESUME})",
            fleet::ledger_subject(pi),
            fleet::stream(pi)
        ))
    };
    match held {
        Held::Ledger { index: i, .. } if i + 1 < index => Err(FleetError::Diverged(format!(
            "the hub holds this Pi's ledgers only up to leaf {i} but the cursor is at {index}: \
             run `kura fleet status` and check the hub's stream"
        ))),
        Held::Ledger { index, hash } => Ok(Placed::HubAhead { index, seq, hash }),
        Held::NotALedger => Err(foreign("is not a ledger".into())),
        Held::Unreadable(why) => Err(foreign(format!("does not read as a ledger ({why})"))),
    }
}

/// The hub holds a ledger with hash `hub_hash` at leaf `index` (stream sequence `seq`);
/// this Pi's seal log has `ours` there. The same: resume after it. Another (or none): the
/// hub's operator or another machine publishing under this Pi's name put it there (an
/// ALARM).
pub fn resume(
    pi: &str,
    index: u64,
    seq: u64,
    hub_hash: &str,
    ours: Option<&str>,
) -> Result<(), FleetError> {
    if ours == Some(hub_hash) {
        return Ok(());
    }
    Err(FleetError::Diverged(format!(
        "the hub holds another ledger at leaf {index} (stream sequence {seq} of {}) under {pi:?} \
         than this Pi's seal log: the hub's operator or another machine publishing under this \
         Pi's name put it there; nothing more is published until the hub's operator reseats \
         this Pi ({RESUME})",
        fleet::stream(pi)
    )))
}

/// A receiver's ALARM: the origin's signed checkpoint at `size` has root `signed` where the
/// replica verified `verified` for its first `size` leaves — the origin's own signed word
/// for another history. `None` when they agree.
pub fn rewritten(size: u64, verified: [u8; 32], signed: [u8; 32]) -> Option<String> {
    (verified != signed).then(|| {
        format!(
            "its signed checkpoint at size {size} has another root than the {size} leaves the replica verified: its history was rewritten"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(index: u64, hash: &str) -> Held {
        Held::Ledger {
            index,
            hash: hash.into(),
        }
    }

    #[test]
    fn a_checkpoint_rides_with_every_256th_leaf_and_the_last() {
        let ends: Vec<u64> = (0..600).filter(|&i| ends_batch(i, 600)).collect();
        assert_eq!(ends, vec![255, 511, 599]);
        assert!(ends_batch(0, 1));
    }

    #[test]
    fn a_duplicate_id_holding_this_ledger_is_where_it_was_placed() {
        assert_eq!(
            duplicate("pi-a", 4, "aa", 17, &ledger(4, "aa")).ok(),
            Some(Placed::At(17))
        );
    }

    #[test]
    fn a_duplicate_id_holding_anything_else_is_an_alarm_naming_its_sequence() {
        for held in [
            ledger(4, "bb"),
            ledger(5, "aa"),
            Held::NotALedger,
            Held::Unreadable("x".into()),
        ] {
            let e = duplicate("pi-a", 4, "aa", 17, &held)
                .err()
                .map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(
                e.contains("stream sequence 17") && e.contains("reseat"),
                "{held:?}: {e}"
            );
        }
    }

    #[test]
    fn a_hub_ahead_with_a_ledger_resumes_and_with_anything_else_halts() {
        assert_eq!(
            hub_ahead("pi-a", 3, 40, ledger(7, "cc")).ok(),
            Some(Placed::HubAhead {
                index: 7,
                seq: 40,
                hash: "cc".into()
            })
        );
        let not = hub_ahead("pi-a", 3, 40, Held::NotALedger)
            .err()
            .map(|e| e.to_string());
        assert!(not.is_some_and(|e| e.contains("is not a ledger") && e.contains("sequence 40")));
        let junk = hub_ahead("pi-a", 3, 40, Held::Unreadable("eof".into()))
            .err()
            .map(|e| e.to_string());
        assert!(junk.is_some_and(|e| e.contains("does not read as a ledger (eof)")));
        let behind = hub_ahead("pi-a", 9, 40, ledger(2, "cc"))
            .err()
            .map(|e| e.to_string());
        assert!(behind.is_some_and(|e| e.contains("only up to leaf 2")));
    }

    #[test]
    fn resuming_needs_the_seal_logs_own_ledger_at_the_hubs_place() {
        assert!(resume("pi-a", 7, 40, "cc", Some("cc")).is_ok());
        assert!(matches!(
            resume("pi-a", 7, 40, "cc", Some("dd")),
            Err(FleetError::Diverged(_))
        ));
        assert!(matches!(
            resume("pi-a", 7, 40, "cc", None),
            Err(FleetError::Diverged(_))
        ));
    }

    #[test]
    fn only_a_signed_root_unlike_the_verified_one_is_a_rewrite() {
        assert_eq!(rewritten(5, [1; 32], [1; 32]), None);
        assert!(rewritten(5, [1; 32], [2; 32]).is_some_and(|w| w.contains("size 5")));
    }
}
