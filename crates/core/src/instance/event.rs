//! The update events the instance manager applies.

use crate::model::instance::InstanceStatus;

/// One change to one instance: a status transition (or a creation) plus the fields to set
/// with it (Ray's `InstanceUpdateEvent`).
///
/// - `expected_version: None` creates the instance `instance_id`; it must not exist yet and
///   `new_status` must be one of
///   [`NEW_INSTANCE_STATUSES`](super::transitions::NEW_INSTANCE_STATUSES): QUEUED (a launch
///   to do), ALLOCATED (adopting a cloud instance rayscale did not launch: the head node or
///   an unknown cloud instance, `cloud_instance_id` required) or TERMINATING (a leaked
///   cloud instance to terminate, `cloud_instance_id` required). Ray accepts the same three.
/// - `expected_version: Some(v)` moves the existing instance, whose version must be `v`,
///   to `new_status`, which must be a valid transition from its current status.
///
/// Fields left `None` keep their stored value. Build events with [`Self::create`] or
/// [`Self::transition`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceUpdateEvent {
    /// The instance to change or create.
    pub instance_id: String,
    /// The version the change was computed from; `None` for a new instance.
    pub expected_version: Option<u64>,
    /// The status to move to (or to create the instance in).
    pub new_status: InstanceStatus,
    /// Why, for humans; recorded in the status history.
    pub details: String,
    /// Sets the launch request id.
    pub launch_request_id: Option<String>,
    /// Sets the launch request's size.
    pub launch_request_size: Option<u64>,
    /// Sets the cloud instance id.
    pub cloud_instance_id: Option<String>,
    /// Sets the Ray node id (hex).
    pub node_id: Option<String>,
    /// Sets the node type.
    pub node_type: Option<String>,
    /// Sets the launch config hash.
    pub launch_config_hash: Option<String>,
    /// Sets whether the instance is the head node.
    pub is_head: Option<bool>,
    /// Sets the last error.
    pub error: Option<String>,
    /// Adds one to `launch_retries`.
    pub bump_launch_retries: bool,
    /// Adds one to `termination_retries`.
    pub bump_termination_retries: bool,
    /// Sets why Ray is stopped on the instance (Ray's termination cause name).
    pub stop_cause: Option<String>,
    /// Sets the deadline of its drain.
    pub drain_deadline_ns: Option<i64>,
    /// Sets the atomic gang it belongs to.
    pub gang: Option<String>,
}

impl InstanceUpdateEvent {
    fn blank(
        instance_id: impl Into<String>,
        expected_version: Option<u64>,
        new_status: InstanceStatus,
    ) -> Self {
        InstanceUpdateEvent {
            instance_id: instance_id.into(),
            expected_version,
            new_status,
            details: String::new(),
            launch_request_id: None,
            launch_request_size: None,
            cloud_instance_id: None,
            node_id: None,
            node_type: None,
            launch_config_hash: None,
            is_head: None,
            error: None,
            bump_launch_retries: false,
            bump_termination_retries: false,
            stop_cause: None,
            drain_deadline_ns: None,
            gang: None,
        }
    }

    /// Creates instance `instance_id` of `node_type` in `status` (QUEUED, ALLOCATED or
    /// TERMINATING).
    pub fn create(
        instance_id: impl Into<String>,
        node_type: impl Into<String>,
        status: InstanceStatus,
    ) -> Self {
        Self::blank(instance_id, None, status).with_node_type(node_type)
    }

    /// Moves instance `instance_id`, expected at `expected_version`, to `new_status`.
    pub fn transition(
        instance_id: impl Into<String>,
        expected_version: u64,
        new_status: InstanceStatus,
    ) -> Self {
        Self::blank(instance_id, Some(expected_version), new_status)
    }

    /// Sets the details recorded in the status history.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Sets the launch request id.
    pub fn with_launch_request_id(mut self, id: impl Into<String>) -> Self {
        self.launch_request_id = Some(id.into());
        self
    }

    /// Sets the launch request id and how many instances the request asked for.
    pub fn with_launch_request(mut self, id: impl Into<String>, size: u64) -> Self {
        self.launch_request_id = Some(id.into());
        self.launch_request_size = Some(size);
        self
    }

    /// Sets the cloud instance id.
    pub fn with_cloud_instance_id(mut self, id: impl Into<String>) -> Self {
        self.cloud_instance_id = Some(id.into());
        self
    }

    /// Sets the Ray node id (hex).
    pub fn with_node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// Sets the node type.
    pub fn with_node_type(mut self, node_type: impl Into<String>) -> Self {
        self.node_type = Some(node_type.into());
        self
    }

    /// Sets the launch config hash.
    pub fn with_launch_config_hash(mut self, hash: impl Into<String>) -> Self {
        self.launch_config_hash = Some(hash.into());
        self
    }

    /// Sets whether the instance is the head node.
    pub fn with_is_head(mut self, is_head: bool) -> Self {
        self.is_head = Some(is_head);
        self
    }

    /// Sets why Ray is stopped on the instance (Ray's termination cause name).
    pub fn with_stop_cause(mut self, cause: impl Into<String>) -> Self {
        self.stop_cause = Some(cause.into());
        self
    }

    /// Sets the deadline of its drain (see [`Instance::drain_deadline_ns`]).
    ///
    /// [`Instance::drain_deadline_ns`]: super::Instance::drain_deadline_ns
    pub fn with_drain_deadline(mut self, deadline_ns: i64) -> Self {
        self.drain_deadline_ns = Some(deadline_ns);
        self
    }

    /// Sets the atomic gang (`<pg id>#<attempt>`) the instance is launched for.
    pub fn with_gang(mut self, gang: impl Into<String>) -> Self {
        self.gang = Some(gang.into());
        self
    }

    /// Sets the last error.
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// Adds one to the launch retry count when applied.
    pub fn bump_launch_retries(mut self) -> Self {
        self.bump_launch_retries = true;
        self
    }

    /// Adds one to the termination retry count when applied.
    pub fn bump_termination_retries(mut self) -> Self {
        self.bump_termination_retries = true;
        self
    }

    /// Whether the event creates a new instance.
    pub fn is_create(&self) -> bool {
        self.expected_version.is_none()
    }
}
