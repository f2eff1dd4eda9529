//! The head's `ray-node-status: up-to-date` tag. Ray's node updater sets it once the
//! head's setup commands ran, and Ray's CLI (`ray rsync-up`, `rsync-down`, `submit`)
//! acts only on a head that has it. A head `rayscale up` launched sets itself up in its
//! own boot, so no updater tags it: the loop does, once the head's GCS answers (which
//! it must, for the loop to have gathered anything). One call per head, on a task of its
//! own (the loop goes on meanwhile); a failed call is said once and tried again after
//! [`RETRY`]. A call under way when the process stops is not waited for (the next
//! process tags the head if it did not).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::provider::{CloudInstance, CloudInstanceProvider, tags};

/// A failed tag call is tried again after this long.
pub const RETRY: Duration = Duration::from_secs(60);

/// What the loop remembers of the head's tag.
#[derive(Debug, Default)]
pub struct HeadReady {
    /// The call under way: the head, and the task (its failure, if it failed).
    running: Option<(String, JoinHandle<Option<String>>)>,
    /// Heads tagged by this process (the cloud's list may lag behind the call).
    done: BTreeSet<String>,
    /// No call before this, after a failure.
    retry_at: Option<Instant>,
    /// Failures said, each once.
    said: BTreeSet<String>,
}

/// The head to tag: the one running head whose status tag says `uninitialized` (as its
/// launch left it; another status is Ray's updater's, `update-failed` among them, and
/// stays). None when there are several running heads (Ray's CLI would pick one of them;
/// which is not ours to say), none, or the cloud carries no Ray status.
pub fn head_to_mark<'a>(cloud: &'a [CloudInstance], done: &BTreeSet<String>) -> Option<&'a str> {
    let mut heads = cloud.iter().filter(|c| c.is_head() && c.is_running());
    let head = heads.next()?;
    if heads.next().is_some() || done.contains(&head.cloud_instance_id) {
        return None;
    }
    match head.labels.get(tags::NODE_STATUS) {
        Some(s) if s == tags::STATUS_UNINITIALIZED => Some(&head.cloud_instance_id),
        _ => None,
    }
}

impl HeadReady {
    /// Tags the head of `cloud` when it needs it, no call is under way and no failure is
    /// being waited out. The call runs on its own task under `deadline` (a slow cloud never
    /// holds the loop up); its outcome is taken in by a later step.
    pub fn step(
        &mut self,
        provider: &Arc<dyn CloudInstanceProvider>,
        cloud: &[CloudInstance],
        deadline: Duration,
    ) {
        if let Some((id, task)) = self.running.take() {
            if !task.is_finished() {
                self.running = Some((id, task));
                return;
            }
            let failed = match task.now_or_never() {
                Some(Ok(r)) => r,
                Some(Err(e)) => Some(format!("the tag call's task ended: {e}")),
                None => Some("the tag call's task gave no outcome".to_string()),
            };
            self.outcome(id, failed);
        }
        if !provider.tags_heads() || self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let Some(id) = head_to_mark(cloud, &self.done) else {
            return;
        };
        let id = id.to_string();
        let p = provider.clone();
        let call_id = id.clone();
        let task = tokio::spawn(async move {
            match tokio::time::timeout(deadline, p.mark_head_up_to_date(&call_id)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {deadline:?}")),
            }
        });
        self.running = Some((id, task));
    }

    fn outcome(&mut self, id: String, failed: Option<String>) {
        match failed {
            None => {
                tracing::info!(
                    "tagged head {id} {}: {} (Ray's CLI finds the head by it)",
                    tags::NODE_STATUS,
                    tags::STATUS_UP_TO_DATE
                );
                self.done.insert(id);
                self.retry_at = None;
            }
            Some(e) => {
                if self.said.insert(e.clone()) {
                    tracing::warn!(
                        "cannot tag head {id} {}: {} (Ray's rsync-up and submit will not \
                         find it; trying again every {RETRY:?}): {e}",
                        tags::NODE_STATUS,
                        tags::STATUS_UP_TO_DATE
                    );
                }
                self.retry_at = Some(Instant::now() + RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::CloudInstanceState;

    fn head(id: &str, status: Option<&str>) -> CloudInstance {
        let mut c = CloudInstance::worker(id, "head", None).as_head();
        if let Some(s) = status {
            c.labels.insert(tags::NODE_STATUS.into(), s.into());
        }
        c
    }

    #[test]
    fn only_the_one_running_head_that_is_not_up_to_date() {
        let none = BTreeSet::new();
        let w = CloudInstance::worker("w", "cpu", None);
        let mut tagged_w = w.clone();
        tagged_w
            .labels
            .insert(tags::NODE_STATUS.into(), "uninitialized".into());
        assert_eq!(
            head_to_mark(&[tagged_w.clone(), head("h", Some("uninitialized"))], &none),
            Some("h")
        );
        assert_eq!(head_to_mark(&[tagged_w], &none), None, "workers stay");
        assert_eq!(head_to_mark(&[head("h", Some("up-to-date"))], &none), None);
        assert_eq!(
            head_to_mark(&[head("h", Some("update-failed"))], &none),
            None,
            "Ray's updater's word stays"
        );
        assert_eq!(
            head_to_mark(&[head("h", None)], &none),
            None,
            "no Ray status"
        );
        let pending = head("h", Some("uninitialized")).in_state(CloudInstanceState::Pending);
        assert_eq!(head_to_mark(&[pending], &none), None);
        let two = [
            head("a", Some("uninitialized")),
            head("b", Some("uninitialized")),
        ];
        assert_eq!(
            head_to_mark(&two, &none),
            None,
            "two heads: not ours to pick"
        );
        let done: BTreeSet<String> = ["h".to_string()].into();
        assert_eq!(
            head_to_mark(&[head("h", Some("uninitialized"))], &done),
            None
        );
    }
}
