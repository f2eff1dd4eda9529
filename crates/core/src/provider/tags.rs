//! Ray's tag and label keys on cloud instances (`ray/autoscaler/tags.py`), in one place
//! for every provider, so Ray's own tooling (`ray down`, `ray get-head-ip`) sees rayscale's
//! instances as Ray's.

/// The cluster name.
pub const CLUSTER_NAME: &str = "ray-cluster-name";
/// The node kind (`head` / `worker`; the key says "type" for historical reasons).
pub const NODE_KIND: &str = "ray-node-type";
/// The user's node type (a key of `available_node_types`).
pub const USER_NODE_TYPE: &str = "ray-user-node-type";
/// The node's name.
pub const NODE_NAME: &str = "ray-node-name";
/// The node's status as Ray's updater sets it.
pub const NODE_STATUS: &str = "ray-node-status";
/// The launch config hash.
pub const LAUNCH_CONFIG: &str = "ray-launch-config";
/// The launch request id.
pub const LAUNCH_REQUEST: &str = "ray-launch-request";
/// rayscale's own, on a head `rayscale up` launched: the digest of the cluster config its
/// rayscale runs with ([`boot::head_config_digest`](super::boot::head_config_digest)),
/// set at launch and again when `rayscale up` pushes a changed config to it.
pub const RAYSCALE_CONFIG: &str = "rayscale-config";

/// Value of [`NODE_STATUS`] of a node nobody has set up yet (Ray's `STATUS_UNINITIALIZED`).
pub const STATUS_UNINITIALIZED: &str = "uninitialized";
/// Value of [`NODE_STATUS`] once a node's setup ran (Ray's `STATUS_UP_TO_DATE`): Ray's CLI
/// (`ray rsync-up`, `ray submit`, ...) acts only on a head with it.
pub const STATUS_UP_TO_DATE: &str = "up-to-date";

/// Value of [`NODE_KIND`] for the head.
pub const NODE_KIND_HEAD: &str = "head";
/// Value of [`NODE_KIND`] for a worker.
pub const NODE_KIND_WORKER: &str = "worker";
/// Value of [`NODE_KIND`] for a node Ray does not manage.
pub const NODE_KIND_UNMANAGED: &str = "unmanaged";
