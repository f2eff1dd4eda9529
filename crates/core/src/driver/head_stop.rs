//! Stopping the head after autostop (`rayscale up`'s own head, `run --autostop-head`):
//! tried from inside the loop, and only while the loop still finds the cluster quiet. A
//! failed stop is tried again [`HEAD_STOP_RETRY`] later, at most [`HEAD_STOP_TRIES`]
//! times; work that arrives meanwhile ends the attempts and the loop scales for it, so a
//! head is never stopped under a job submitted after the workers went.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Stops the head of the cluster (the caller's: a cloud call, or the local head's
/// processes).
#[async_trait::async_trait]
pub trait HeadStop: Send + Sync {
    /// Stops the head; a line for the log once it is stopped, or why it is not.
    async fn stop_head(&self) -> Result<String, String>;
}

/// How long after a failed stop the head is tried again (while still quiet).
pub const HEAD_STOP_RETRY: Duration = Duration::from_secs(30);
/// How many failed stops end the loop with the error (about ten minutes of quiet).
pub const HEAD_STOP_TRIES: u32 = 20;

/// What the loop knows of the head's stop.
pub(super) struct HeadStops {
    stop: Arc<dyn HeadStop>,
    /// The last stored iteration found every worker stopped and the cluster quiet.
    due: bool,
    failures: u32,
    next: Option<Instant>,
}

/// What the loop does after a step.
pub(super) enum HeadStep {
    /// Go on looping.
    Continue,
    /// The head is stopped (its line), or could not be (the last error): the loop ends.
    End(Result<String, String>),
}

impl HeadStops {
    pub(super) fn new(stop: Arc<dyn HeadStop>) -> Self {
        HeadStops {
            stop,
            due: false,
            failures: 0,
            next: None,
        }
    }

    /// After a step: `reconciled` (an iteration was stored) and what it found
    /// (`head_due`). Only a stored iteration changes what is known.
    pub(super) async fn after_step(&mut self, reconciled: bool, head_due: bool) -> HeadStep {
        if reconciled {
            if self.due && !head_due && self.failures > 0 {
                tracing::info!(
                    "autostop: work arrived before the head could be stopped; it stays up"
                );
            }
            if !head_due {
                self.failures = 0;
                self.next = None;
            }
            self.due = head_due;
        }
        if !self.due || self.next.is_some_and(|t| Instant::now() < t) {
            return HeadStep::Continue;
        }
        tracing::info!(
            "autostop: stopping the head (every worker is stopped and the cluster is still quiet)"
        );
        match self.stop.stop_head().await {
            Ok(line) => HeadStep::End(Ok(line)),
            Err(e) => {
                self.failures += 1;
                if self.failures >= HEAD_STOP_TRIES {
                    return HeadStep::End(Err(e));
                }
                tracing::warn!(
                    "autostop: stopping the head failed (try {} of {HEAD_STOP_TRIES}): {e}; \
                     again in {}s if the cluster stays quiet",
                    self.failures,
                    HEAD_STOP_RETRY.as_secs()
                );
                self.next = Some(Instant::now() + HEAD_STOP_RETRY);
                HeadStep::Continue
            }
        }
    }
}
