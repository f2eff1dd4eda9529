//! The driver's wall clock, injected (`bin/` hands in the system's). Waiting and deadlines use tokio's timers, which
//! tests pause and advance ([`TokioClock`] follows them), so a test runs hours of the loop
//! in milliseconds with no real sleep.

/// Wall-clock time for the reconciler (ns since the Unix epoch).
pub trait Clock: Send + Sync {
    /// Now, in ns since the Unix epoch.
    fn now_ns(&self) -> i64;
}

/// A wall clock that starts at `base_ns` and advances with tokio's clock (so with paused
/// time in tests).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_ns: i64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `base_ns` now.
    pub fn new(base_ns: i64) -> Self {
        TokioClock {
            base_ns,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ns(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_nanos()).unwrap_or(i64::MAX);
        self.base_ns.saturating_add(elapsed)
    }
}
