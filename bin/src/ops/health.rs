//! `/healthz` and `/readyz`: the process answers; and it is doing its job: the GCS
//! answers (the lease task's last round reached it), this process holds the cluster's
//! lease, and its last step that went through is recent.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayscale_core::driver::{LeaseView, Observer, StepView};

#[derive(Default)]
struct State {
    /// The lease as the last step saw it.
    lease: LeaseView,
    /// Whether this process held it then (a long step does not make it stale: the
    /// freshness bound does).
    held: bool,
    /// The last step that went through (no error, holding the lease).
    last_ok: Option<Instant>,
    /// Why the last step stopped, if it did.
    last_abort: Option<String>,
}

/// The readiness of the loop, fed by its steps.
pub struct Health {
    max_age: Duration,
    started: Instant,
    state: Mutex<State>,
}

impl Health {
    /// Ready while a step went through within `max_age`.
    pub fn new(max_age: Duration) -> Self {
        Health {
            max_age,
            started: Instant::now(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        super::lock(&self.state)
    }

    /// Whether the loop is ready, and one line per check that fails (or "ready").
    pub fn readiness(&self) -> (bool, String) {
        let s = self.state();
        let mut failed = Vec::new();
        match (&s.lease.gcs_error, &s.lease.holder) {
            (Some(e), _) => failed.push(format!("GCS unreachable: {e}")),
            (None, None) => failed.push("GCS not reached yet".to_string()),
            (None, Some(_)) => {}
        }
        if !s.held {
            let holder = s.lease.holder.as_deref().unwrap_or("nobody yet");
            failed.push(format!("lease not held (holder: {holder})"));
        }
        let since = s.last_ok.unwrap_or(self.started).elapsed();
        if since > self.max_age {
            let why = s.last_abort.as_deref().unwrap_or("no step yet");
            let what = if s.last_ok.is_some() {
                "last iteration"
            } else {
                "no iteration since start"
            };
            failed.push(format!(
                "{what} {:.0} s ago, more than {:.0} s (last: {why})",
                since.as_secs_f64(),
                self.max_age.as_secs_f64()
            ));
        }
        if failed.is_empty() {
            (true, "ready\n".to_string())
        } else {
            (false, failed.join("\n") + "\n")
        }
    }
}

impl Observer for Health {
    fn step(&self, v: &StepView<'_>) {
        let mut s = self.state();
        s.lease = v.lease.clone();
        s.held = v.lease.may_act();
        match &v.report.aborted {
            None => s.last_ok = Some(Instant::now()),
            Some(why) => s.last_abort = Some(why.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayscale_core::driver::StepReport;

    fn step(h: &Health, lease: LeaseView, aborted: Option<&str>) {
        let report = StepReport {
            aborted: aborted.map(str::to_string),
            ..Default::default()
        };
        h.step(&StepView {
            now_ns: 0,
            report: &report,
            lease: &lease,
        });
    }

    fn held() -> LeaseView {
        LeaseView {
            epoch: Some(1),
            valid_until: Some(tokio::time::Instant::now() + Duration::from_secs(30)),
            holder: Some("me".into()),
            act_from: None,
            gcs_error: None,
        }
    }

    #[test]
    fn ready_only_with_the_gcs_the_lease_and_a_fresh_iteration() {
        let h = Health::new(Duration::from_secs(60));
        let (ok, why) = h.readiness();
        assert!(!ok);
        assert!(why.contains("GCS not reached yet"), "{why}");
        step(&h, held(), None);
        assert_eq!(h.readiness(), (true, "ready\n".to_string()));
        // The GCS goes away: the lease task says so.
        let down = LeaseView {
            gcs_error: Some("connection refused".into()),
            ..held()
        };
        step(&h, down, Some("GCS unreachable"));
        let (ok, why) = h.readiness();
        assert!(!ok);
        assert!(why.contains("GCS unreachable: connection refused"), "{why}");
        // Another process holds the lease.
        let follower = LeaseView {
            epoch: None,
            valid_until: None,
            holder: Some("other pid 7".into()),
            act_from: None,
            gcs_error: None,
        };
        step(&h, follower, Some("not holding the lease"));
        let (ok, why) = h.readiness();
        assert!(!ok);
        assert!(
            why.contains("lease not held (holder: other pid 7)"),
            "{why}"
        );
    }

    #[test]
    fn a_stale_iteration_is_not_ready() {
        let h = Health::new(Duration::from_millis(1));
        step(&h, held(), None);
        std::thread::sleep(Duration::from_millis(20));
        step(&h, held(), Some("iteration aborted: list: no answer"));
        let (ok, why) = h.readiness();
        assert!(!ok);
        assert!(
            why.contains("more than 0 s (last: iteration aborted: list: no answer)"),
            "{why}"
        );
    }
}
