//! Running one iteration's effects: concurrently (bounded), each under a deadline, and
//! only while this process may act (holds the lease). What went wrong comes back for the
//! next iteration's sync: provider errors and refused or failed stops (Ray's
//! `RayStopError`).
//!
//! A call that does not answer in time is left to the reconciler's timeouts, which are
//! safe to act on: a launch stays REQUESTED and is re-sent with the same request id (the
//! provider makes nothing twice); a termination stays TERMINATING and is retried; a stop
//! counts as failed, so the instance goes back to RAY_RUNNING and may be chosen again.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

use super::gcs::Gcs;
use super::lease::LeaseView;
use crate::provider::{CloudInstanceProvider, ProviderError, ProviderOp};
use crate::reconciler::{DrainRejection, Effect};

/// How effects run.
#[derive(Debug, Clone, Copy)]
pub struct EffectOptions {
    /// Effects in flight at once.
    pub concurrency: usize,
    /// Each effect's deadline.
    pub deadline: Duration,
}

impl Default for EffectOptions {
    fn default() -> Self {
        EffectOptions {
            concurrency: 16,
            deadline: Duration::from_secs(60),
        }
    }
}

/// What the effects left for the next sync.
#[derive(Debug, Default)]
pub struct EffectResults {
    /// Refused or failed stops.
    pub rejections: Vec<DrainRejection>,
    /// Provider errors.
    pub errors: Vec<ProviderError>,
    /// Effects not run because this process may no longer act.
    pub withheld: usize,
}

enum One {
    Done,
    Rejected(DrainRejection),
    Errors(Vec<ProviderError>),
    Withheld,
}

/// Runs `effects` (see the module docs).
pub async fn run_effects<G: Gcs + ?Sized>(
    gcs: &G,
    provider: &dyn CloudInstanceProvider,
    effects: &[Effect],
    lease: &watch::Receiver<LeaseView>,
    options: EffectOptions,
) -> EffectResults {
    // Boxed with `Send` spelled out: the compiler cannot infer it through a stream of
    // closures borrowing `gcs` and `effects`.
    let mut futures: Vec<Pin<Box<dyn Future<Output = One> + Send + '_>>> = Vec::new();
    for e in effects {
        futures.push(Box::pin(async move {
            // Looked at as each effect starts: a process that lost the lease meanwhile does
            // nothing more.
            if !lease.borrow().may_act() {
                return One::Withheld;
            }
            match tokio::time::timeout(options.deadline, run_one(gcs, provider, e)).await {
                Ok(one) => one,
                Err(_) => {
                    timed_out(e, options.deadline);
                    match e {
                        Effect::Drain {
                            instance_id,
                            node_id_hex,
                            ..
                        } => One::Rejected(DrainRejection {
                            instance_id: instance_id.clone(),
                            reason: format!(
                                "stopping ray node {node_id_hex} did not answer within {:?}",
                                options.deadline
                            ),
                        }),
                        // Left to the reconciler's timeouts (see the module docs).
                        _ => One::Done,
                    }
                }
            }
        }));
    }
    let outcomes: Vec<One> = futures_util::stream::iter(futures)
        .buffer_unordered(options.concurrency.max(1))
        .collect()
        .await;
    let mut out = EffectResults::default();
    for o in outcomes {
        match o {
            One::Done => {}
            One::Rejected(r) => out.rejections.push(r),
            One::Errors(e) => out.errors.extend(e),
            One::Withheld => out.withheld += 1,
        }
    }
    if out.withheld > 0 {
        tracing::warn!(
            "{} effects not run: this process no longer holds the autoscaler lease",
            out.withheld
        );
    }
    out
}

fn timed_out(e: &Effect, deadline: Duration) {
    match e {
        Effect::Launch(l) => tracing::warn!(
            "launch {} ({} x {}) did not answer within {deadline:?}: it stays requested and \
             is re-sent with the same request id if nothing comes of it",
            l.request_id,
            l.count,
            l.node_type
        ),
        Effect::Terminate {
            cloud_instance_ids, ..
        } => tracing::warn!(
            "terminating {} did not answer within {deadline:?}: retried when it times out",
            cloud_instance_ids.join(", ")
        ),
        Effect::Drain { instance_id, .. } => {
            tracing::warn!("stopping ray on {instance_id} did not answer within {deadline:?}")
        }
        Effect::InstallRay {
            cloud_instance_id, ..
        } => tracing::warn!(
            "starting the install of ray on {cloud_instance_id} did not answer within \
             {deadline:?}: it fails when RAY_INSTALLING times out"
        ),
    }
}

