//! The instance state machine: which status may follow which.
//!
//! The table is Ray 2.60's `InstanceUtil.get_valid_transitions`, written as an exhaustive
//! `match` so that adding a status to [`InstanceStatus`] fails to compile until the table
//! says where it may go.

use crate::model::instance::InstanceStatus;

use InstanceStatus::{
    Allocated, AllocationFailed, AllocationTimeout, Queued, RayInstallFailed, RayInstalling,
    RayRunning, RayStopRequested, RayStopped, RayStopping, Requested, Terminated, Terminating,
    TerminationFailed, Unknown,
};

/// Statuses a brand-new instance may be created in.
///
/// Ray's instance manager accepts exactly these three for an insert:
/// - `QUEUED`: a new instance queued to be launched (the scheduler asked for it);
/// - `ALLOCATED`: a cloud instance the manager did not launch itself (the head node, or an
///   unknown cloud instance found in the provider's list or reported by a Ray node) is
///   adopted; the event must name its `cloud_instance_id`;
/// - `TERMINATING`: a leaked cloud instance that is to be terminated straight away; the
///   event must name its `cloud_instance_id`.
pub const NEW_INSTANCE_STATUSES: [InstanceStatus; 3] = [Queued, Allocated, Terminating];

/// The statuses `from` may move to, in Ray's numbering order (Ray's
/// `InstanceUtil.get_valid_transitions()[from]`).
///
/// `TERMINATED` and `ALLOCATION_FAILED` are terminal (no way out); `UNKNOWN` is never a
/// valid status of a stored instance and goes nowhere. No status may move to itself.
pub fn valid_transitions(from: InstanceStatus) -> &'static [InstanceStatus] {
    match from {
        // Initial status: a launch request is made, or the queued request is cancelled.
        Queued => &[Requested, Terminated],
        // Launched: the cloud instance appears, the launch fails, or it is queued again
        // to retry.
        Requested => &[Queued, Allocated, AllocationFailed],
        // The cloud instance exists. Ray may be installed by the autoscaler, or already be
        // in any Ray state when the provider manages Ray itself.
        Allocated => &[
            RayInstalling,
            RayRunning,
            RayStopping,
            RayStopped,
            Terminating,
            Terminated,
            AllocationTimeout,
        ],
        RayInstalling => &[
            RayRunning,
            RayStopped,
            Terminating,
            Terminated,
            RayInstallFailed,
        ],
        RayRunning => &[
            RayStopRequested,
            RayStopping,
            RayStopped,
            Terminating,
            Terminated,
        ],
        // A stop (drain) was asked for; it may be refused, so RAY_RUNNING again. Note: no
        // direct TERMINATING from here in Ray.
        RayStopRequested => &[RayRunning, RayStopping, RayStopped, Terminated],
        RayStopping => &[RayStopped, Terminating, Terminated],
        RayStopped => &[Terminating, Terminated],
        Terminating => &[Terminated, TerminationFailed],
        // Terminal statuses.
        Terminated => &[],
        AllocationFailed => &[],
        RayInstallFailed => &[Terminating, Terminated],
        // Termination is retried (TERMINATING) or the cloud instance is already gone.
        TerminationFailed => &[Terminating, Terminated],
        AllocationTimeout => &[Terminating, Terminated],
        Unknown => &[],
    }
}

/// Whether an instance in status `from` may move to status `to`.
pub fn is_valid_transition(from: InstanceStatus, to: InstanceStatus) -> bool {
    valid_transitions(from).contains(&to)
}

/// Whether a new instance may be created in `status` (see [`NEW_INSTANCE_STATUSES`]).
pub fn is_valid_new_status(status: InstanceStatus) -> bool {
    NEW_INSTANCE_STATUSES.contains(&status)
}

/// Whether `status` is terminal: `TERMINATED` or `ALLOCATION_FAILED`. Records in these
/// statuses stay in the table (as in Ray) until pruned.
pub fn is_terminal(status: InstanceStatus) -> bool {
    matches!(status, Terminated | AllocationFailed)
}

/// Every status reachable from `from` by one or more valid transitions, in Ray's
/// numbering order (Ray's `InstanceUtil.get_reachable_statuses`). `from` itself is
/// included only when a cycle leads back to it (e.g. RAY_RUNNING via RAY_STOP_REQUESTED).
pub fn reachable_statuses(from: InstanceStatus) -> Vec<InstanceStatus> {
    let mut seen = [false; InstanceStatus::ALL.len()];
    let mut stack: Vec<InstanceStatus> = valid_transitions(from).to_vec();
    while let Some(status) = stack.pop() {
        let slot = status as usize;
        if let Some(flag) = seen.get_mut(slot)
            && !*flag
        {
            *flag = true;
            stack.extend_from_slice(valid_transitions(status));
        }
    }
    InstanceStatus::ALL
        .iter()
        .copied()
        .filter(|s| seen.get(*s as usize).copied().unwrap_or(false))
        .collect()
}
