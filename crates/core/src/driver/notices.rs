//! Preemption notices in the GCS KV (`rayscale.preemption.enabled`): the ones of the
//! nodes Ray reports draining, read every iteration that has some; and a scan every
//! [`NOTICE_SCAN`] of all the cluster's notices, for advice no node drained on (an AWS
//! rebalance recommendation under `on_rebalance: ignore`, counted and said once) and for
//! the notices of instances gone from both the table and the cloud's listing, deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::preemption::{Notice, notice_key};

use super::{Gcs, NAMESPACE};

/// How often the cluster's notices are listed.
pub(super) const NOTICE_SCAN: Duration = Duration::from_secs(30);

/// At most this many leftover notices are deleted per scan.
const MAX_DELETES: usize = 100;

/// The source a watcher names for advice it was told not to drain on.
const ADVICE: &str = "aws-rebalance";

/// The notices the watchers left for the nodes `state` reports draining; a value that
/// does not read is said once (in `said`) and is no notice; a failed read is none.
pub(super) async fn read_notices<G: Gcs + ?Sized>(
    gcs: &G,
    cluster: &str,
    state: &crate::model::ClusterResourceState,
    deadline: std::time::Duration,
    said: &mut BTreeSet<String>,
) -> Vec<crate::preemption::Notice> {
    let ids: Vec<&str> = state
        .node_states
        .iter()
        .filter(|n| n.status == Some(crate::model::NodeStatus::Draining))
        .map(|n| n.instance_id.as_str())
        .filter(|i| !i.is_empty())
        .collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let keys: Vec<String> = ids
        .iter()
        .map(|i| crate::preemption::notice_key(cluster, i))
        .collect();
    let got = match tokio::time::timeout(deadline, gcs.kv_multi_get(NAMESPACE, &keys)).await {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => {
            tracing::warn!("cannot read the preemption notices: {e}");
            return Vec::new();
        }
        Err(_) => {
            tracing::warn!("the preemption notices did not come within {deadline:?}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (key, value) in got {
        let Some(id) = key.rsplit('/').next().filter(|_| keys.contains(&key)) else {
            continue;
        };
        match crate::preemption::Notice::parse(id, &value) {
            Ok(n) => out.push(n),
            Err(e) => {
                if said.insert(key.clone()) {
                    tracing::warn!("preemption notice {key}: {e}: taken as no notice");
                }
            }
        }
    }
    out
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
    let keys = match tokio::time::timeout(deadline, gcs.kv_keys(NAMESPACE, &prefix)).await {
        Ok(Ok(keys)) => keys,
        Ok(Err(e)) => {
            tracing::warn!("cannot list the preemption notices: {e}");
            return Scan::default();
        }
        Err(_) => {
            tracing::warn!("the preemption notices' keys did not come within {deadline:?}");
            return Scan::default();
        }
    };
    // Instance ids hold no '/': a key with more is not a watcher's, and is left alone.
    let ids: Vec<(&str, &str)> = keys
        .iter()
        .filter_map(|k| Some((k.as_str(), k.strip_prefix(&prefix)?)))
        .filter(|(_, id)| !id.is_empty() && !id.contains('/'))
        .collect();
    seen.retain(|k| ids.iter().any(|(key, _)| key == k));
    let mut scan = Scan::default();
    for (key, _) in ids
        .iter()
        .filter(|(_, id)| !known.contains(id))
        .take(MAX_DELETES)
    {
        match tokio::time::timeout(deadline, gcs.kv_del(NAMESPACE, key)).await {
            Ok(Ok(())) => scan.deleted += 1,
            Ok(Err(e)) => {
                tracing::warn!("cannot delete the leftover notice {key}: {e}");
                break;
            }
            Err(_) => {
                tracing::warn!("deleting the leftover notice {key} took over {deadline:?}");
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
    let got = match tokio::time::timeout(deadline, gcs.kv_multi_get(NAMESPACE, &fresh)).await {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => {
            tracing::warn!("cannot read the preemption notices: {e}");
            return scan;
        }
        Err(_) => {
            tracing::warn!("the preemption notices did not come within {deadline:?}");
            return scan;
        }
    };
    for (key, value) in got {
        let Some(id) = key.strip_prefix(&prefix).filter(|_| fresh.contains(&key)) else {
            continue;
        };
        match Notice::parse(id, &value) {
            Ok(n) if n.source == ADVICE => scan.advisories.push(n),
            Ok(_) => {}
            Err(e) => {
                if said.insert(key.clone()) {
                    tracing::warn!("preemption notice {key}: {e}: taken as no notice");
                }
            }
        }
        seen.insert(key);
    }
    scan
}
