//! Instance statuses of Ray's instance manager (`Instance.InstanceStatus`), and why an
//! instance is to be terminated (the scheduler decides it, the record keeps it).

/// Status of an instance in the instance manager, with Ray's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceStatus {
    /// Not set (never valid for a stored instance).
    Unknown = 0,
    /// Waiting to be launched.
    Queued = 1,
    /// Launch requested from the cloud.
    Requested = 2,
    /// A cloud instance is allocated.
    Allocated = 3,
    /// Ray is being installed.
    RayInstalling = 4,
    /// Ray runs on the instance.
    RayRunning = 5,
    /// Ray is asked to stop (drain requested).
    RayStopRequested = 6,
    /// Ray is stopping (draining).
    RayStopping = 7,
    /// Ray stopped.
    RayStopped = 8,
    /// The cloud instance is being terminated.
    Terminating = 9,
    /// The cloud instance is gone.
    Terminated = 10,
    /// The cloud could not allocate the instance.
    AllocationFailed = 11,
    /// Installing Ray failed.
    RayInstallFailed = 12,
    /// Terminating the cloud instance failed.
    TerminationFailed = 13,
    /// Allocation timed out.
    AllocationTimeout = 14,
}

impl InstanceStatus {
    /// Every status, in Ray's numbering order.
    pub const ALL: [InstanceStatus; 15] = [
        InstanceStatus::Unknown,
        InstanceStatus::Queued,
        InstanceStatus::Requested,
        InstanceStatus::Allocated,
        InstanceStatus::RayInstalling,
        InstanceStatus::RayRunning,
        InstanceStatus::RayStopRequested,
        InstanceStatus::RayStopping,
        InstanceStatus::RayStopped,
        InstanceStatus::Terminating,
        InstanceStatus::Terminated,
        InstanceStatus::AllocationFailed,
        InstanceStatus::RayInstallFailed,
        InstanceStatus::TerminationFailed,
        InstanceStatus::AllocationTimeout,
    ];

    /// Ray's enum value name, e.g. `RAY_RUNNING`.
    pub fn name(self) -> &'static str {
        match self {
            InstanceStatus::Unknown => "UNKNOWN",
            InstanceStatus::Queued => "QUEUED",
            InstanceStatus::Requested => "REQUESTED",
            InstanceStatus::Allocated => "ALLOCATED",
            InstanceStatus::RayInstalling => "RAY_INSTALLING",
            InstanceStatus::RayRunning => "RAY_RUNNING",
            InstanceStatus::RayStopRequested => "RAY_STOP_REQUESTED",
            InstanceStatus::RayStopping => "RAY_STOPPING",
            InstanceStatus::RayStopped => "RAY_STOPPED",
            InstanceStatus::Terminating => "TERMINATING",
            InstanceStatus::Terminated => "TERMINATED",
            InstanceStatus::AllocationFailed => "ALLOCATION_FAILED",
            InstanceStatus::RayInstallFailed => "RAY_INSTALL_FAILED",
            InstanceStatus::TerminationFailed => "TERMINATION_FAILED",
            InstanceStatus::AllocationTimeout => "ALLOCATION_TIMEOUT",
        }
    }

    /// Parses Ray's enum value name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Ray's `is_ray_running_reachable`: statuses from which RAY_RUNNING can still be
    /// reached, i.e. the instance runs Ray or may come to run it. Only these are
    /// schedulable.
    pub fn can_reach_ray_running(self) -> bool {
        matches!(
            self,
            InstanceStatus::Queued
                | InstanceStatus::Requested
                | InstanceStatus::Allocated
                | InstanceStatus::RayInstalling
                | InstanceStatus::RayRunning
                | InstanceStatus::RayStopRequested
        )
    }

    /// Position in the main life-cycle chain (QUEUED .. RAY_STOPPED), `None` for statuses
    /// outside it (termination and failure statuses).
    pub fn chain_position(self) -> Option<u8> {
        match self {
            InstanceStatus::Queued => Some(0),
            InstanceStatus::Requested => Some(1),
            InstanceStatus::Allocated => Some(2),
            InstanceStatus::RayInstalling => Some(3),
            InstanceStatus::RayRunning => Some(4),
            InstanceStatus::RayStopRequested => Some(5),
            InstanceStatus::RayStopping => Some(6),
            InstanceStatus::RayStopped => Some(7),
            _ => None,
        }
    }

    /// Advances `self` to `target` when `self` is earlier than `target` in the life-cycle
    /// chain; statuses outside the chain are never advanced.
    pub fn advanced_to(self, target: InstanceStatus) -> InstanceStatus {
        match (self.chain_position(), target.chain_position()) {
            (Some(a), Some(b)) if a < b => target,
            _ => self,
        }
    }
}

/// Why an existing instance is to be terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TerminationCause {
    /// Idle longer than its idle timeout and not needed.
    Idle,
    /// Over the global `max_workers`.
    MaxNumNodes,
    /// Over its type's `max_workers`.
    MaxNumNodePerType,
    /// Its launch config changed (or its type is gone).
    Outdated,
    /// rayscale's own (`rayscale.consolidation`): its load fits on the other nodes.
    Consolidation,
    /// rayscale's own (`rayscale.autostop_minutes`): no demand and no work for that long.
    Autostop,
    /// rayscale's own (`rayscale.gangs: atomic`): a node of a gang that did not come up
    /// whole, released (idle only) so that the group is planned again whole.
    Gang,
}

impl TerminationCause {
    /// Ray's enum value name.
    pub fn name(self) -> &'static str {
        match self {
            TerminationCause::Idle => "IDLE",
            TerminationCause::MaxNumNodes => "MAX_NUM_NODES",
            TerminationCause::MaxNumNodePerType => "MAX_NUM_NODE_PER_TYPE",
            TerminationCause::Outdated => "OUTDATED",
            TerminationCause::Consolidation => "CONSOLIDATION",
            TerminationCause::Autostop => "AUTOSTOP",
            TerminationCause::Gang => "GANG",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in InstanceStatus::ALL {
            assert_eq!(InstanceStatus::from_name(s.name()), Some(s));
        }
        assert_eq!(InstanceStatus::from_name("RUNNING"), None);
    }

    #[test]
    fn advancement_only_moves_forward_in_chain() {
        use InstanceStatus::*;
        assert_eq!(Requested.advanced_to(RayRunning), RayRunning);
        assert_eq!(RayStopRequested.advanced_to(RayRunning), RayStopRequested);
        assert_eq!(RayStopRequested.advanced_to(RayStopping), RayStopping);
        assert_eq!(Terminating.advanced_to(RayStopped), Terminating);
        assert_eq!(AllocationFailed.advanced_to(RayRunning), AllocationFailed);
    }

    #[test]
    fn schedulable_statuses_match_ray() {
        let sched: Vec<_> = InstanceStatus::ALL
            .iter()
            .filter(|s| s.can_reach_ray_running())
            .map(|s| s.name())
            .collect();
        assert_eq!(
            sched,
            [
                "QUEUED",
                "REQUESTED",
                "ALLOCATED",
                "RAY_INSTALLING",
                "RAY_RUNNING",
                "RAY_STOP_REQUESTED"
            ]
        );
    }
}
