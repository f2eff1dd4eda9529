//! Preemption notices in the GCS KV (`rayscale.preemption.enabled`): the ones of the
//! nodes Ray reports draining, read every iteration that has some; and a scan every
//! [`NOTICE_SCAN`] of all the cluster's notices, for advice no node drained on (an AWS
//! rebalance recommendation under `on_rebalance: ignore`, counted and said once) and for
//! the notices of instances gone from both the table and the cloud's listing, deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::preemption::{Notice, notice_key};

use super::{Gcs, NAMESPACE, lease};

/// How often the cluster's notices are listed.
pub(super) const NOTICE_SCAN: Duration = Duration::from_secs(30);

/// At most this many leftover notices are deleted per scan.
const MAX_DELETES: usize = 100;

/// The source a watcher names for advice it was told not to drain on.
const ADVICE: &str = "aws-rebalance";

/// The notices under `keys` (each `notice_key(cluster, id)`), read in one call; a value
/// that does not read is said once (in `said`) and is no notice; `None` when the call
/// failed (said).
async fn read<G: Gcs + ?Sized>(
    gcs: &G,
    keys: &[String],
    deadline: Duration,
    said: &mut BTreeSet<String>,
) -> Option<Vec<Notice>> {
    let got = lease::within(
        deadline,
        "InternalKVMultiGet",
        gcs.kv_multi_get(NAMESPACE, keys),
    )
    .await
    .map_err(|e| tracing::warn!("cannot read the preemption notices: {e}"))
    .ok()?;
    let asked: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for (key, value) in got {
        let Some(id) = key
            .rsplit('/')
            .next()
            .filter(|_| asked.contains(key.as_str()))
        else {
            continue;
        };
        match Notice::parse(id, &value) {
            Ok(n) => out.push(n),
            Err(e) => {
                if said.insert(key.clone()) {
                    tracing::warn!("preemption notice {key}: {e}: taken as no notice");
                }
            }
        }
    }
    Some(out)
}

/// The notices the watchers left for the nodes `state` reports draining; a failed read
/// is none.
pub(super) async fn read_notices<G: Gcs + ?Sized>(
    gcs: &G,
    cluster: &str,
    state: &crate::model::ClusterResourceState,
    deadline: Duration,
    said: &mut BTreeSet<String>,
) -> Vec<Notice> {
    let keys: Vec<String> = state
        .node_states
        .iter()
        .filter(|n| n.status == Some(crate::model::NodeStatus::Draining))
        .map(|n| n.instance_id.as_str())
        .filter(|i| !i.is_empty())
        .map(|i| notice_key(cluster, i))
        .collect();
    if keys.is_empty() {
        return Vec::new();
    }
    read(gcs, &keys, deadline, said).await.unwrap_or_default()
}

/// What a scan of the cluster's notices found and did.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Advice not seen by an earlier scan (rebalance recommendations, when they are
    /// ignored), each once.
    pub advisories: Vec<Notice>,
    /// Leftover notices deleted.
    pub deleted: usize,
}

/// Lists the notices of `cluster`; deletes those of instances not in `known` (the table's
/// and the cloud's listing's ids, both read whole this iteration); and, when
/// `ignore_rebalance`, reads the ones not in `seen` and returns the advice among them.
/// `seen` keeps the keys read (forgotten once gone from the KV); a value that does not
/// read is said once (in `said`). A failed call changes nothing.
pub(super) async fn scan_notices<G: Gcs + ?Sized>(
    gcs: &G,
    cluster: &str,
    known: &BTreeSet<&str>,
    ignore_rebalance: bool,
    seen: &mut BTreeSet<String>,
    deadline: Duration,
    said: &mut BTreeSet<String>,
) -> Scan {
    let prefix = notice_key(cluster, "");
    let keys =
        match lease::within(deadline, "InternalKVKeys", gcs.kv_keys(NAMESPACE, &prefix)).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!("cannot list the preemption notices: {e}");
                return Scan::default();
            }
        };
    // Instance ids hold no '/': a key with more is not a watcher's, and is left alone.
    let ids: Vec<(&str, &str)> = keys
        .iter()
        .filter_map(|k| Some((k.as_str(), k.strip_prefix(&prefix)?)))
        .filter(|(_, id)| !id.is_empty() && !id.contains('/'))
        .collect();
    let listed: BTreeSet<&str> = ids.iter().map(|(key, _)| *key).collect();
    seen.retain(|k| listed.contains(k.as_str()));
    let mut scan = Scan::default();
    for (key, _) in ids
        .iter()
        .filter(|(_, id)| !known.contains(id))
        .take(MAX_DELETES)
    {
        match lease::within(deadline, "InternalKVDel", gcs.kv_del(NAMESPACE, key)).await {
            Ok(()) => scan.deleted += 1,
            Err(e) => {
                tracing::warn!("cannot delete the leftover notice {key}: {e}");
                break;
            }
        }
    }
    if scan.deleted > 0 {
        tracing::debug!(
            "deleted {} preemption notices of instances that are gone",
            scan.deleted
        );
    }
    if !ignore_rebalance {
        return scan;
    }
    let fresh: Vec<String> = ids
        .iter()
        .filter(|(key, id)| known.contains(id) && !seen.contains(*key))
        .map(|(key, _)| key.to_string())
        .collect();
    if fresh.is_empty() {
        return scan;
    }
    let Some(read) = read(gcs, &fresh, deadline, said).await else {
        return scan;
    };
    // Every key asked is read now (a value that did not read included): once each.
    seen.extend(fresh);
    scan.advisories = read.into_iter().filter(|n| n.source == ADVICE).collect();
    scan
}
