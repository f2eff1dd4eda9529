//! Building a [`SchedulingRequest`]: joining the cluster config, the GCS state and the
//! instance records by the spec's joining and ordering rules
//! (`docs/src/reference/scenario.md`). The reconciler and `rayscale plan` both build their
//! requests here.

use crate::CoreError;
use crate::config::ClusterConfig;
use crate::config::schema::join;
use crate::model::{ClusterResourceState, InstanceStatus, NodeStatus};

use super::{InstanceInput, RayNodeInput, SchedulingRequest};

/// The resource that marks Ray's head node.
pub const HEAD_MARKER: &str = "node:__internal_head__";

/// One entry of a scenario's `instances` list.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    /// Instance manager id.
    pub instance_id: String,
    /// Cloud instance id, if allocated.
    pub cloud_instance_id: Option<String>,
    /// Node type.
    pub node_type: String,
    /// Status.
    pub status: InstanceStatus,
    /// Launch config hash, if known.
    pub launch_config_hash: Option<String>,
}

impl InstanceRecord {
    fn borrowed(&self) -> RecordRef<'_> {
        RecordRef {
            instance_id: &self.instance_id,
            cloud_instance_id: self.cloud_instance_id.as_deref(),
            node_type: &self.node_type,
            status: self.status,
            launch_config_hash: self.launch_config_hash.as_deref(),
        }
    }
}

/// An [`InstanceRecord`] borrowed from where it is kept (the reconciler's table), so that
/// joining 10,000 records copies none of their strings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordRef<'a> {
    pub(crate) instance_id: &'a str,
    pub(crate) cloud_instance_id: Option<&'a str>,
    pub(crate) node_type: &'a str,
    pub(crate) status: InstanceStatus,
    pub(crate) launch_config_hash: Option<&'a str>,
}

