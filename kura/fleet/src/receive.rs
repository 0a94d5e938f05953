//! Keeping a verified replica of another Pi: read its stream in order, hold its records and
//! ledgers in memory (bounded, `pending`) until one of its signed checkpoints covers
//! them, then write them in one transaction that recomputes every hash, checks the seals,
//! rebuilds the origin's seal log and compares its root with the checkpoint's — and commits
//! only if all hold. What does not verify is never written. Only a signed checkpoint that
//! contradicts what the replica already verified is an ALARM against the origin (logged,
//! kept in `<pi>.alarm` beside the replica, which stays as it was until a person looks);
//! anything else that does not fit is the hub's delay, dropped and retried.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::{self, kv, object_store::ObjectStore, stream::Stream};
use futures::StreamExt;
use kura_store::replica::{has_record, inbox, logged_hash};
use kura_store::{Store, StoreError, StoreOptions};
use kura_tlog::checkpoint;
use kura_tlog::cosign::Witness;
use kura_tlog::sealer::Keyring;
use proto::fleet::{self, ReplLedger, ReplMessage};

use crate::pending::{Checkpoint, Pending};
use crate::{FleetError, FleetPeer, Result, wire};

/// How long a receiver behind its origin's checkpoint waits for a message before it builds
/// its consumer again.
const STALLED: Duration = Duration::from_secs(5);

/// A replica of one origin Pi.
pub struct Receiver {
    origin: String,
    vkey: String,
    keyring: Option<Keyring>,
    db: PathBuf,
    alarm: PathBuf,
    checkpoint: PathBuf,
    /// Ways of filling a batch already tried and refused (digests of the stream sequences
    /// chosen), never tried again — across a reconnect too — until the replica moves on.
    refused: std::sync::Mutex<std::collections::HashSet<[u8; 32]>>,
    max_pending: u64,
    witness: Option<(String, Arc<Witness>)>,
    stream: Stream,
    kv: kv::Store,
    objects: ObjectStore,
    people: Vec<kura_policy::writ::Issuer>,
}

/// The replica's file for `origin` in `dir`.
pub fn replica_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{origin}.db"))
}

/// The ALARM file for `origin` in `dir`.
pub fn alarm_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{origin}.alarm"))
}

/// The signed checkpoint `origin`'s replica in `dir` was last verified against, kept beside
/// it (`<pi>.checkpoint`) for `kura verify` on the replica. Only the checkpoint: the log key
/// and keyring it is held to are this Pi's pins in serve.toml, never files beside the data.
pub fn checkpoint_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{origin}.checkpoint"))
}

/// Writes `text` to `path` whole or not at all (a temporary file renamed over it).
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn beside_error(path: &Path, e: std::io::Error) -> FleetError {
    FleetError::Config(format!(
        "cannot write {}: {e} (the replicas directory must be writable by kura serve)",
        path.display()
    ))
}

impl Receiver {
    /// A receiver for `peer` (its sealers' `keyring` when pinned), keeping its replica in
    /// `dir`; `witness` (this Pi's name and
    /// witness) cosigns each checkpoint it verified.
    pub async fn new(
        client: async_nats::Client,
        peer: &FleetPeer,
        keyring: Option<Keyring>,
        dir: &Path,
        max_pending: u64,
        witness: Option<(String, Arc<Witness>)>,
    ) -> Result<Receiver> {
        proto::fleet::check_pi_name(&peer.name).map_err(|e| FleetError::Config(e.to_string()))?;
        std::fs::create_dir_all(dir)
            .map_err(|e| FleetError::Config(format!("cannot create {}: {e}", dir.display())))?;
        let js = jetstream::with_domain(client, fleet::DOMAIN);
        let (stream, kv, objects) = crate::hub::open(&js, &peer.name).await?;
        let checkpoint = checkpoint_path(dir, &peer.name);
        let db = replica_path(dir, &peer.name);
        // A replica verified before checkpoints were kept beside it gets its file now.
        if !checkpoint.exists()
            && db.exists()
            && let Some((_, note, _)) =
                inbox(&Store::open(&db, &StoreOptions::default())?, &peer.name)?
        {
            write_whole(&checkpoint, &note).map_err(|e| beside_error(&checkpoint, e))?;
        }
        Ok(Receiver {
            origin: peer.name.clone(),
            vkey: peer.log_verifier.trim().to_owned(),
            keyring,
            db,
            alarm: alarm_path(dir, &peer.name),
            checkpoint,
            refused: std::sync::Mutex::default(),
            max_pending,
            witness,
            stream,
            kv,
            objects,
            people: Vec::new(),
        })
    }

