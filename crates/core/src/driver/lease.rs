//! One active autoscaler per cluster: a lease in the GCS KV.
//!
//! The GCS KV has no compare-and-swap, but its put-if-absent is atomic. So the lease is
//! a series of keys `lease/<cluster>/<epoch>` (epoch zero-padded): a process becomes the
//! holder by *creating* the key of the next epoch, which only one process can do, and
//! the highest epoch is the holder. The holder renews by rewriting its key (a counter)
//! every `renew_every`. A follower watches the highest key; when its value has not
//! changed for `duration` (on the follower's own clock, so no clocks are compared), or the
//! holder released it, the follower creates the next epoch. A holder that sees a higher
//! epoch, or could not renew for `renew_deadline` (shorter than `duration`), stops acting
//! before its next effect (client-go's leader election has the same three durations).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::gcs::Gcs;
use crate::error::CoreError;

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

/// What a process knows of the lease.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseView {
    /// The epoch this process holds, if it holds the lease.
    pub epoch: Option<u64>,
    /// Until when the holder may act (its last renewal plus `renew_deadline`).
    pub valid_until: Option<Instant>,
    /// Who holds it, as last seen (this process or another).
    pub holder: Option<String>,
    /// Why the last round could not reach the GCS; `None` when it did.
    pub gcs_error: Option<String>,
}

impl LeaseView {
    /// Whether this process holds the lease and may act now.
    pub fn may_act(&self) -> bool {
        self.epoch.is_some() && self.valid_until.is_some_and(|t| Instant::now() < t)
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
}

impl Lease {
    /// The lease of cluster `cluster` in KV namespace `namespace`, for a process known as
    /// `me` (host and pid, for humans).
    pub fn new(namespace: &str, cluster: &str, me: &str, settings: LeaseSettings) -> Self {
        Lease {
            namespace: namespace.to_string(),
            prefix: format!("lease/{cluster}/"),
            me: me.to_string(),
            settings,
            epoch: None,
            renewals: 0,
            last_renewed: None,
            seen: None,
            max_seen: 0,
            tried: None,
            holder: None,
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
            gcs_error: None,
        }
    }

    /// One round: the holder renews (or learns it lost); a follower looks and takes over
    /// a lease that lapsed or was released. An error leaves the view as it was (so a
    /// holder that cannot reach the GCS stops acting at its renew deadline).
    pub async fn tick<G: Gcs + ?Sized>(&mut self, gcs: &G) -> Result<LeaseView, CoreError> {
        let now = Instant::now();
        let keys = gcs.kv_keys(&self.namespace, &self.prefix).await?;
        let epochs: Vec<u64> = keys
            .iter()
            .filter_map(|k| k.strip_prefix(&self.prefix)?.parse().ok())
            .collect();
        let top = epochs.iter().copied().max();
        if let Some(mine) = self.epoch {
            if let Some(t) = top.filter(|t| *t > mine) {
                tracing::warn!(
                    "lost the autoscaler lease (epoch {mine}) to epoch {t}: no longer acting"
                );
                self.epoch = None;
                self.last_renewed = None;
                self.holder = None;
                return Ok(self.view());
            }
            self.renewals += 1;
            // A key that vanished (a GCS restarted without persistence) is created again
            // only if no one else did meanwhile.
            let added = gcs
                .kv_put(
                    &self.namespace,
                    &self.key(mine),
                    &self.value(false),
                    top.is_some(),
                )
                .await?;
            if top.is_some() || added {
                self.last_renewed = Some(now);
            }
            return Ok(self.view());
        }
        self.max_seen = self.max_seen.max(top.unwrap_or(0));
        // A cluster that never had a lease: take the first epoch at once. Otherwise the
        // highest key (or its absence, when the keys vanished) must stay unchanged for
        // `duration` first.
        let (key, value) = match top {
            None if self.max_seen == 0 => (None, Vec::new()),
            None => (Some(String::new()), Vec::new()),
            Some(t) => {
                let key = self.key(t);
                let value = gcs.kv_get(&self.namespace, &key).await?.unwrap_or_default();
                (Some(key), value)
            }
        };
        let parsed: Value = serde_json::from_slice(&value).unwrap_or_default();
        if let Some(t) = top
            && self.tried == Some(t)
            && parsed.holder == self.me
            && !parsed.released
        {
            // This process created the key; the answer saying so was lost.
            self.take(t, now);
            return Ok(self.view());
        }
        let take = match key {
            None => Some(self.max_seen + 1),
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
                (parsed.released || now.duration_since(since) >= self.settings.duration)
                    .then_some(self.max_seen + 1)
            }
        };
        let Some(epoch) = take else {
            return Ok(self.view());
        };
        self.renewals = 0;
        self.tried = Some(epoch);
        if gcs
            .kv_put(&self.namespace, &self.key(epoch), &self.value(false), false)
            .await?
        {
            tracing::info!(
                "holding the autoscaler lease (epoch {epoch}){}",
                self.holder
                    .as_deref()
                    .map(|h| format!(", taken over from {h}"))
                    .unwrap_or_default()
            );
            self.take(epoch, now);
            for old in epochs.into_iter().filter(|e| *e < epoch) {
                let key = self.key(old);
                if let Err(e) = gcs.kv_del(&self.namespace, &key).await {
                    tracing::debug!("cannot delete the old lease key {key}: {e}");
                }
            }
        }
        Ok(self.view())
    }

    fn take(&mut self, epoch: u64, now: Instant) {
        self.epoch = Some(epoch);
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

/// Holds the lease until told to stop, then releases it.
pub(super) async fn hold_lease<G: Gcs + 'static>(
    mut lease: Lease,
    gcs: Arc<G>,
    tx: watch::Sender<LeaseView>,
    mut stop: watch::Receiver<bool>,
) {
    let every = lease.settings().renew_every;
    // A slow GCS (the client's own retries) must not hold a round past the next one.
    let bound = every * 2;
    let mut said_error = false;
    loop {
        let round = tokio::time::timeout(bound, lease.tick(gcs.as_ref()))
            .await
            .unwrap_or_else(|_| {
                Err(CoreError::gcs(
                    "lease",
                    format!("no answer within {bound:?}"),
                ))
            });
        match round {
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
            _ = tokio::time::sleep(every) => {}
        }
    }
    match tokio::time::timeout(bound, lease.release(gcs.as_ref())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot release the lease: {e}"),
        Err(_) => tracing::warn!("cannot release the lease: no answer within {bound:?}"),
    }
    tx.send_replace(lease.view());
}