fn merged_labels(a: &[(String, String)], b: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = a.to_vec();
    for (k, v) in b {
        match out.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// Joins config, GCS state and instance records into a scheduling request, following the
/// spec's joining and ordering rules. `state_path` and `instances_path` prefix errors.
pub fn build_request(
    config: &ClusterConfig,
    state: &ClusterResourceState,
    instances: &[InstanceRecord],
    state_path: &str,
    instances_path: &str,
) -> Result<SchedulingRequest, CoreError> {
    let records: Vec<RecordRef<'_>> = instances.iter().map(InstanceRecord::borrowed).collect();
    build_request_with_hexes(config, state, &records, None, state_path, instances_path)
}

/// [`build_request`], given the hex ids of `state`'s nodes when they are already made
/// (one per node, in order; anything else is ignored and the ids are made here).
pub(crate) fn build_request_with_hexes(
    config: &ClusterConfig,
    state: &ClusterResourceState,
    instances: &[RecordRef<'_>],
    hexes: Option<&[String]>,
    state_path: &str,
    instances_path: &str,
) -> Result<SchedulingRequest, CoreError> {
    let hexes = hexes.filter(|h| h.len() == state.node_states.len());
    if state.cluster_resource_constraints.len() > 1 {
        return Err(CoreError::invalid(
            join(state_path, "cluster_resource_constraints"),
            format!(
                "at most one constraint is supported, got {}",
                state.cluster_resource_constraints.len()
            ),
        ));
    }
    let known = |t: &str| config.node_type(t).is_some();
    let head_idx = state
        .node_states
        .iter()
        .position(|n| n.total_resources.get(HEAD_MARKER).is_some())
        .or_else(|| {
            config.head_node_type.as_ref().and_then(|h| {
                state
                    .node_states
                    .iter()
                    .position(|n| &n.ray_node_type_name == h)
            })
        });

    let mut joined = vec![false; instances.len()];
    // Instances by the id a node state names them with, in file order: the first one not
    // yet joined per id, each linked to the next of its id (one allocation, not a queue
    // per id).
    const NONE: usize = usize::MAX;
    let mut by_id: foldhash::HashMap<&str, usize> =
        foldhash::HashMap::with_capacity_and_hasher(instances.len(), Default::default());
    let mut next_of_id = vec![NONE; instances.len()];
    for (ii, inst) in instances.iter().enumerate().rev() {
        let id = inst.cloud_instance_id.unwrap_or(inst.instance_id);
        next_of_id[ii] = by_id.insert(id, ii).unwrap_or(NONE);
    }
    let mut out = Vec::with_capacity(state.node_states.len() + instances.len());
    for (ni, ns) in state.node_states.iter().enumerate() {
        let target = match ns.status.unwrap_or(NodeStatus::Running) {
            NodeStatus::Running | NodeStatus::Idle | NodeStatus::Unspecified => {
                InstanceStatus::RayRunning
            }
            NodeStatus::Draining => InstanceStatus::RayStopping,
            NodeStatus::Dead => InstanceStatus::RayStopped,
        };
        let found = by_id
            .get_mut(ns.instance_id.as_str())
            .filter(|first| **first != NONE)
            .map(|first| {
                let ii = *first;
                *first = next_of_id[ii];
                ii
            });
        let hex = hexes
            .and_then(|h| h.get(ni))
            .map_or_else(|| ns.node_id_hex(), String::clone);
        let (instance_id, node_type, status, hash) = match found {
            Some(ii) => {
                joined[ii] = true;
                let inst = &instances[ii];
                let status = inst.status.advanced_to(target);
                if status.can_reach_ray_running() && !known(inst.node_type) {
                    return Err(CoreError::invalid(
                        format!("{instances_path}[{ii}].node_type"),
                        format!("unknown node type {:?}", inst.node_type),
                    ));
                }
                (
                    inst.instance_id.to_string(),
                    inst.node_type.to_string(),
                    status,
                    inst.launch_config_hash.unwrap_or_default().to_string(),
                )
            }
            None => {
                let t = &ns.ray_node_type_name;
                if target == InstanceStatus::RayRunning && !known(t) {
                    return Err(CoreError::invalid(
                        join(
                            &format!("{state_path}.node_states[{ni}]"),
                            "ray_node_type_name",
                        ),
                        format!("unknown node type {t:?}"),
                    ));
                }
                let id = if ns.instance_id.is_empty() {
                    hex.clone()
                } else {
                    ns.instance_id.clone()
                };
                let hash = config
                    .node_type(t)
                    .map(|c| c.launch_config_hash.clone())
                    .unwrap_or_default();
                (id, t.clone(), target, hash)
            }
        };
        out.push(InstanceInput {
            instance_id,
            node_type,
            status,
            is_head: head_idx == Some(ni),
            launch_config_hash: hash,
            ray_node: Some(RayNodeInput {
                node_id_hex: hex,
                total: ns.total_resources.clone(),
                available: ns.available_resources.clone(),
                labels: merged_labels(&ns.labels, &ns.dynamic_labels),
                idle_duration_ms: ns.idle_duration_ms,
            }),
        });
    }
    for (ii, inst) in instances.iter().enumerate() {
        if joined[ii] {
            continue;
        }
        if inst.status.can_reach_ray_running() && !known(inst.node_type) {
            return Err(CoreError::invalid(
                format!("{instances_path}[{ii}].node_type"),
                format!("unknown node type {:?}", inst.node_type),
            ));
        }
        out.push(InstanceInput {
            instance_id: inst.instance_id.to_string(),
            node_type: inst.node_type.to_string(),
            status: inst.status,
            is_head: false,
            launch_config_hash: inst.launch_config_hash.unwrap_or_default().to_string(),
            ray_node: None,
        });
    }
    Ok(SchedulingRequest {
        node_types: config.node_types.clone(),
        head_node_type: config.head_node_type.clone(),
        max_num_nodes: config.max_workers.map(|m| m + 1),
        idle_timeout_s: Some(config.idle_timeout_s()),
        disable_launch_config_check: config.disable_launch_config_check,
        resource_requests: state.pending_resource_requests.clone(),
        gang_requests: state.pending_gang_resource_requests.clone(),
        cluster_constraints: state.cluster_resource_constraints.clone(),
        instances: out,
        ..Default::default()
    })
}

/// The availability inputs of a request (see `docs/src/reference/scenario.md`): what the cloud's
/// capacity history says of each node type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AvailabilityInputs {
    /// Ray's `cloud_resource_availabilities`.
    pub cloud_resource_availabilities: Vec<(String, f64)>,
    /// Ray's `recoverable_resource_availabilities`.
    pub recoverable_resource_availabilities: Vec<(String, f64)>,
    /// rayscale's `unavailable_node_types`.
    pub unavailable_node_types: Vec<String>,
}

impl AvailabilityInputs {
    /// Puts the inputs into `req`.
    pub fn apply(self, req: &mut SchedulingRequest) {
        req.cloud_resource_availabilities = self.cloud_resource_availabilities;
        req.recoverable_resource_availabilities = self.recoverable_resource_availabilities;
        req.unavailable_node_types = self.unavailable_node_types;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeState, ResourceMap};

    #[test]
    fn hex_ids_given_are_the_ones_made_and_others_are_not_taken() {
        let config =
            ClusterConfig::from_yaml_str(crate::reconciler::tests::CONFIG, "c.yaml").expect("ok");
        let node = |id: u8, instance: &str| NodeState {
            node_id: vec![id; 28],
            instance_id: instance.into(),
            ray_node_type_name: "w".into(),
            total_resources: ResourceMap::from_f64_pairs([("CPU", 2.0)]),
            available_resources: ResourceMap::from_f64_pairs([("CPU", 2.0)]),
            ..Default::default()
        };
        let state = ClusterResourceState {
            node_states: vec![node(1, "a"), node(2, "")],
            ..Default::default()
        };
        let records = [InstanceRecord {
            instance_id: "i1".into(),
            cloud_instance_id: Some("a".into()),
            node_type: "w".into(),
            status: InstanceStatus::RayRunning,
            launch_config_hash: None,
        }];
        let build = |h: Option<&[String]>| {
            let records: Vec<RecordRef<'_>> =
                records.iter().map(InstanceRecord::borrowed).collect();
            build_request_with_hexes(&config, &state, &records, h, "s", "r").expect("builds")
        };
        let made = build(None);
        let hexes: Vec<String> = state.node_states.iter().map(|n| n.node_id_hex()).collect();
        assert_eq!(build(Some(&hexes)), made);
        let ids = |r: &SchedulingRequest| -> Vec<String> {
            r.instances
                .iter()
                .filter_map(|i| i.ray_node.as_ref().map(|n| n.node_id_hex.clone()))
                .collect()
        };
        assert_eq!(ids(&made), hexes);
        // A node with no instance id is named by its hex id.
        assert_eq!(made.instances[1].instance_id, hexes[1]);
        // Given ids are used as given; a list that is not one per node is not.
        let given = vec!["x".to_string(), "y".to_string()];
        assert_eq!(ids(&build(Some(&given))), given);
        assert_eq!(build(Some(&given[..1])), made);
    }

    #[test]
    fn nodes_naming_one_cloud_instance_join_its_records_in_file_order() {
        let config =
            ClusterConfig::from_yaml_str(crate::reconciler::tests::CONFIG, "c.yaml").expect("ok");
        let node = |id: u8| NodeState {
            node_id: vec![id; 4],
            instance_id: "a".into(),
            ray_node_type_name: "w".into(),
            ..Default::default()
        };
        let state = ClusterResourceState {
            node_states: vec![node(1), node(2), node(3)],
            ..Default::default()
        };
        let record = |id: &str, cloud: &str| InstanceRecord {
            instance_id: id.into(),
            cloud_instance_id: Some(cloud.into()),
            node_type: "w".into(),
            status: InstanceStatus::RayRunning,
            launch_config_hash: None,
        };
        let records = [record("i1", "a"), record("i2", "b"), record("i3", "a")];
        let r = build_request(&config, &state, &records, "s", "r").expect("builds");
        let joined: Vec<(&str, bool)> = r
            .instances
            .iter()
            .map(|i| (i.instance_id.as_str(), i.ray_node.is_some()))
            .collect();
        // The third node names "a" too, with no record left: it stands for itself.
        assert_eq!(
            joined,
            [("i1", true), ("i3", true), ("a", true), ("i2", false)]
        );
    }
}
