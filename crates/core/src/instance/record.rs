//! The instance record kept in the instance table.

use serde::{Deserialize, Serialize};

use crate::model::instance::InstanceStatus;

use super::transitions::is_terminal;
use crate::model::TerminationCause;

/// One entry of an instance's status history: the instance entered `status` at
/// `timestamp_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    /// The status entered (serialized as Ray's name, e.g. `"RAY_RUNNING"`).
    #[serde(with = "status_serde")]
    pub status: InstanceStatus,
    /// When, in nanoseconds since the Unix epoch, as given by the caller's clock.
    pub timestamp_ns: i64,
    /// Why, for humans (e.g. `"queued by scheduler"`).
    #[serde(default)]
    pub details: String,
}

/// An instance as stored by the instance manager (Ray's `Instance` message, trimmed to
/// what rayscale uses).
///
/// Records are created and changed only through
/// [`InstanceManager::update`](super::InstanceManager::update); the fields are public so
/// that storage backends and tests can build and inspect them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// The instance manager's id for the instance (unique in the table, never reused).
    pub instance_id: String,
    /// The node type (Ray's `instance_type`), a key of `available_node_types`.
    #[serde(default)]
    pub node_type: String,
    /// The current status (serialized as Ray's name).
    #[serde(with = "status_serde")]
    pub status: InstanceStatus,
    /// Counts the events applied to this record: 1 when created, +1 per applied update.
    /// An update must name the version it was computed from.
    pub version: u64,
    /// The launch request the instance was (last) requested in; empty if none.
    #[serde(default)]
    pub launch_request_id: String,
    /// How many instances that launch request asked for (0 when unknown), so a requeue or
    /// a replay re-sends the request as it was.
    #[serde(default)]
    pub launch_request_size: u64,
    /// The cloud provider's id of the instance, once allocated.
    #[serde(default)]
    pub cloud_instance_id: Option<String>,
    /// The Ray node id (hex) once Ray runs on the instance.
    #[serde(default)]
    pub node_id: Option<String>,
    /// Hash of the launch config the instance was launched with; empty if unknown.
    #[serde(default)]
    pub launch_config_hash: String,
    /// Whether the instance is the Ray head node.
    #[serde(default)]
    pub is_head: bool,
    /// Every status the instance entered, oldest first, the creation included.
    #[serde(default)]
    pub status_history: Vec<StatusChange>,
    /// How many times the launch was retried (bumped by events that ask for it, typically
    /// when a REQUESTED instance is queued again). Ray derives the same count from the
    /// number of REQUESTED entries in the history, see [`Instance::times_entered`].
    #[serde(default)]
    pub launch_retries: u32,
    /// How many times termination was retried (bumped by events that ask for it).
    #[serde(default)]
    pub termination_retries: u32,
    /// The last error reported for the instance (launch or termination failure).
    #[serde(default)]
    pub last_error: Option<String>,
    /// Why Ray is being stopped on it (Ray's `TerminationRequest.Cause` name, e.g. `IDLE`
    /// or `MAX_NUM_NODE_PER_TYPE`), set with RAY_STOP_REQUESTED, so that a restarted
    /// autoscaler replays the same stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_cause: Option<String>,
    /// When its drain must be over (ns since the epoch): a drain that Ray does not refuse
    /// (`DRAIN_NODE_REASON_PREEMPTION` with this deadline), for consolidation. Its work
    /// runs on until then or until it ends; then the instance is terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_deadline_ns: Option<i64>,
    /// The atomic gang it was launched for (`rayscale.gangs: atomic`): the placement
    /// group's id and the attempt, `<pg id>#<n>`; the gang's nodes are launched, waited
    /// for and released together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
}

impl Instance {
    /// A new record in `status` at version 1, whose history holds the creation.
    pub fn new(
        instance_id: impl Into<String>,
        node_type: impl Into<String>,
        status: InstanceStatus,
        now_ns: i64,
        details: impl Into<String>,
    ) -> Self {
        Instance {
            instance_id: instance_id.into(),
            node_type: node_type.into(),
            status,
            version: 1,
            launch_request_id: String::new(),
            launch_request_size: 0,
            cloud_instance_id: None,
            node_id: None,
            launch_config_hash: String::new(),
            is_head: false,
            status_history: vec![StatusChange {
                status,
                timestamp_ns: now_ns,
                details: details.into(),
            }],
            launch_retries: 0,
            termination_retries: 0,
            last_error: None,
            stop_cause: None,
            drain_deadline_ns: None,
            gang: None,
        }
    }

    /// When the instance last entered `status` (the greatest timestamp among the history
    /// entries for `status`, as Ray's `get_last_status_transition`), `None` if it never
    /// did. With `status == self.status` this is "in the current status since", the base
    /// of every timeout.
    pub fn status_since(&self, status: InstanceStatus) -> Option<i64> {
        self.status_history
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.timestamp_ns)
            .max()
    }

    /// Every time the instance entered `status`, in history order (Ray's
    /// `get_status_transition_times_ns`).
    pub fn status_times(&self, status: InstanceStatus) -> Vec<i64> {
        self.status_history
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.timestamp_ns)
            .collect()
    }

    /// How many times the instance entered `status` (e.g. REQUESTED: launch attempts).
    pub fn times_entered(&self, status: InstanceStatus) -> usize {
        self.status_history
            .iter()
            .filter(|c| c.status == status)
            .count()
    }

    /// The latest history entry, if any.
    pub fn last_change(&self) -> Option<&StatusChange> {
        self.status_history.last()
    }

    /// Whether the instance is in a terminal status (TERMINATED, ALLOCATION_FAILED).
    pub fn is_terminal(&self) -> bool {
        is_terminal(self.status)
    }

    /// Whether Ray is stopped on it as an idle node (a rejectable idle-termination
    /// drain) rather than stopped at once. A record written before the cause was kept
    /// has none, and was asked for an idle drain then.
    pub fn idle_stop(&self) -> bool {
        self.drain_deadline_ns.is_none()
            && self.stop_cause.as_deref().is_none_or(|c| {
                c == TerminationCause::Idle.name()
                    || c == TerminationCause::Autostop.name()
                    || c == TerminationCause::Gang.name()
            })
    }
}

/// Serializes [`InstanceStatus`] as Ray's enum value name.
mod status_serde {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    use crate::model::instance::InstanceStatus;

    pub(super) fn serialize<S: Serializer>(
        status: &InstanceStatus,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(status.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<InstanceStatus, D::Error> {
        let name = String::deserialize(deserializer)?;
        InstanceStatus::from_name(&name)
            .ok_or_else(|| D::Error::custom(format!("unknown instance status `{name}`")))
    }
}
