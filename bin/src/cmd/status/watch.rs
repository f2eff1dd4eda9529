//! `rayscale status --watch`: the status view refreshed in place on a terminal (nodes by
//! type and state, pending launches, demand, infeasible, unavailable types, and the
//! instance table's recent transitions), or, when stdout is not a terminal, one plain
//! line per change and one per new transition. A GCS that stops answering is said and
//! watched on; Ctrl-C ends it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Result;
use rayscale_core::driver::KvTable;
use rayscale_core::driver::lease::MAX_EPOCH;
use rayscale_gcs_client::client::GcsClient;
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;

/// One transition of an instance, from the table's status history.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Transition {
    /// When (ns since the epoch).
    pub at_ns: i64,
    /// The instance.
    pub instance_id: String,
    /// Its node type.
    pub node_type: String,
    /// The status entered (Ray's name).
    pub status: String,
    /// Why.
    pub details: String,
}

impl Transition {
    fn line(&self) -> String {
        let details = if self.details.is_empty() {
            String::new()
        } else {
            format!(": {}", self.details)
        };
        format!(
            "{} {} ({}) {}{details}",
            clock(self.at_ns),
            self.instance_id,
            self.node_type,
            self.status
        )
    }
}

/// `HH:MM:SS` (UTC) of a time in ns since the epoch.
fn clock(ns: i64) -> String {
    let s = ns.div_euclid(1_000_000_000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The clusters whose instance tables the GCS holds.
async fn clusters(gcs: &GcsClient) -> Result<Vec<String>> {
    Ok(KvTable::clusters(gcs).await?)
}

/// Every transition of the clusters' tables (`cluster`, or all the GCS holds), oldest
/// first.
pub async fn transitions(gcs: &GcsClient, cluster: Option<&str>) -> Result<Vec<Transition>> {
    let names = match cluster {
        Some(c) => vec![c.to_string()],
        None => clusters(gcs).await?,
    };
    let mut out = Vec::new();
    for name in names {
        // The newest table, whoever wrote it (read only: nothing is saved).
        let loaded = KvTable::new(&name).load(gcs, MAX_EPOCH).await?;
        for i in &loaded.instances {
            for c in &i.status_history {
                out.push(Transition {
                    at_ns: c.timestamp_ns,
                    instance_id: i.instance_id.clone(),
                    node_type: i.node_type.clone(),
                    status: c.status.name().to_string(),
                    details: c.details.clone(),
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

/// One line about the cluster: nodes by type (idle ones said), launches on the way,
/// demand, infeasible demand and unavailable types.
pub fn summary(reply: &pb::GetClusterStatusReply) -> String {
    let state = reply.cluster_resource_state.clone().unwrap_or_default();
    let auto = reply.autoscaling_state.clone().unwrap_or_default();
    let mut nodes: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for n in &state.node_states {
        let status = pb::NodeStatus::try_from(n.status).unwrap_or(pb::NodeStatus::Unspecified);
        if status == pb::NodeStatus::Dead {
            continue;
        }
        let t = if n.ray_node_type_name.is_empty() {
            "?".to_string()
        } else {
            n.ray_node_type_name.clone()
        };
        let e = nodes.entry(t).or_default();
        e.0 += 1;
        if status == pb::NodeStatus::Idle {
            e.1 += 1;
        }
        if status == pb::NodeStatus::Draining {
            e.2 += 1;
        }
    }
    let nodes: Vec<String> = nodes
        .iter()
        .map(|(t, (n, idle, draining))| {
            let mut said = Vec::new();
            if *idle > 0 {
                said.push(format!("{idle} idle"));
            }
            if *draining > 0 {
                said.push(format!("{draining} draining"));
            }
            if said.is_empty() {
                format!("{t} {n}")
            } else {
                format!("{t} {n} ({})", said.join(", "))
            }
        })
        .collect();
    let mut launching: BTreeMap<String, u64> = BTreeMap::new();
    for p in &auto.pending_instance_requests {
        *launching.entry(p.ray_node_type_name.clone()).or_default() +=
            u64::from(p.count.max(0) as u32);
    }
    for p in &auto.pending_instances {
        *launching.entry(p.ray_node_type_name.clone()).or_default() += 1;
    }
    let launching: Vec<String> = launching.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let demand: u64 = state
        .pending_resource_requests
        .iter()
        .map(|d| u64::try_from(d.count).unwrap_or(0))
        .sum::<u64>()
        + state.pending_gang_resource_requests.len() as u64;
    let infeasible = auto.infeasible_resource_requests.len()
        + auto.infeasible_gang_resource_requests.len()
        + auto.infeasible_cluster_resource_constraints.len();
    // A whole type, or one zone of it (a preemption or a capacity error there).
    let unavailable: Vec<String> = auto
        .failed_instance_requests
        .iter()
        .filter(|f| f.count == 0)
        .map(|f| {
            match f
                .reason
                .strip_prefix("zone ")
                .and_then(|r| r.split_once(" avoided"))
            {
                Some((zone, _)) => format!("{} in {zone}", f.ray_node_type_name),
                None => f.ray_node_type_name.clone(),
            }
        })
        .collect();
    let or_none = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "nodes: {} | launching: {} | demand: {demand} | infeasible: {infeasible} | unavailable: {}",
        or_none(nodes),
        or_none(launching),
        or_none(unavailable),
    )
}

/// The arguments of the watch.
pub struct Watch<'a> {
    /// The GCS.
    pub gcs: &'a GcsClient,
    /// The cluster whose table to read (default: every table the GCS holds).
    pub cluster: Option<&'a str>,
    /// Between refreshes.
    pub every: Duration,
    /// Stop after this many refreshes (for scripts), if given.
    pub count: Option<u64>,
}

/// How many transitions the terminal view lists.
const RECENT: usize = 10;

/// Watches until Ctrl-C (or `count` refreshes; then an unreachable GCS at the last one is
/// an error, for scripts).
pub async fn watch(w: Watch<'_>) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let mut last_line = String::new();
    // The transitions printed (plain lines): a table read in the middle of a save shows
    // part of an iteration's, the rest comes with the next read.
    let mut seen: Option<BTreeSet<Transition>> = None;
    let mut n = 0u64;
    // Ctrl-C at any point, a slow GCS call included.
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let now = crate::driver::now_ns();
        let (status, table) = tokio::select! {
            _ = &mut stop => return Ok(()),
            r = async { tokio::join!(w.gcs.get_cluster_status(), transitions(w.gcs, w.cluster)) } => r,
        };
        let mut out = String::new();
        match (&status, tty) {
            (Ok(reply), true) => {
                out.push_str("\x1b[H\x1b[2J");
                out.push_str(&format!(
                    "rayscale status --watch ({}, every {:.0?}; Ctrl-C to stop)\n",
                    clock(now),
                    w.every
                ));
                out.push_str(&summary(reply));
                out.push('\n');
                out.push_str(&super::render(reply));
                out.push_str("Recent transitions:\n");
                match &table {
                    Ok(t) if t.is_empty() => out.push_str("  (none)\n"),
                    Ok(t) => {
                        for x in &t[t.len().saturating_sub(RECENT)..] {
                            out.push_str(&format!("  {}\n", x.line()));
                        }
                    }
                    Err(e) => out.push_str(&format!("  cannot read the instance table: {e}\n")),
                }
            }
            (Ok(reply), false) => {
                // New transitions, each once (the first refresh shows only the newest).
                if let Ok(t) = &table {
                    let fresh: Vec<&Transition> = match &seen {
                        Some(s) => t.iter().filter(|x| !s.contains(*x)).collect(),
                        None => t[t.len().saturating_sub(RECENT)..].iter().collect(),
                    };
                    for x in fresh {
                        out.push_str(&format!("{}\n", x.line()));
                    }
                    // What the table holds now (pruned records leave it, and the set).
                    seen = Some(t.iter().cloned().collect());
                }
                let line = summary(reply);
                if line != last_line {
                    out.push_str(&format!("{} {line}\n", clock(now)));
                    last_line = line;
                }
            }
            (Err(e), _) => {
                let line = format!("GCS unreachable: {e}");
                if line != last_line {
                    out.push_str(&format!("{} {line}\n", clock(now)));
                    last_line = line;
                }
            }
        }
        {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) ends the watch.
            if stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return Ok(());
            }
        }
        n += 1;
        if w.count.is_some_and(|c| n >= c) {
            return match status {
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(w.every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(t: &str, status: pb::NodeStatus) -> pb::NodeState {
        pb::NodeState {
            ray_node_type_name: t.into(),
            status: status as i32,
            ..Default::default()
        }
    }

    #[test]
    fn the_summary_counts_nodes_not_lines() {
        let reply = pb::GetClusterStatusReply {
            cluster_resource_state: Some(pb::ClusterResourceState {
                node_states: vec![
                    node("head", pb::NodeStatus::Running),
                    node("worker", pb::NodeStatus::Running),
                    node("worker", pb::NodeStatus::Running),
                    node("worker", pb::NodeStatus::Idle),
                    node("worker", pb::NodeStatus::Idle),
                    node("worker", pb::NodeStatus::Dead),
                    node("spot", pb::NodeStatus::Draining),
                ],
                pending_resource_requests: vec![pb::ResourceRequestByCount {
                    request: None,
                    count: 3,
                }],
                ..Default::default()
            }),
            autoscaling_state: Some(pb::AutoscalingState {
                pending_instance_requests: vec![pb::PendingInstanceRequest {
                    ray_node_type_name: "gpu".into(),
                    count: 2,
                    ..Default::default()
                }],
                failed_instance_requests: vec![
                    pb::FailedInstanceRequest {
                        ray_node_type_name: "big".into(),
                        count: 0,
                        ..Default::default()
                    },
                    pb::FailedInstanceRequest {
                        ray_node_type_name: "spot".into(),
                        count: 0,
                        reason: "zone us-west-2a avoided for 170s more: preempted (AWS spot \
                                 interruption, deadline 12:03:10 UTC)"
                            .into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
        };
        assert_eq!(
            summary(&reply),
            "nodes: head 1, spot 1 (1 draining), worker 4 (2 idle) | launching: gpu 2 | demand: 3 \
             | infeasible: 0 | unavailable: big, spot in us-west-2a"
        );
    }

    #[test]
    fn clock_is_utc_time_of_day() {
        assert_eq!(clock(1_796_142_511_000_000_000), "16:28:31");
        assert_eq!(clock(0), "00:00:00");
    }
}
