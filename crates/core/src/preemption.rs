//! Preemption notices: what a worker's notice watcher (rendered into its boot script by
//! the provider's `boot` module) tells rayscale beside draining its own Ray node, and what
//! the reconciler makes of a node Ray drains without rayscale having asked.
//!
//! The watcher writes one KV entry per notice, in rayscale's namespace, under
//! [`notice_key`]: `{"source": "aws-spot-interruption", "deadline_s": 1764650590,
//! "message": "..."}` (the deadline in s since the epoch, 0 when the cloud gave none).
//! The GCS's node state says only DRAINING; the notice says why and until when. An entry
//! is outside input (any job can write the namespace): it is read with checks, and one
//! that does not read is no notice (the node is still handled as drained from outside).

use serde_json::Value;

use crate::model::ResourceMap;

/// The prefix of notice keys (in rayscale's KV namespace, the driver's `NAMESPACE`).
pub const NOTICE_PREFIX: &str = "notices/";

/// The KV key of the notice of cloud instance `cloud_instance_id` of `cluster`.
pub fn notice_key(cluster: &str, cloud_instance_id: &str) -> String {
    format!("{NOTICE_PREFIX}{cluster}/{cloud_instance_id}")
}

/// The sources a watcher names, with what operators read.
pub const SOURCES: &[(&str, &str)] = &[
    ("aws-spot-interruption", "AWS spot interruption"),
    ("aws-rebalance", "AWS rebalance recommendation"),
    ("gce-preempted", "GCE preemption"),
    ("gce-maintenance", "GCE host maintenance (terminate)"),
    ("azure-preempt", "Azure Spot eviction"),
    ("azure-terminate", "Azure scheduled termination"),
    ("simulated", "simulated preemption"),
];

/// The latest deadline a notice may carry (s since the epoch, year 2100): beyond is no
/// deadline a cloud gives.
const MAX_DEADLINE_S: i64 = 4_102_444_800;

/// One notice, as read from the KV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The cloud instance it is about.
    pub cloud_instance_id: String,
    /// One of [`SOURCES`]' names.
    pub source: String,
    /// When the cloud takes the instance (ns since the epoch), if it said.
    pub deadline_ns: Option<i64>,
    /// The watcher's one line.
    pub message: String,
}

impl Notice {
    /// Reads the KV value `bytes` of `cloud_instance_id`'s notice; `Err` says why it is
    /// not one.
    pub fn parse(cloud_instance_id: &str, bytes: &[u8]) -> Result<Notice, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let source = v
            .get("source")
            .and_then(Value::as_str)
            .ok_or("no \"source\" string")?;
        if !SOURCES.iter().any(|(s, _)| *s == source) {
            return Err(format!(
                "unknown source {:?}",
                source.chars().take(40).collect::<String>()
            ));
        }
        let deadline_ns = match v.get("deadline_s") {
            None | Some(Value::Null) => None,
            Some(d) => match d.as_i64() {
                Some(0) => None,
                Some(s) if (1..=MAX_DEADLINE_S).contains(&s) => Some(s * 1_000_000_000),
                _ => return Err(format!("deadline_s {d} is not a time")),
            },
        };
        let message: String = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        Ok(Notice {
            cloud_instance_id: cloud_instance_id.to_string(),
            source: source.to_string(),
            deadline_ns,
            message,
        })
    }

    /// What operators read for the source ("AWS spot interruption").
    pub fn source_name(&self) -> &str {
        SOURCES
            .iter()
            .find(|(s, _)| *s == self.source)
            .map_or(self.source.as_str(), |(_, n)| n)
    }

    /// "AWS spot interruption, deadline 12:03:10 UTC" (or without the deadline).
    pub fn describe(&self) -> String {
        match self.deadline_ns {
            Some(d) => format!("{}, deadline {}", self.source_name(), hms_utc(d)),
            None => self.source_name().to_string(),
        }
    }
}

/// `HH:MM:SS UTC` of `ns` since the epoch.
pub fn hms_utc(ns: i64) -> String {
    let s = ns.div_euclid(1_000_000_000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// A node Ray reports DRAINING that rayscale did not drain: a preemption (with its
/// notice) or an operator's `ray drain-node`.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainedOutside {
    /// The instance.
    pub instance_id: String,
    /// Its cloud instance.
    pub cloud_instance_id: String,
    /// Its node type.
    pub node_type: String,
    /// Its zone, when the cloud said.
    pub zone: Option<String>,
    /// Its Ray node (hex).
    pub node_id_hex: String,
    /// The notice, when the watcher left one.
    pub notice: Option<Notice>,
    /// The resources in use on it (what the replacement must hold).
    pub in_use: ResourceMap,
    /// Seen first in this iteration.
    pub new: bool,
    /// When it was first seen draining (ns).
    pub since_ns: i64,
}

impl DrainedOutside {
    /// "Node 3f2a… of type spot-cpu preempted (AWS spot interruption, deadline 12:03:10
    /// UTC); launching a replacement." or the operator's-drain wording.
    pub fn event_line(&self) -> String {
        let short: String = self.node_id_hex.chars().take(12).collect();
        let replace = if self.in_use.is_empty() {
            "nothing ran on it, nothing to replace"
        } else {
            "launching a replacement"
        };
        match &self.notice {
            Some(n) => format!(
                "Node {short} of type {} preempted ({}); {replace}.",
                self.node_type,
                n.describe()
            ),
            None => format!(
                "Node {short} of type {} is draining (not asked by the autoscaler: an \
                 operator's drain, or a notice that left no record); {replace}.",
                self.node_type
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_read_with_checks() {
        let n = Notice::parse(
            "i-1",
            br#"{"source":"aws-spot-interruption","deadline_s":1764676990,"message":"terminate at 2025-12-02T12:03:10Z"}"#,
        )
        .expect("a notice");
        assert_eq!(n.deadline_ns, Some(1_764_676_990_000_000_000));
        assert_eq!(n.describe(), "AWS spot interruption, deadline 12:03:10 UTC");
        let n = Notice::parse("x", br#"{"source":"gce-preempted","deadline_s":0}"#).expect("ok");
        assert_eq!(n.deadline_ns, None);
        assert_eq!(n.describe(), "GCE preemption");
        for bad in [
            &b"not json"[..],
            br#"{"deadline_s": 5}"#,
            br#"{"source": "meteor"}"#,
            br#"{"source": "azure-preempt", "deadline_s": -3}"#,
            br#"{"source": "azure-preempt", "deadline_s": 99999999999}"#,
            br#"{"source": "azure-preempt", "deadline_s": "soon"}"#,
        ] {
            assert!(
                Notice::parse("i", bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let n = Notice::parse(
            "i",
            "{\"source\":\"azure-preempt\",\"message\":\"a\\nb\"}".as_bytes(),
        )
        .expect("ok");
        assert_eq!(n.message, "ab", "one line");
    }
}
