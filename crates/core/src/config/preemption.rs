//! `rayscale.preemption`: what rayscale does about spot and preemptible nodes. Off by
//! default (Ray's autoscaler does none of it, so with it off decisions stay Ray's):
//!
//! ```yaml
//! rayscale:
//!   preemption:
//!     enabled: true          # the notice watcher on every worker, replacement at once
//!     on_rebalance: ignore   # AWS rebalance recommendations: ignore (said, counted) | drain
//!     notice_poll_s: 5       # how often the watcher asks the metadata service
//! ```
//!
//! With `enabled`, each worker's boot script starts a watcher that polls its cloud's
//! notice endpoint and drains its own Ray node (`DRAIN_NODE_REASON_PREEMPTION`, with the
//! cloud's deadline) on a notice; the reconciler treats a node Ray reports DRAINING
//! without rayscale having asked as leaving: the resources in use on it become demand in
//! the same iteration, its (type, zone) is marked unavailable, and it is terminated if it
//! is still there past its deadline.

use serde_json::Value;

use super::schema::{describe, join, obj};
use crate::CoreError;

/// What to do on an AWS rebalance recommendation (a softer, earlier signal than the
/// two-minute interruption notice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRebalance {
    /// Say it (boot log, a notice in the GCS KV) and count it; schedule as before.
    #[default]
    Ignore,
    /// Drain the node as for an interruption notice, without a deadline.
    Drain,
}

impl OnRebalance {
    /// The YAML spelling.
    pub fn name(self) -> &'static str {
        match self {
            OnRebalance::Ignore => "ignore",
            OnRebalance::Drain => "drain",
        }
    }
}

/// The default poll interval of the notice watcher (s).
pub const DEFAULT_NOTICE_POLL_S: u64 = 5;

/// `rayscale.preemption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionSettings {
    /// Watch for notices and replace preempted nodes at once (default off).
    pub enabled: bool,
    /// AWS rebalance recommendations.
    pub on_rebalance: OnRebalance,
    /// The watcher's poll interval (s, 1..=60).
    pub notice_poll_s: u64,
}

impl Default for PreemptionSettings {
    fn default() -> Self {
        PreemptionSettings {
            enabled: false,
            on_rebalance: OnRebalance::Ignore,
            notice_poll_s: DEFAULT_NOTICE_POLL_S,
        }
    }
}

impl PreemptionSettings {
    /// Reads `rayscale.preemption` (`v`, at `path`); absent is the default.
    pub fn from_value(v: Option<&Value>, path: &str) -> Result<Self, CoreError> {
        let mut s = PreemptionSettings::default();
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(s);
        };
        let block = obj(v, path)?;
        for (k, val) in block {
            let p = join(path, k);
            match k.as_str() {
                "enabled" => {
                    s.enabled = val.as_bool().ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!("expected true or false, got {}", describe(val)),
                        )
                    })?;
                }
                "on_rebalance" => {
                    s.on_rebalance = match val.as_str() {
                        Some("ignore") => OnRebalance::Ignore,
                        Some("drain") => OnRebalance::Drain,
                        _ => {
                            return Err(CoreError::invalid(
                                &p,
                                format!("expected \"ignore\" or \"drain\", got {}", describe(val)),
                            ));
                        }
                    };
                }
                "notice_poll_s" => {
                    s.notice_poll_s =
                        val.as_u64()
                            .filter(|n| (1..=60).contains(n))
                            .ok_or_else(|| {
                                CoreError::invalid(
                                    &p,
                                    format!(
                                        "expected a whole number of seconds from 1 to 60, got {}",
                                        describe(val)
                                    ),
                                )
                            })?;
                }
                _ => {
                    return Err(CoreError::invalid(p, super::keys::unknown("preemption")));
                }
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_block_and_names_bad_keys() {
        let d = PreemptionSettings::from_value(None, "rayscale.preemption").expect("absent");
        assert_eq!(d, PreemptionSettings::default());
        assert!(!d.enabled);
        let s = PreemptionSettings::from_value(
            Some(
                &serde_json::json!({"enabled": true, "on_rebalance": "drain", "notice_poll_s": 2}),
            ),
            "rayscale.preemption",
        )
        .expect("valid");
        assert!(s.enabled);
        assert_eq!(s.on_rebalance, OnRebalance::Drain);
        assert_eq!(s.notice_poll_s, 2);
        for (bad, path) in [
            (
                serde_json::json!({"enabled": "yes"}),
                "rayscale.preemption.enabled",
            ),
            (
                serde_json::json!({"on_rebalance": "panic"}),
                "rayscale.preemption.on_rebalance",
            ),
            (
                serde_json::json!({"notice_poll_s": 0}),
                "rayscale.preemption.notice_poll_s",
            ),
            (
                serde_json::json!({"notice_poll_s": 61}),
                "rayscale.preemption.notice_poll_s",
            ),
            (
                serde_json::json!({"watch": true}),
                "rayscale.preemption.watch",
            ),
            (serde_json::json!([1]), "rayscale.preemption"),
        ] {
            let e = PreemptionSettings::from_value(Some(&bad), "rayscale.preemption")
                .expect_err("refused");
            assert!(e.to_string().contains(path), "{e}");
        }
    }
}
