//! One active autoscaler per cluster: a lease in the GCS KV.
//!
//! The GCS KV has no compare-and-swap, but its put-if-absent is atomic. So the lease is
//! a series of keys `lease/<cluster>/<epoch>` (epoch zero-padded): a process becomes the
//! holder by *creating* the key of the next epoch, which only one process can do, and
//! the highest epoch is the holder. The holder renews by rewriting its key (a counter)
//! every `renew_every`. A follower watches the highest key; when its value has not
//! changed for `duration` (on the follower's own clock, so no clocks are compared), or the
//! holder released it, the follower creates the next epoch.
//!
//! Correct under latency (a loaded GCS):
//! - every call has its own deadline ([`LeaseSettings::call_deadline`]), and rounds start
//!   every `renew_every` from the start of the last (a slow round is not followed by a
//!   pause);
//! - a holder may act only until its last *confirmed* renewal plus `renew_deadline`
//!   (shorter than `duration`), counted from when that renewal was *sent*; a holder that
//!   could not renew for `renew_deadline` gives the lease up (it stops writing, so a put
//!   of its that lands late cannot keep a follower waiting for ever);
//! - a follower counts `duration` from the *answer* that first showed the value, and, on
//!   taking over a lease that lapsed (not one released), acts only `renew_deadline` after
//!   its key was created: a renewal the old holder sent before that, whatever its latency,
//!   has expired by then.
//!
//! Keys are outside input (any Ray job can write the namespace): an epoch above
//! [`MAX_EPOCH`] is reported once and ignored, and a value that does not parse is an
//! unchanging value (taken over after `duration`).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::gcs::Gcs;
use crate::error::CoreError;

/// The highest epoch rayscale takes for real (2^48: a takeover a second for 8 million
/// years); a key above it was written by something else and is ignored.
pub const MAX_EPOCH: u64 = 1 << 48;

/// Runs `call` under `deadline`; no answer in time is a GCS error naming `what`.
pub(super) async fn within<T>(
    deadline: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, CoreError>>,
) -> Result<T, CoreError> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(CoreError::gcs(
                what,
                format!("no answer within {deadline:?}"),
            ))
        })
}

/// The lease's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// A lease whose key has not changed this long (seen by a follower) is taken over.
    pub duration: Duration,
    /// The holder renews this often (and a follower looks this often).
    pub renew_every: Duration,
    /// A holder that could not renew this long stops acting.
    pub renew_deadline: Duration,
}

impl Default for LeaseSettings {
    /// 10 s, 2 s, 7 s: a follower takes over at most ~12 s after the holder's last
    /// renewal; the holder has stopped acting 3 s before that.
    fn default() -> Self {
        LeaseSettings {
            duration: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(7),
        }
    }
}

impl LeaseSettings {
    /// The deadline of one lease call: half of `renew_deadline` (3.5 s by default), so
    /// that a renewal answered in time still leaves the holder time to act. A GCS slower
    /// than that is treated as unreachable.
    pub fn call_deadline(&self) -> Duration {
        self.renew_deadline / 2
    }
}

/// What a process knows of the lease.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseView {
    /// The epoch this process holds, if it holds the lease.
    pub epoch: Option<u64>,
    /// Until when the holder may act (its last confirmed renewal, as sent, plus
    /// `renew_deadline`).
    pub valid_until: Option<Instant>,
    /// Not before this (a lease taken over from a holder that lapsed waits out the old
    /// holder's last possible renewal).
    pub act_from: Option<Instant>,
    /// Who holds it, as last seen (this process or another).
    pub holder: Option<String>,
    /// Why the last round could not reach the GCS; `None` when it did.
    pub gcs_error: Option<String>,
}

impl LeaseView {
    /// Whether this process holds the lease and may act now.
    pub fn may_act(&self) -> bool {
        let now = Instant::now();
        self.epoch.is_some()
            && self.valid_until.is_some_and(|t| now < t)
            && self.act_from.is_none_or(|t| now >= t)
    }
}

#[derive(Debug, Serialize, Deserialize, Default)]
struct Value {
    holder: String,
    renewals: u64,
    #[serde(default)]
    released: bool,
}

/// This process's side of the lease.
#[derive(Debug)]
pub struct Lease {
    namespace: String,
    prefix: String,
    me: String,
    settings: LeaseSettings,
    epoch: Option<u64>,
    renewals: u64,
    last_renewed: Option<Instant>,
    /// The highest key, its value and when this process first saw that value.
    seen: Option<(String, Vec<u8>, Instant)>,
    /// The highest epoch this process ever saw (keys can vanish: a GCS restarted
    /// without persistence); a new epoch is always above it.
    max_seen: u64,
    /// The epoch this process last tried to create (a create that went through but
    /// whose answer was lost is recognized by it).
    tried: Option<u64>,
    holder: Option<String>,
    act_from: Option<Instant>,
    /// Absurd keys already reported.
    said_absurd: std::collections::BTreeSet<String>,
}