async fn run_one<G: Gcs + ?Sized>(
    gcs: &G,
    provider: &dyn CloudInstanceProvider,
    e: &Effect,
) -> One {
    match e {
        Effect::Launch(l) => {
            tracing::info!(
                "launching {} x {} (request {})",
                l.count,
                l.node_type,
                l.request_id
            );
            match provider.launch(l).await {
                Ok(outcome) => {
                    if !outcome.instances.is_empty() {
                        let ids: Vec<&str> = outcome
                            .instances
                            .iter()
                            .map(|c| c.cloud_instance_id.as_str())
                            .collect();
                        tracing::info!("launch {} made {}", l.request_id, ids.join(", "));
                    }
                    match outcome.shortfall {
                        Some(short) => {
                            tracing::warn!(
                                "launch {} fell short ({}): {short}",
                                l.request_id,
                                short.kind.name()
                            );
                            One::Errors(vec![short])
                        }
                        None => One::Done,
                    }
                }
                Err(err) => {
                    tracing::warn!(
                        "launch {} failed ({}): {err}",
                        l.request_id,
                        err.kind.name()
                    );
                    One::Errors(vec![err.for_op(ProviderOp::Launch {
                        request_id: l.request_id.clone(),
                        node_type: l.node_type.clone(),
                        count: l.count,
                    })])
                }
            }
        }
        Effect::Drain {
            instance_id,
            node_id_hex,
            siblings,
            reason,
            idle,
            deadline_ns,
        } => {
            // A multi-host instance's other hosts first, the same way and all at once (one
            // call's time, however many hosts). One refused: the first host is left
            // alone and the record goes back to RAY_RUNNING; the hosts that accepted go
            // on draining, and once one is dead the reconciler stops the broken slice
            // whole (a refusal is a race: the stop was decided with every host idle).
            let others = futures_util::future::join_all(
                siblings
                    .iter()
                    .map(|node| stop_one(gcs, instance_id, node, reason, *idle, *deadline_ns)),
            )
            .await;
            if let Some(Err(reason)) = others.into_iter().find(Result::is_err) {
                return One::Rejected(DrainRejection {
                    instance_id: instance_id.clone(),
                    reason,
                });
            }
            match stop_one(gcs, instance_id, node_id_hex, reason, *idle, *deadline_ns).await {
                Ok(()) => One::Done,
                Err(reason) => One::Rejected(DrainRejection {
                    instance_id: instance_id.clone(),
                    reason,
                }),
            }
        }
        Effect::InstallRay {
            instance_id,
            cloud_instance_id,
            node_type,
        } => {
            tracing::info!("installing ray on {cloud_instance_id} ({instance_id}, {node_type})");
            match provider.install_ray(cloud_instance_id, node_type).await {
                Ok(()) => One::Done,
                Err(err) => {
                    tracing::warn!("install of ray on {cloud_instance_id} failed: {err}");
                    One::Errors(vec![err.for_op(ProviderOp::InstallRay {
                        cloud_instance_id: cloud_instance_id.clone(),
                    })])
                }
            }
        }
        Effect::Terminate {
            cloud_instance_ids,
            request_id,
        } => {
            tracing::info!("terminating {}", cloud_instance_ids.join(", "));
            let errors = terminate_split(provider, cloud_instance_ids, request_id).await;
            if errors.is_empty() {
                One::Done
            } else {
                One::Errors(errors)
            }
        }
    }
}

/// Stops Ray node `node_id_hex` of `instance_id` as an [`Effect::Drain`] says: a drain
/// with a deadline, a rejectable idle drain, or a stop. `Err`: why it was refused or
/// failed.
async fn stop_one<G: Gcs + ?Sized>(
    gcs: &G,
    instance_id: &str,
    node_id_hex: &str,
    reason: &str,
    idle: bool,
    deadline_ns: Option<i64>,
) -> Result<(), String> {
    // A drain's answer: accepted, refused (Ray's reason) or failed.
    let answer = |r: Result<super::gcs::DrainReply, crate::CoreError>| match r {
        Ok(r) if r.accepted => Ok(()),
        Ok(r) => {
            tracing::warn!("drain of {instance_id} rejected: {}", r.rejection);
            Err(format!("drain rejected: {}", r.rejection))
        }
        Err(err) => {
            tracing::warn!("drain of {instance_id} failed: {err}");
            Err(format!("drain failed: {err}"))
        }
    };
    if let Some(d) = deadline_ns {
        let deadline_ms = d.div_euclid(1_000_000);
        tracing::info!("draining {instance_id} (node {node_id_hex}) with a deadline: {reason}");
        answer(gcs.drain_node_until(node_id_hex, reason, deadline_ms).await)
    } else if idle {
        tracing::info!("draining {instance_id} (node {node_id_hex}): {reason}");
        answer(gcs.drain_idle_node(node_id_hex, reason).await)
    } else {
        tracing::info!("stopping ray on {instance_id} (node {node_id_hex}): {reason}");
        match gcs.stop_node(node_id_hex).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!("the GCS did not stop ray on {instance_id}");
                Err(format!("the GCS did not stop ray node {node_id_hex}"))
            }
            Err(err) => {
                tracing::warn!("stopping ray on {instance_id} failed: {err}");
                Err(format!("stopping ray failed: {err}"))
            }
        }
    }
}

/// Terminates `ids`; a batch refused for one of its ids (a head, an instance that is not
/// the cluster's worker: the provider refuses the whole call) is split in halves until
/// the refused ids stand alone, so that the others are terminated (about 2 log2(n) calls
/// per refused id). Returns one error per id not terminated.
async fn terminate_split(
    provider: &dyn CloudInstanceProvider,
    ids: &[String],
    request_id: &str,
) -> Vec<ProviderError> {
    let mut errors = Vec::new();
    let mut batches: Vec<&[String]> = vec![ids];
    let mut calls = 0u32;
    while let Some(batch) = batches.pop() {
        calls += 1;
        let key = if calls == 1 {
            request_id.to_string()
        } else {
            format!("{request_id}-{calls}")
        };
        match provider.terminate(batch, &key).await {
            Ok(()) => {}
            Err(err) if batch.len() > 1 && refuses_one(&err) => {
                let (a, b) = batch.split_at(batch.len() / 2);
                batches.push(b);
                batches.push(a);
            }
            Err(err) => {
                tracing::warn!("terminate failed: {err}");
                errors.extend(batch.iter().map(|id| {
                    err.clone().for_op(ProviderOp::Terminate {
                        cloud_instance_id: id.clone(),
                    })
                }));
            }
        }
    }
    errors
}

/// An error that may be about one id of a batch rather than the call.
fn refuses_one(err: &ProviderError) -> bool {
    matches!(
        err.kind,
        crate::provider::ProviderErrorKind::InvalidConfig
            | crate::provider::ProviderErrorKind::NotFound
    )
}
