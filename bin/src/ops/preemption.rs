//! rayscale's preemption metrics (`rayscale.preemption.enabled`): notices by node type
//! and source (those that drained a node, and advice that did not: AWS rebalance
//! recommendations under `on_rebalance: ignore`), and how long a preempted node's replacement took, from the iteration that
//! first saw the node draining to the first instance of the cluster that reached
//! RAY_RUNNING after it (replacements are matched to notices in order).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use rayscale_core::driver::IterationView;
use rayscale_core::model::InstanceStatus;

type Labels = Vec<(&'static str, String)>;

/// The notice-to-replacement buckets (1 s to about 17 min).
pub fn replacement_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1.0, 2.0, 11,
    ))
}

/// The two families and what they remember.
pub struct PreemptionMetrics {
    notices: Family<Labels, Counter>,
    replacement: Family<Labels, Histogram, fn() -> Histogram>,
    session: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Drained instances counted already.
    counted: BTreeSet<String>,
    /// Notices waiting for their replacement: (first seen, ns).
    waiting: VecDeque<i64>,
    /// Instances seen running already.
    running: BTreeSet<String>,
}

impl PreemptionMetrics {
    /// Over registered families (`rayscale_preemption_notices_total`,
    /// `rayscale_preemption_replacement_seconds`).
    pub fn new(
        notices: Family<Labels, Counter>,
        replacement: Family<Labels, Histogram, fn() -> Histogram>,
        session: &str,
    ) -> Self {
        PreemptionMetrics {
            notices,
            replacement,
            session: session.to_string(),
            state: Mutex::new(State::default()),
        }
    }

