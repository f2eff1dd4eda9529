//! What a process that takes the lease re-sends from the stored table.

use std::collections::BTreeMap;

use crate::instance::{InMemoryStorage, InstanceStorage};
use crate::model::InstanceStatus;
use crate::provider::LaunchRequest;
use crate::reconciler::{Effect, IdSource};

/// What a process that takes the lease replays from the stored table: the launch requests
/// of REQUESTED records (re-sent as they were: same request id, type and size; the
/// provider makes nothing twice), the stops of RAY_STOP_REQUESTED records, and the
/// terminations of TERMINATING records and of TERMINATION_FAILED ones given up, and the
/// installs of RAY_INSTALLING ones.
pub(super) fn replays(storage: &InMemoryStorage, ids: &mut dyn IdSource) -> Vec<Effect> {
    let (_, instances) = storage.load().unwrap_or_default();
    // Per request: its size, launch hash, and whether it was a gang's (all or nothing).
    let mut by_request: BTreeMap<(String, String), (u64, String, bool)> = BTreeMap::new();
    let mut out = Vec::new();
    let mut terminate = Vec::new();
    let mut given_up = Vec::new();
    for i in &instances {
        match i.status {
            InstanceStatus::Requested => {
                let e = by_request
                    .entry((i.launch_request_id.clone(), i.node_type.clone()))
                    .or_insert((0, i.launch_config_hash.clone(), false));
                // A gang's launch is sent all-or-nothing again, as it was first.
                e.2 |= i.gang.is_some();
                // A record of an older table has no size: send what is requested.
                e.0 = if i.launch_request_size > 0 {
                    i.launch_request_size
                } else {
                    e.0 + 1
                };
            }
            InstanceStatus::RayStopRequested => {
                // Replayed as Ray's rejectable idle drain, whatever stopped it first: a
                // forced stop (max_workers, outdated, consolidation) decided by the
                // process before may no longer hold (a raised max, a node that got work).
                // Ray refuses a busy node, the record goes back to RAY_RUNNING, and the
                // scheduler decides again with what holds now.
                if let Some(node) = &i.node_id {
                    tracing::info!("replaying the stop of ray on {}", i.instance_id);
                    out.push(Effect::Drain {
                        instance_id: i.instance_id.clone(),
                        node_id_hex: node.clone(),
                        // The next reconcile's drain reaches a multi-host instance's
                        // other hosts: its node is gone, the instance is stopped whole.
                        siblings: Vec::new(),
                        reason: "replayed after a restart".into(),
                        idle: true,
                        deadline_ns: None,
                    });
                }
            }
            InstanceStatus::Terminating => terminate.extend(i.cloud_instance_id.clone()),
            // A termination given up (the cloud refused it for good, or so it seemed) is
            // tried again at every start: whatever refused it may have changed, and the
            // instance runs and bills meanwhile. It is listed, so the operator sees it.
            InstanceStatus::TerminationFailed if crate::reconciler::termination_given_up(i) => {
                if let Some(cid) = &i.cloud_instance_id {
                    given_up.push(format!(
                        "{cid} ({}: {})",
                        i.instance_id,
                        i.last_error.as_deref().unwrap_or("no error recorded")
                    ));
                    terminate.push(cid.clone());
                }
            }
            // An install cut short by the restart starts again (the provider keeps none
            // across processes).
            InstanceStatus::RayInstalling => {
                if let Some(cid) = &i.cloud_instance_id {
                    tracing::info!("replaying the install of ray on {cid}");
                    out.push(Effect::InstallRay {
                        instance_id: i.instance_id.clone(),
                        cloud_instance_id: cid.clone(),
                        node_type: i.node_type.clone(),
                    });
                }
            }
            _ => {}
        }
    }
    for ((request_id, node_type), (count, launch_config_hash, all_or_nothing)) in by_request {
        tracing::info!("replaying launch request {request_id} ({count} x {node_type})");
        out.push(Effect::Launch(LaunchRequest {
            request_id,
            node_type,
            count,
            launch_config_hash,
            avoid_zones: Vec::new(),
            all_or_nothing,
        }));
    }
    if let Some(line) = crate::reconciler::summarize(
        "instances whose termination was given up, still running (tried again now; \
         terminate them by hand if this fails again)",
        &given_up,
    ) {
        tracing::warn!("{line}");
    }
    if !terminate.is_empty() {
        tracing::info!("replaying the termination of {}", terminate.join(", "));
        out.push(Effect::Terminate {
            cloud_instance_ids: terminate,
            request_id: ids.request_id(),
        });
    }
    out
}
