//! The explanation's metrics: pending demand and worker nodes by reason
//! (`rayscale_pending_demand{reason}`, `rayscale_nodes_kept{reason}`), set each
//! iteration from the decision's explanation; a reason gone is removed.

use std::collections::BTreeSet;
use std::sync::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rayscale_core::driver::IterationView;

type Labels = Vec<(&'static str, String)>;

/// The two families and the reasons they show.
pub struct WhyMetrics {
    demand: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    session: String,
    shown: Mutex<(BTreeSet<&'static str>, BTreeSet<&'static str>)>,
}

impl WhyMetrics {
    /// Over registered families.
    pub fn new(demand: Family<Labels, Gauge>, nodes: Family<Labels, Gauge>, session: &str) -> Self {
        WhyMetrics {
            demand,
            nodes,
            session: session.to_string(),
            shown: Mutex::new(Default::default()),
        }
    }

    fn labels(&self, reason: &str) -> Labels {
        vec![
            ("reason", reason.to_string()),
            ("SessionName", self.session.clone()),
        ]
    }

    /// Sets both from iteration `v`'s explanation (none: unchanged).
    pub fn iteration(&self, v: &IterationView<'_>) {
        let Some(e) = &v.outcome.explanation else {
            return;
        };
        let mut guard = super::lock(&self.shown);
        let shown = &mut *guard;
        for (family, now, before) in [
            (&self.demand, e.demand_by_reason(), &mut shown.0),
            (&self.nodes, e.nodes_by_reason(), &mut shown.1),
        ] {
            for (reason, n) in &now {
                family
                    .get_or_create(&self.labels(reason))
                    .set(i64::try_from(*n).unwrap_or(i64::MAX));
            }
            let keys: BTreeSet<&'static str> = now.keys().copied().collect();
            for gone in before.difference(&keys) {
                family.remove(&self.labels(gone));
            }
            *before = keys;
        }
    }
}

#[cfg(test)]
mod tests {
    use rayscale_core::config::ClusterConfig;
    use rayscale_core::driver::{IterationView, Observer};
    use rayscale_core::expander::ExpanderChain;
    use rayscale_core::explain::{DemandGroup, DemandKind, DemandReason, Explanation};
    use rayscale_core::model::ClusterResourceState;
    use rayscale_core::reconciler::Outcome;
    use rayscale_core::scheduler::Decision;

    use crate::ops::events::EventLog;
    use crate::ops::metrics::Metrics;

    fn at_max(count: u64) -> Outcome {
        Outcome {
            decision: Some(Decision::default()),
            explanation: Some(Explanation {
                demand: vec![DemandGroup {
                    kind: DemandKind::Task,
                    reason: DemandReason::TypeAtMax {
                        node_type: "gpu".into(),
                        max_workers: 2,
                    },
                    count,
                    shapes: Vec::new(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn reasons_are_gauged_while_they_last_and_said_when_they_start_and_end() {
        let config = ClusterConfig::from_yaml_str(
            "cluster_name: t\nprovider: {type: local_processes}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {CPU: 0}, node_config: {}}\n",
            "t",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m = Metrics::new("s", 0);
        let dir = std::env::temp_dir().join(format!("rayscale-why-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = EventLog::open(&dir, "h", 1).expect("open");
        let (chain, ray) = (ExpanderChain::ray(), ClusterResourceState::default());
        let mut said = Vec::new();
        for outcome in [
            at_max(3),
            at_max(5),
            Outcome {
                decision: Some(Decision::default()),
                explanation: Some(Explanation::default()),
                ..Default::default()
            },
        ] {
            let v = IterationView {
                now_ns: 0,
                config: &config,
                instances: Vec::new(),
                ray: &ray,
                outcome: &outcome,
                provider_errors: &[],
                drain_rejections: &[],
                chain: &chain,
                first_after_load: false,
                advisories: &[],
            };
            m.iteration(&v);
            said.push(
                log.events_of(&v)
                    .into_iter()
                    .map(|e| e.message)
                    .collect::<Vec<_>>(),
            );
            if outcome
                .explanation
                .as_ref()
                .is_some_and(|e| !e.demand.is_empty())
            {
                let text = m.encode();
                let gauge = format!(
                    "rayscale_pending_demand{{reason=\"type_at_max\",SessionName=\"s\"}} {}",
                    outcome
                        .explanation
                        .as_ref()
                        .map_or(0, |e| e.demand[0].count)
                );
                assert!(text.contains(&gauge), "{text}");
            }
        }
        assert_eq!(
            said,
            vec![
                vec![
                    "Tasks and actors pending: node type gpu is at its max_workers (2)."
                        .to_string()
                ],
                vec![],
                vec![
                    "No longer: tasks and actors pending: node type gpu is at its max_workers (2)."
                        .to_string()
                ],
            ]
        );
        assert!(!m.encode().contains("reason=\"type_at_max\""));
        crate::ops::metrics::tests::assert_declared_labels(&m.encode());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