    /// The people whose redactions the replica applies as its origin did (`[writs] issuers`).
    pub fn with_people(mut self, people: Vec<kura_policy::writ::Issuer>) -> Receiver {
        self.people = people;
        self
    }

    fn refused(&self, why: impl Into<String>) -> FleetError {
        FleetError::Refused {
            origin: self.origin.clone(),
            why: why.into(),
        }
    }

    fn open_store(&self) -> Result<Store> {
        let options = StoreOptions::default();
        Ok(match Store::open(&self.db, &options) {
            Ok(s) => s,
            Err(StoreError::NoDatabase(_)) => Store::create(&self.db, &options)?,
            Err(e) => return Err(e.into()),
        })
    }

    /// Follows the origin until `stop` resolves. Returns the refusal that halted it (also
    /// kept in the ALARM file), or `Ok` on stop. Hub trouble is retried.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(stop);
        if let Ok(why) = std::fs::read_to_string(&self.alarm) {
            return Err(self.refused(format!(
                "halted by an earlier ALARM ({}): {}; remove that file after investigating and restart kura serve to resume",
                self.alarm.display(),
                why.trim()
            )));
        }
        loop {
            let outcome = tokio::select! {
                r = self.follow() => r,
                _ = &mut stop => return Ok(()),
            };
            match outcome {
                Err(e @ FleetError::Refused { .. }) => {
                    let why = e.to_string();
                    tracing::error!(origin = %self.origin, %why, "ALARM: a replica refused its origin's history; nothing of it was written");
                    let _ = std::fs::write(&self.alarm, format!("{why}\n"));
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(origin = %self.origin, error = %e, "replication paused; retrying");
                }
                Ok(()) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = &mut stop => return Ok(()),
            }
        }
    }

    /// Builds (or brings up to date) the replica up to the origin's newest checkpoint and
    /// returns: for `kura fleet restore`. Returns the leaves verified and the checkpoint.
    ///
    /// The newest checkpoint is the largest of the bucket's, the one riding with the
    /// stream's last ledger, and those its witnesses cosigned. If the stream holds ledgers
    /// past it (the Pi died between publishing and signing), the restore is refused: its
    /// log key would otherwise sign a different tree at a size it may already have signed.
    pub async fn catch_up(self) -> Result<(u64, String)> {
        let mut candidates: Vec<Checkpoint> = self.latest_checkpoint().await?.into_iter().collect();
        let last = self.last_ledger().await?;
        if let Some(note) = last.as_ref().and_then(|l| l.checkpoint.as_deref())
            && let Ok(cp) = self.open_checkpoint(note.as_bytes())
        {
            candidates.push(cp);
        }
        candidates.extend(self.cosigned_checkpoints().await);
        let Some((note, target)) = candidates.into_iter().max_by_key(|(_, c)| c.size) else {
            return Err(FleetError::Hub(format!(
                "the hub holds no checkpoint of {}: nothing to restore",
                self.origin
            )));
        };
        if let Some(l) = &last
            && l.index + 1 > target.size
        {
            return Err(FleetError::Hub(format!(
                "the hub holds {} of {}'s ledgers but its newest checkpoint covers {}: it died \
                 before signing the rest, and restoring would let its log key sign another tree \
                 at sizes it may have signed; restore with a new log key instead (kura log-key \
                 init) and pin that key on the other Pis",
                l.index + 1,
                self.origin,
                target.size
            )));
        }
        let mut store = self.open_store()?;
        self.follow_until(&mut store, Some(target.size)).await?;
        let seq = inbox(&store, &self.origin)?.map_or(0, |(seq, _, _)| seq);
        let origin = self.origin.clone();
        store.write(|tx| tx.set_outbox(&origin, target.size, seq))?;
        Ok((target.size, note))
    }

    /// The last ledger the stream holds of the origin, if any.
    async fn last_ledger(&self) -> Result<Option<ReplLedger>> {
        let Ok(m) = self
            .stream
            .get_last_raw_message_by_subject(&fleet::ledger_subject(&self.origin))
            .await
        else {
            return Ok(None);
        };
        match wire::decode(&self.origin, &m.payload, &self.objects).await {
            Ok(ReplMessage::Ledger(l)) => Ok(Some(l)),
            _ => Ok(None),
        }
    }

    /// The origin's checkpoints as its witnesses cosigned them (signature checked).
    async fn cosigned_checkpoints(&self) -> Vec<Checkpoint> {
        let mut out = Vec::new();
        let prefix = format!("{}.cosig.", self.origin);
        let Ok(mut keys) = self.kv.keys().await else {
            return out;
        };
        while let Some(Ok(key)) = keys.next().await {
            if !key.starts_with(&prefix) {
                continue;
            }
            if let Ok(Some(v)) = self.kv.get(&key).await
                && let Ok(cp) = self.open_checkpoint(&v)
            {
                out.push(cp);
            }
        }
        out
    }

    /// One pass: from the replica's cursor, apply what checkpoints cover, until an error.
    async fn follow(&self) -> Result<()> {
        let mut store = self.open_store()?;
        self.follow_until(&mut store, None).await
    }

    /// Follows until an error, or until the replica holds `until` leaves.
    async fn follow_until(&self, store: &mut Store, until: Option<u64>) -> Result<()> {
        let start = inbox(&*store, &self.origin)?.map_or(1, |(seq, _, _)| seq + 1);
        let consumer = self
            .stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: fleet::pi_subjects(&self.origin),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ..Default::default()
            })
            .await
            .map_err(FleetError::hub)?;
        let mut messages = consumer.messages().await.map_err(FleetError::hub)?;
        let mut watch = self.kv.watch(&self.origin).await.map_err(FleetError::hub)?;
        let mut p = Pending::default();
        if let Some(cp) = self.latest_checkpoint().await? {
            p.checkpoint(cp);
        }
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let mut progress = std::time::Instant::now();
        // Whether something arrived that can complete a batch: a ledger or a checkpoint (a
        // record alone cannot, unless it is late, which the next tick catches). Checking on
        // every record made a restore's batch quadratic (measured: 0.19x local group commit
        // with 20 000 records).
        let mut due = true;
        loop {
            if due {
                self.apply(store, &mut p).await?;
                due = false;
            }
            let size = kura_tlog::seallog::size(&store.seal_log()).map_err(StoreError::from)?;
            if until.is_some_and(|u| size >= u) {
                return Ok(());
            }
            tokio::select! {
                m = messages.next() => {
                    let m = m.ok_or_else(|| FleetError::Hub("the stream ended".into()))?
                        .map_err(FleetError::hub)?;
                    let seq = m.info().map_err(FleetError::hub)?.stream_sequence;
                    progress = std::time::Instant::now();
                    due = self.take(store, &mut p, seq, &m.payload).await?;
                }
                e = watch.next() => {
                    if let Some(Ok(entry)) = e && entry.operation == kv::Operation::Put {
                        self.keep_checkpoint(&mut p, &entry.value);
                        due = true;
                    }
                }
                _ = tick.tick() => {
                    if let Some(cp) = self.latest_checkpoint().await? {
                        p.checkpoint(cp);
                    }
                    due = true;
                    // A consumer whose hub node died can stall without an error: when the
                    // origin's checkpoint is ahead and nothing came for a while, start over
                    // from the replica's cursor.
                    if p.newest().is_some_and(|n| n > size) && progress.elapsed() > STALLED {
                        return Err(FleetError::Hub(format!(
                            "nothing from {} for {} s while its checkpoint is ahead; reconnecting",
                            self.origin,
                            STALLED.as_secs()
                        )));
                    }
                }
            }
        }
    }

    /// Keeps a checkpoint if it is the origin's (a bad one is dropped: unsigned bytes prove
    /// nothing against anyone).
    fn keep_checkpoint(&self, p: &mut Pending, bytes: &[u8]) {
        match self.open_checkpoint(bytes) {
            Ok(cp) => p.checkpoint(cp),
            Err(e) => {
                tracing::warn!(origin = %self.origin, error = %e, "dropped a checkpoint that is not the origin's")
            }
        }
    }

    async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        match self.kv.get(&self.origin).await.map_err(FleetError::hub)? {
            Some(v) => Ok(self.open_checkpoint(&v).ok()),
            None => Ok(None),
        }
    }

    /// A checkpoint from the bucket, under the origin's pinned key (any other is refused).
    fn open_checkpoint(&self, bytes: &[u8]) -> Result<Checkpoint> {
        let note = std::str::from_utf8(bytes)
            .map_err(|_| self.refused("its checkpoint is not text"))?
            .to_owned();
        let signed = checkpoint::open(&note, &self.vkey)
            .map_err(|e| self.refused(format!("its checkpoint does not verify: {e}")))?;
        Ok((note, signed))
    }

    /// Holds one message; true when it was a ledger (which may complete a batch). A body
    /// that does not decode, or a ledger at a place the replica already verified with
    /// another hash, is dropped with a warning: it is unsigned, so it says nothing about the
    /// origin (a signed checkpoint will, if there is a rewrite).
    async fn take(&self, store: &Store, p: &mut Pending, seq: u64, payload: &[u8]) -> Result<bool> {
        let message = match wire::decode(&self.origin, payload, &self.objects).await {
            Ok(m) => m,
            Err(FleetError::Refused { why, .. }) => {
                tracing::warn!(origin = %self.origin, seq, %why, "dropped a message that is not a replication body");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let ledger = matches!(message, ReplMessage::Ledger(_));
        match message {
            ReplMessage::Record(r) => {
                // A body that does not hash to the hash it claims is nobody's record: dropped
                // here, so it never takes the place of the origin's own (a redacted record's
                // tombstone is checked against its kept leaf when its ledger is written).
                if r.redacted.is_none() && !r.columns.as_columns().hash_matches() {
                    tracing::warn!(origin = %self.origin, seq, hash = %r.columns.hash, "dropped a record that does not hash to the hash it claims");
                    return Ok(false);
                }
                // A body already held is never replaced: a copy someone altered where the
                // content hash does not reach (metadata, id, time) and sent later would
                // otherwise take the origin's place and fail its batch for good.
                if let Some(held) = p.records.get(&r.columns.hash) {
                    if *held != r.columns {
                        tracing::warn!(origin = %self.origin, seq, hash = %r.columns.hash, "dropped another body for a record already held");
                    }
                    return Ok(false);
                }
                p.bytes += r.columns.content.len() as u64 + 200;
                if let Some(kept) = r.redacted {
                    // The signed redaction is held too, and counted against the bound.
                    p.bytes += kept.redaction.body.reason.len() as u64 + 512;
                    p.redacted.insert(r.columns.hash.clone(), kept);
                }
                p.records.insert(r.columns.hash.clone(), r.columns);
            }
            ReplMessage::Ledger(l) => {
                p.bytes += l.members.len() as u64 * 70 + 1024;
                if let Some(note) = &l.checkpoint {
                    self.keep_checkpoint(p, note.as_bytes());
                }
                match logged_hash(store, l.index)? {
                    Some(h) if h == l.ledger_hash => {}
                    Some(h) => tracing::warn!(
                        origin = %self.origin, index = l.index, seq,
                        "dropped ledger {} with hash {}: the replica verified {h} there", l.ledger_id, l.ledger_hash
                    ),
                    None => {
                        let (index, id) = (l.index, l.ledger_id);
                        let rivals = p.ledger(seq, l);
                        if !rivals.is_empty() {
                            tracing::warn!(
                                origin = %self.origin, index, seq, ?rivals,
                                "ledger {id} is not the only one at this leaf (the others came at the stream sequences named): all are held, the origin's signed checkpoint decides, and the rest are dropped"
                            );
                        }
                    }
                }
            }
            ReplMessage::Object { .. } => {}
        }
        if p.bytes > self.max_pending {
            return Err(FleetError::Hub(format!(
                "{} sent more than {} bytes no checkpoint covers yet; starting over from the replica's cursor",
                self.origin, self.max_pending
            )));
        }
        Ok(ledger)
    }

    /// Writes one way of filling a batch in one transaction that recomputes every hash,
    /// checks the seals and compares the rebuilt seal log's root with the checkpoint's;
    /// any failure rolls it all back.
    fn write_batch(
        &self,
        store: &mut Store,
        p: &Pending,
        batch: &[(u64, ReplLedger)],
        (note, cp): (&str, &kura_tlog::checkpoint::Signed),
    ) -> Result<()> {
        let ids: Vec<String> = batch.iter().map(|(_, l)| l.ledger_id.to_string()).collect();
        let last_seq = batch.last().map_or(0, |(s, _)| *s);
        Ok(store.write(|tx| {
            for (_, l) in batch {
                tx.import_ledger_with(l, &p.records, &p.redacted, &self.people)?;
            }
            if tx.seal_log_root(cp.size)? != cp.root.0 {
                return Err(StoreError::Corrupt {
                    what: "replica",
                    id: self.origin.clone(),
                    detail: format!(
                        "the ledgers the hub holds do not rebuild {}'s seal log to its signed checkpoint at {} leaves",
                        self.origin, cp.size
                    ),
                });
            }
            // A seal that is there must verify and, with a keyring, be the origin's; a
            // missing one is not held against it (seals are not covered by the checkpoint,
            // and ledgers sealed before signing began have none).
            let problems = kura_tlog::sealer::check(
                &kura_store::SealLog::over(kura_store::Db::sql(tx)),
                &ids,
                self.keyring.as_ref(),
            )?;
            if let Some((id, check, detail)) =
                problems.into_iter().find(|(_, c, _)| *c != "sealer_missing")
            {
                return Err(StoreError::Corrupt {
                    what: "replicated ledger",
                    id,
                    detail: format!("{check}: {detail}"),
                });
            }
            tx.set_inbox(&self.origin, last_seq, note)
        })?)
    }

    /// Holds each checkpoint of at most the replica's size against what it verified (a
    /// different root is the origin's signed word for another history: the ALARM), then
    /// writes the largest batch a held checkpoint covers.
    async fn apply(&self, store: &mut Store, p: &mut Pending) -> Result<()> {
        let size = kura_tlog::seallog::size(&store.seal_log()).map_err(StoreError::from)?;
        for (_, cp) in p.take_covered(size) {
            if p.checked == Some((cp.size, cp.root.0)) {
                continue;
            }
            let root = kura_tlog::seallog::root(&store.seal_log(), cp.size)
                .map_err(StoreError::from)?
                .0;
            if let Some(why) = crate::decide::rewritten(cp.size, root, cp.root.0) {
                return Err(self.refused(why));
            }
            p.checked = Some((cp.size, cp.root.0));
        }
        if let Some((note, trees)) = self.write_ready(store, p, size)? {
            self.pull_files(&trees).await;
            self.cosign(store, &note).await;
        }
        Ok(())
    }

    /// Fetches the files the written ledgers name, beside the replica (`<pi>.objects`). The
    /// records are verified already; a file the hub lacks is said in the log and reported
    /// by `kura verify --workspace` on the replica, never held against the history.
    async fn pull_files(&self, trees: &[proto::workspace::ObjectId]) {
        if trees.is_empty() {
            return;
        }
        let objects = match kura_objects::Objects::open(&kura_objects::Objects::beside(&self.db)) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(origin = %self.origin, error = %e, "cannot open the replica's object store");
                return;
            }
        };
        for t in trees {
            match crate::files::pull(&self.objects, &objects, t).await {
                Ok(got) if got.missing + got.refused == 0 => {
                    tracing::debug!(origin = %self.origin, tree = %t, objects = got.objects, "fleet: workspace objects received")
                }
                Ok(got) => {
                    tracing::warn!(origin = %self.origin, tree = %t, missing = got.missing, refused = got.refused, "some of a replicated tree's files are not on the hub or do not hash to their names")
                }
                Err(e) => {
                    tracing::warn!(origin = %self.origin, tree = %t, error = %e, "cannot fetch a replicated tree's files")
                }
            }
        }
    }

    /// Writes the largest batch a held checkpoint covers, trying each way to fill it that
    /// was not refused before; the checkpoint's note when one was written.
    fn write_ready(
        &self,
        store: &mut Store,
        p: &mut Pending,
        size: u64,
    ) -> Result<Option<(String, Vec<proto::workspace::ObjectId>)>> {
        let stored = |h: &str| has_record(&*store, h).unwrap_or(false);
        let Some((note, cp)) = p.ready(size, stored).cloned() else {
            return Ok(None);
        };
        // Rivals at an index (someone else's ledger beside the origin's) make more than one
        // way to fill the batch: each is tried, and only one that rebuilds the signed root
        // is written.
        let preferred = |l: &ReplLedger| {
            l.seal.as_ref().is_some_and(|seal| {
                kura_store::replica::seal_verifies(seal, &l.ledger_hash)
                    && self
                        .keyring
                        .as_ref()
                        .is_none_or(|k| k.contains_key(&seal.sealer))
            })
        };
        // What was refused stays refused across a reconnect, until the replica moves on.
        let mut refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tries: Vec<Vec<(u64, ReplLedger)>> = p
            .batches(size, cp.size, stored, preferred, &refused)
            .into_iter()
            .map(|b| b.into_iter().cloned().collect())
            .collect();
        let t = std::time::Instant::now();
        let mut last_refusal = None;
        let mut written = None;
        for batch in &tries {
            match self.write_batch(store, p, batch, (&note, &cp)) {
                Ok(()) => {
                    written = Some(batch);
                    break;
                }
                Err(FleetError::Store(e)) if e.is_corruption() => last_refusal = Some(e),
                Err(e) => return Err(e),
            }
        }
        let Some(batch) = written else {
            let Some(e) = last_refusal else {
                return Ok(None);
            };
            // Unsigned bodies that do not rebuild the signed root: nothing is written. The
            // ways tried are not tried again; reading goes on, so the origin's own ledgers,
            // arriving later, are tried next (the hub may delay or mangle; it cannot make us
            // write). Bounded, 32 bytes each: past the bound the hub is taken to withhold the
            // origin's own ledgers, and what is tried may repeat.
            if refused.len() < crate::pending::MAX_REFUSED {
                for b in &tries {
                    refused.insert(crate::pending::digest(b.iter().map(|(s, _)| *s)));
                }
            }
            let at: Vec<Vec<u64>> = tries
                .iter()
                .map(|b| b.iter().map(|(s, _)| *s).collect())
                .collect();
            tracing::error!(origin = %self.origin, error = %e, stream_seqs = ?at, "refused a batch of the origin's history; nothing written; reading on");
            if refused.len() >= crate::pending::MAX_REFUSED {
                tracing::error!(origin = %self.origin, refused = refused.len(), "rival ledgers at too many leaves: pin the origin's keyring ([[fleet.peers]] keyring) so its own seals are tried first");
            }
            return Ok(None);
        };
        for i in size..cp.size {
            for (seq, l) in p.ledgers.get(&i).into_iter().flatten() {
                if !batch.iter().any(|(s, _)| s == seq) {
                    tracing::warn!(
                        origin = %self.origin, index = i, seq,
                        "dropped ledger {} with hash {}: the origin's signed checkpoint covers another at this leaf",
                        l.ledger_id, l.ledger_hash
                    );
                }
            }
        }
        if let Err(e) = write_whole(&self.checkpoint, &note) {
            tracing::warn!(origin = %self.origin, error = %e, path = %self.checkpoint.display(), "the checkpoint the replica was verified against could not be kept beside it; `kura verify` on the replica will say so");
        }
        tracing::info!(origin = %self.origin, size = cp.size, ledgers = batch.len(), write_us = t.elapsed().as_micros() as u64, "replica verified against the origin's checkpoint");
        p.applied(cp.size);
        refused.clear();
        p.checked = Some((cp.size, cp.root.0));
        // The trees the written ledgers' records name, for their files.
        let mut trees = Vec::new();
        for (_, l) in batch {
            for r in store.hydrate(l.ledger_id)? {
                if let Some(w) = proto::workspace::change_of(r.record_type, &r.content) {
                    trees.extend([w.before, w.after]);
                }
            }
        }
        trees.sort();
        trees.dedup();
        Ok(Some((note, trees)))
    }

    /// Cosigns the checkpoint just verified, as a witness, and puts it beside the origin's.
    async fn cosign(&self, store: &Store, note: &str) {
        let Some((me, witness)) = &self.witness else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut old = 0;
        for _ in 0..2 {
            let body = match kura_tlog::cosign::request_body(&store.seal_log(), note, old) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(origin = %self.origin, error = %e, "cannot cosign");
                    return;
                }
            };
            let reply = witness.add_checkpoint(&body, now);
            match reply.status {
                kura_tlog::cosign::Status::Cosigned => {
                    let cosigned = format!("{note}{}", reply.body);
                    let key = fleet::cosignature_key(&self.origin, me);
                    if let Err(e) = self.kv.put(&key, cosigned.into_bytes().into()).await {
                        tracing::warn!(origin = %self.origin, error = %e, "cannot put the cosignature");
                    }
                    return;
                }
                kura_tlog::cosign::Status::WrongOld => old = reply.body.trim().parse().unwrap_or(0),
                _ => {
                    tracing::error!(origin = %self.origin, status = ?reply.status, why = %reply.body, "ALARM: this Pi's witness refused to cosign a checkpoint the replica verified");
                    return;
                }
            }
        }
    }
}