/// Where the lease of cluster `cluster` lives in the KV namespace (one key per holder
/// epoch): a key there means a `rayscale run` holds, or held, the cluster.
pub fn lease_prefix(cluster: &str) -> String {
    format!("lease/{cluster}/")
}

impl Lease {
    /// The lease of cluster `cluster` in KV namespace `namespace`, for a process known as
    /// `me` (host and pid, for humans).
    pub fn new(namespace: &str, cluster: &str, me: &str, settings: LeaseSettings) -> Self {
        Lease {
            namespace: namespace.to_string(),
            prefix: lease_prefix(cluster),
            me: me.to_string(),
            settings,
            epoch: None,
            renewals: 0,
            last_renewed: None,
            seen: None,
            max_seen: 0,
            tried: None,
            holder: None,
            act_from: None,
            said_absurd: Default::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> LeaseSettings {
        self.settings
    }

    fn key(&self, epoch: u64) -> String {
        format!("{}{epoch:020}", self.prefix)
    }

    fn value(&self, released: bool) -> Vec<u8> {
        serde_json::to_vec(&Value {
            holder: self.me.clone(),
            renewals: self.renewals,
            released,
        })
        .unwrap_or_default()
    }

    /// What this process knows now.
    pub fn view(&self) -> LeaseView {
        LeaseView {
            epoch: self.epoch,
            valid_until: self
                .epoch
                .and(self.last_renewed)
                .map(|t| t + self.settings.renew_deadline),
            holder: self.holder.clone(),
            act_from: self.epoch.and(self.act_from),
            gcs_error: None,
        }
    }

    /// The epochs of `keys`; absurd ones (above [`MAX_EPOCH`]) are left out, said once.
    fn epochs(&mut self, keys: &[String]) -> Vec<u64> {
        let mut out = Vec::new();
        for k in keys {
            let Some(e) = k
                .strip_prefix(&self.prefix)
                .and_then(|e| e.parse::<u64>().ok())
            else {
                continue;
            };
            if e > MAX_EPOCH {
                if self.said_absurd.insert(k.clone()) {
                    tracing::warn!(
                        "ignoring the lease key {k}: epoch {e} is above any real one (written \
                         by something other than rayscale?)"
                    );
                }
                continue;
            }
            out.push(e);
        }
        out
    }

    /// One round: the holder renews (or learns it lost); a follower looks and takes over
    /// a lease that lapsed or was released. An error leaves the view as it was (so a
    /// holder that cannot reach the GCS stops acting at its renew deadline, and then
    /// gives the lease up). Each call has [`LeaseSettings::call_deadline`].
    pub async fn tick<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<LeaseView, CoreError> {
        let d = self.settings.call_deadline();
        if let Some(mine) = self.epoch {
            let sent = Instant::now();
            self.renewals = self.renewals.saturating_add(1);
            // The renewal and the look for a higher epoch go out together (one latency
            // per round); a key that vanished (a GCS restarted without persistence) is
            // written again by the renewal itself.
            let key = self.key(mine);
            let value = self.value(false);
            let (keys, put) = tokio::join!(
                within(d, "lease keys", gcs.kv_keys(&self.namespace, &self.prefix)),
                within(
                    d,
                    "lease renewal",
                    gcs.kv_put(&self.namespace, &key, &value, true)
                ),
            );
            let outcome = match keys {
                Ok(keys) => {
                    let top = self.epochs(&keys).into_iter().max();
                    if let Some(t) = top.filter(|t| *t > mine) {
                        tracing::warn!(
                            "lost the autoscaler lease (epoch {mine}) to epoch {t}: no longer \
                             acting"
                        );
                        self.drop_epoch();
                        return Ok(self.view());
                    }
                    put.map(|_| ())
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => self.last_renewed = Some(sent),
                Err(e) => {
                    // No renewal for `renew_deadline`: give the lease up, and stop
                    // writing to it.
                    if self
                        .last_renewed
                        .is_none_or(|t| t.elapsed() >= self.settings.renew_deadline)
                    {
                        tracing::warn!(
                            "could not renew the autoscaler lease (epoch {mine}) for {:?}: \
                             giving it up ({e})",
                            self.settings.renew_deadline
                        );
                        self.drop_epoch();
                    }
                    return Err(e);
                }
            }
            return Ok(self.view());
        }
        let keys = within(d, "lease keys", gcs.kv_keys(&self.namespace, &self.prefix)).await?;
        let epochs = self.epochs(&keys);
        let top = epochs.iter().copied().max();
        self.max_seen = self.max_seen.max(top.unwrap_or(0));
        // A cluster that never had a lease: take the first epoch at once. Otherwise the
        // highest key (or its absence, when the keys vanished) must stay unchanged for
        // `duration` first.
        let (key, value) = match top {
            None if self.max_seen == 0 => (None, Vec::new()),
            None => (Some(String::new()), Vec::new()),
            Some(t) => {
                let key = self.key(t);
                let value = within(d, "lease read", gcs.kv_get(&self.namespace, &key))
                    .await?
                    .unwrap_or_default();
                (Some(key), value)
            }
        };
        // The answer's time: the value was current at some point before it.
        let now = Instant::now();
        let parsed: Value = serde_json::from_slice(&value).unwrap_or_default();
        if let Some(t) = top
            && self.tried == Some(t)
            && parsed.holder == self.me
            && !parsed.released
        {
            // This process created the key; the answer saying so was lost (whether the
            // one before lapsed is not known: wait as if it had).
            self.take(t, now, Some(now + self.settings.renew_deadline));
            return Ok(self.view());
        }
        // Whether the one before may still act when this process takes over.
        let mut lapsed = false;
        let take = match key {
            None => Some(self.max_seen.checked_add(1)),
            Some(key) => {
                if !parsed.holder.is_empty() {
                    self.holder = Some(parsed.holder.clone());
                }
                let since = match &self.seen {
                    Some((k, v, since)) if *k == key && *v == value => *since,
                    _ => {
                        self.seen = Some((key, value, now));
                        now
                    }
                };
                lapsed = !parsed.released;
                (parsed.released || now.duration_since(since) >= self.settings.duration)
                    .then_some(self.max_seen.checked_add(1))
            }
        };
        let epoch = match take {
            None => return Ok(self.view()),
            Some(Some(e)) if e <= MAX_EPOCH => e,
            Some(_) => {
                return Err(CoreError::gcs(
                    "lease",
                    format!(
                        "no epoch left above {} (MAX_EPOCH {MAX_EPOCH})",
                        self.max_seen
                    ),
                ));
            }
        };
        self.renewals = 0;
        self.tried = Some(epoch);
        let created = within(
            d,
            "lease create",
            gcs.kv_put(&self.namespace, &self.key(epoch), &self.value(false), false),
        )
        .await?;
        if created {
            let now = Instant::now();
            let act_from = lapsed.then(|| now + self.settings.renew_deadline);
            tracing::info!(
                "holding the autoscaler lease (epoch {epoch}){}{}",
                self.holder
                    .as_deref()
                    .map(|h| format!(", taken over from {h}"))
                    .unwrap_or_default(),
                if lapsed {
                    format!(
                        "; acting in {:?}, once any renewal of the last holder has expired",
                        self.settings.renew_deadline
                    )
                } else {
                    String::new()
                }
            );
            self.take(epoch, now, act_from);
            for old in epochs.into_iter().filter(|e| *e < epoch) {
                let key = self.key(old);
                if let Err(e) = within(d, "lease delete", gcs.kv_del(&self.namespace, &key)).await {
                    tracing::debug!("cannot delete the old lease key {key}: {e}");
                }
            }
        }
        Ok(self.view())
    }

    /// Stops holding (a higher epoch was seen, or no renewal went through in time).
    fn drop_epoch(&mut self) {
        self.epoch = None;
        self.last_renewed = None;
        self.holder = None;
        self.act_from = None;
        self.seen = None;
    }

    fn take(&mut self, epoch: u64, now: Instant, act_from: Option<Instant>) {
        self.epoch = Some(epoch);
        self.act_from = act_from;
        self.max_seen = self.max_seen.max(epoch);
        self.last_renewed = Some(now);
        self.seen = None;
        self.tried = None;
        self.holder = Some(self.me.clone());
    }

    /// Gives the lease up (a clean shutdown), so a follower takes over at once.
    pub async fn release<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<(), CoreError> {
        let Some(epoch) = self.epoch.take() else {
            return Ok(());
        };
        self.last_renewed = None;
        gcs.kv_put(&self.namespace, &self.key(epoch), &self.value(true), true)
            .await?;
        tracing::info!("released the autoscaler lease (epoch {epoch})");
        Ok(())
    }
}

/// Holds the lease until told to stop, then releases it. Rounds start every
/// `renew_every` from the start of the last one (at once after a round slower than that).
pub(super) async fn hold_lease<G: Gcs + 'static>(
    mut lease: Lease,
    gcs: Arc<G>,
    tx: watch::Sender<LeaseView>,
    mut stop: watch::Receiver<bool>,
) {
    let every = lease.settings().renew_every;
    let mut said_error = false;
    loop {
        let started = Instant::now();
        match lease.tick(gcs.as_ref()).await {
            Ok(view) => {
                said_error = false;
                tx.send_replace(view);
            }
            Err(e) => {
                if !said_error {
                    tracing::warn!("cannot reach the lease: {e}");
                    said_error = true;
                }
                tx.send_replace(LeaseView {
                    gcs_error: Some(e.to_string()),
                    ..lease.view()
                });
            }
        }
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep_until(started + every) => {}
        }
    }
    let d = lease.settings().call_deadline();
    match tokio::time::timeout(d, lease.release(gcs.as_ref())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot release the lease: {e}"),
        Err(_) => tracing::warn!("cannot release the lease: no answer within {d:?}"),
    }
    tx.send_replace(lease.view());
}