    /// Counts what iteration `v` saw.
    pub fn iteration(&self, v: &IterationView<'_>) {
        let mut st = super::lock(&self.state);
        let session = ("SessionName", self.session.clone());
        for d in &v.outcome.drained_outside {
            if !st.counted.insert(d.instance_id.clone()) {
                continue;
            }
            let source = d
                .notice
                .as_ref()
                .map_or("drain".to_string(), |n| n.source.clone());
            self.notices
                .get_or_create(&vec![
                    ("NodeType", d.node_type.clone()),
                    ("source", source),
                    session.clone(),
                ])
                .inc();
            if !d.in_use.is_empty() {
                st.waiting.push_back(d.since_ns);
            }
        }
        // Advice that drained no node (the driver hands each over once).
        for n in v.advisories {
            let node_type = v
                .instances
                .iter()
                .find(|i| i.cloud_instance_id.as_deref() == Some(n.cloud_instance_id.as_str()))
                .map_or_else(String::new, |i| i.node_type.clone());
            self.notices
                .get_or_create(&vec![
                    ("NodeType", node_type),
                    ("source", n.source.clone()),
                    session.clone(),
                ])
                .inc();
        }
        // Instances that reached RAY_RUNNING since the last look, oldest first.
        let mut newly: Vec<(i64, &str)> = v
            .instances
            .iter()
            .filter(|i| i.status == InstanceStatus::RayRunning && !i.is_head)
            .filter(|i| !st.running.contains(&i.instance_id))
            .filter_map(|i| {
                Some((
                    i.status_since(InstanceStatus::RayRunning)?,
                    i.instance_id.as_str(),
                ))
            })
            .collect();
        newly.sort();
        for (at, id) in newly {
            st.running.insert(id.to_string());
            if let Some(&since) = st.waiting.front()
                && at > since
            {
                st.waiting.pop_front();
                self.replacement
                    .get_or_create(&vec![session.clone()])
                    .observe((at - since) as f64 / 1e9);
            }
        }
        // Forget what is gone from the table.
        let live: BTreeSet<&str> = v.instances.iter().map(|i| i.instance_id.as_str()).collect();
        st.running.retain(|i| live.contains(i.as_str()));
        st.counted.retain(|i| live.contains(i.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use rayscale_core::config::ClusterConfig;
    use rayscale_core::driver::{IterationView, Observer};
    use rayscale_core::expander::ExpanderChain;
    use rayscale_core::instance::Instance;
    use rayscale_core::model::{ClusterResourceState, InstanceStatus, ResourceMap};
    use rayscale_core::preemption::{DrainedOutside, Notice};
    use rayscale_core::reconciler::Outcome;

    use crate::ops::metrics::Metrics;

    const S: i64 = 1_000_000_000;

    fn value(text: &str, sample: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
            .unwrap_or(-1.0)
    }

    #[test]
    fn notices_are_counted_once_and_the_replacement_is_timed() {
        let config = ClusterConfig::from_yaml_str(
            "cluster_name: t\nprovider: {type: local_processes}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {CPU: 0}, node_config: {}}\n  \
             spot: {resources: {CPU: 2}, node_config: {}}\n",
            "t",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m = Metrics::new("s", 0);
        let chain = ExpanderChain::ray();
        let ray = ClusterResourceState::default();
        let drained = DrainedOutside {
            instance_id: "i1".into(),
            cloud_instance_id: "c1".into(),
            node_type: "spot".into(),
            zone: Some("z1".into()),
            node_id_hex: "ab".into(),
            notice: Some(Notice {
                cloud_instance_id: "c1".into(),
                source: "aws-spot-interruption".into(),
                deadline_ns: Some(130 * S),
                message: String::new(),
            }),
            in_use: ResourceMap::from_f64_pairs([("CPU".to_string(), 2.0)]),
            new: true,
            since_ns: 10 * S,
        };
        let old = Instance::new("i1", "spot", InstanceStatus::RayRunning, S, "");
        let mut replacement = Instance::new("i2", "spot", InstanceStatus::Queued, 10 * S, "");
        replacement.cloud_instance_id = Some("c2".into());
        let advice = [Notice {
            cloud_instance_id: "c2".into(),
            source: "aws-rebalance".into(),
            deadline_ns: None,
            message: "AWS rebalance recommendation".into(),
        }];
        let feed = |now: i64, instances: Vec<&Instance>, outcome: &Outcome, advice: &[Notice]| {
            m.iteration(&IterationView {
                now_ns: now * S,
                config: &config,
                instances,
                ray: &ray,
                outcome,
                provider_errors: &[],
                drain_rejections: &[],
                chain: &chain,
                first_after_load: false,
                advisories: advice,
            });
        };
        let mut outcome = Outcome {
            drained_outside: vec![drained],
            ..Default::default()
        };
        feed(10, vec![&old, &replacement], &outcome, &[]);
        outcome.drained_outside[0].new = false;
        feed(11, vec![&old, &replacement], &outcome, &advice);
        // The replacement runs 24 s after the notice.
        replacement.status = InstanceStatus::RayRunning;
        replacement
            .status_history
            .push(rayscale_core::instance::StatusChange {
                status: InstanceStatus::RayRunning,
                timestamp_ns: 34 * S,
                details: String::new(),
            });
        feed(34, vec![&old, &replacement], &outcome, &[]);
        let text = m.encode();
        crate::ops::metrics::tests::assert_declared_labels(&text);
        assert_eq!(
            value(
                &text,
                "rayscale_preemption_notices_total{NodeType=\"spot\",source=\"aws-spot-interruption\",SessionName=\"s\"}"
            ),
            1.0,
            "{text}"
        );
        // The advice that drained nothing is counted under its source, once.
        assert_eq!(
            value(
                &text,
                "rayscale_preemption_notices_total{NodeType=\"spot\",source=\"aws-rebalance\",SessionName=\"s\"}"
            ),
            1.0,
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                "rayscale_preemption_replacement_seconds_sum{SessionName=\"s\"}"
            ),
            24.0,
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                "rayscale_preemption_replacement_seconds_count{SessionName=\"s\"}"
            ),
            1.0
        );
    }
}
