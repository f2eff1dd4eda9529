//! What every cloud provider crate would otherwise write again: reading the `provider:`
//! block's keys, the checks before a launch (a known type, the head only through
//! `launch_head`), the refusal to terminate across the head line, and each node type's
//! boot script. Pure: no client, no I/O.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::boot::{BootTarget, HeadBootTarget, render_head, render_worker};
use super::{
    CloudInstance, LaunchOutcome, LaunchRequest, NodeKind, ProviderError, ProviderErrorKind,
    ProviderOp,
};
use crate::CoreError;
use crate::config::ClusterConfig;

/// The keys a cloud's `provider:` block may hold.
#[derive(Debug, Clone, Copy)]
pub struct ProviderKeys<'a> {
    /// The cloud's name, for messages (`AWS`, `GCP`).
    pub cloud: &'a str,
    /// Keys the provider reads.
    pub known: &'a [&'a str],
    /// Keys of Ray's schema that change nothing for rayscale.
    pub ignored: &'a [&'a str],
    /// Keys rayscale refuses, with the reason.
    pub refused: &'a [(&'a str, &'a str)],
}

/// Provider keys the core reads whatever the cloud (`ClusterConfig`), which every cloud's
/// provider accepts.
pub const CORE_PROVIDER_KEYS: &[&str] = &["disable_launch_config_check"];

impl ProviderKeys<'_> {
    /// Checks every key of `provider`: the first refused or unknown one, as `(path,
    /// message)`. The core's keys (`CORE_PROVIDER_KEYS`) are always accepted.
    pub fn check(&self, provider: &Map<String, Value>) -> Result<(), (String, String)> {
        for key in provider.keys() {
            if self.known.contains(&key.as_str())
                || self.ignored.contains(&key.as_str())
                || CORE_PROVIDER_KEYS.contains(&key.as_str())
            {
                continue;
            }
            let path = format!("provider.{key}");
            if let Some((_, why)) = self.refused.iter().find(|(k, _)| k == key) {
                return Err((path, (*why).to_string()));
            }
            return Err((
                path,
                format!(
                    "unknown key for the {} provider (known: {})",
                    self.cloud,
                    self.known
                        .iter()
                        .chain(CORE_PROVIDER_KEYS)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// The checks before `req` is launched as `kind`: its type is one of the config's
/// (`known`), and a head type goes only through `launch_head`, a worker type only
/// through `launch`.
pub fn check_launch(
    head_node_type: Option<&str>,
    known: bool,
    req: &LaunchRequest,
    kind: NodeKind,
) -> Result<(), ProviderError> {
    let t = req.node_type.as_str();
    let refuse = |message: String| {
        Err(ProviderError::new(
            ProviderOp::Launch {
                request_id: req.request_id.clone(),
                node_type: req.node_type.clone(),
                count: req.count,
            },
            ProviderErrorKind::InvalidConfig,
            message,
        ))
    };
    if !known {
        return refuse(format!(
            "launch {}: unknown node type {t:?}",
            req.request_id
        ));
    }
    let is_head_type = head_node_type == Some(t);
    if is_head_type != (kind == NodeKind::Head) {
        return refuse(format!(
            "launch {}: {t:?} is {} the head's type (head_node_type)",
            req.request_id,
            if is_head_type {
                "the head's type, not a worker's: only launch_head makes it; it is"
            } else {
                "not"
            }
        ));
    }
    Ok(())
}

/// What a provider does when asking after one of its pending cloud operations fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingCheckError {
    /// The operation is gone (clouds keep an operation's record for a while): the
    /// instance list tells the rest.
    Forget,
    /// Asking will not work until someone acts (credentials, config): report it.
    Report,
    /// Transient: ask again at the next poll, while the checks last.
    Retry,
}

/// [`PendingCheckError`] for an error of `kind` asking after an operation.
pub fn pending_check_error(kind: ProviderErrorKind) -> PendingCheckError {
    match kind {
        ProviderErrorKind::NotFound => PendingCheckError::Forget,
        ProviderErrorKind::Auth | ProviderErrorKind::InvalidConfig => PendingCheckError::Report,
        _ => PendingCheckError::Retry,
    }
}

/// The error of a terminate that would cross the head line: `id` asked to go as the
/// head (`as_head`) is not the head, or asked to go as a worker is the head.
pub fn refuse_terminate(id: &str, as_head: bool) -> ProviderError {
    ProviderError::new(
        ProviderOp::Terminate {
            cloud_instance_id: id.to_string(),
        },
        ProviderErrorKind::InvalidConfig,
        if as_head {
            format!("refusing to terminate {id} as the head: it is not the cluster's head")
        } else {
            format!("refusing to terminate {id}: it is the cluster's head")
        },
    )
}

/// The error of a head tag asked for `id`, which is not the cluster's running head
/// (gone, a worker, another cluster's, or not running).
pub fn refuse_mark(id: &str) -> ProviderError {
    ProviderError::new(
        ProviderOp::Other,
        ProviderErrorKind::NotFound,
        format!("refusing to tag {id}: it is not the cluster's running head"),
    )
}

/// The outcome of a launch of `req` that made `made` and met `failures` (one per
/// instance not made): all made (failures made up for) is a success; some made is a
/// success with a shortfall; none made is the error. The error reported is a capacity
/// one first (it moves the demand elsewhere); `kind` tells an error's kind,
/// `into_provider` makes it the contract's error of an op.
pub fn launch_outcome<E: std::fmt::Display>(
    req: &LaunchRequest,
    made: Vec<CloudInstance>,
    mut failures: Vec<E>,
    kind: impl Fn(&E) -> ProviderErrorKind,
    into_provider: impl Fn(E, ProviderOp) -> ProviderError,
) -> Result<LaunchOutcome, ProviderError> {
    let t = &req.node_type;
    let op = |count: u64| ProviderOp::Launch {
        request_id: req.request_id.clone(),
        node_type: req.node_type.clone(),
        count,
    };
    if failures.is_empty() || made.len() as u64 >= req.count {
        for e in &failures {
            tracing::info!("launch {} of {t}: made up for: {e}", req.request_id);
        }
        return Ok(LaunchOutcome {
            instances: made,
            shortfall: None,
        });
    }
    failures.sort_by_key(|e| !matches!(kind(e), ProviderErrorKind::Capacity { .. }));
    let first = failures.swap_remove(0);
    let short = req.count.saturating_sub(made.len() as u64);
    tracing::info!(
        "launch {} of {t}: {short} of {} not made: {first}",
        req.request_id,
        req.count
    );
    if made.is_empty() {
        Err(into_provider(first, op(req.count)))
    } else {
        Ok(LaunchOutcome {
            instances: made,
            shortfall: Some(into_provider(first, op(short))),
        })
    }
}

/// The name of the `index`-th node of `request_id`, as Ray names cloud nodes:
/// `ray-<cluster>-<kind>-<8 hex>` and `-<suffix>` if any, the hex derived from the
/// request and index (so a replayed launch names the same nodes), the cluster part
/// lowercased, non-alphanumerics as `-`, and shortened to keep the name within `max`.
pub fn node_name(
    cluster: &str,
    kind: NodeKind,
    request_id: &str,
    index: u64,
    max: usize,
    suffix: Option<&str>,
) -> String {
    let token = super::idempotency_token(request_id, index);
    let hex = &token[..8];
    let kind = kind.tag_value();
    let tail = suffix.map(|s| format!("-{s}")).unwrap_or_default();
    let fixed = "ray-".len() + 1 + kind.len() + 1 + hex.len() + tail.len();
    let mut c: String = cluster
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(max.saturating_sub(fixed))
        .collect();
    while c.ends_with('-') {
        c.pop();
    }
    if c.is_empty() {
        format!("ray-{kind}-{hex}{tail}")
    } else {
        format!("ray-{c}-{kind}-{hex}{tail}")
    }
}

/// The refusal of a new config that moves the cluster: each `(what, old, new)` that
/// differs (a project, region, resource group or cluster name) would hide the instances
/// made so far, which would leak.
pub fn refuse_moves(changes: &[(&str, &str, &str)]) -> Result<(), ProviderError> {
    match changes.iter().find(|(_, a, b)| a != b) {
        None => Ok(()),
        Some((what, a, b)) => Err(ProviderError::new(
            ProviderOp::Other,
            ProviderErrorKind::InvalidConfig,
            format!("{what} changed from {a:?} to {b:?}: restart rayscale to move the cluster"),
        )),
    }
}

/// How a cloud's instance learns who it is at boot, and whether the cloud runs its boot
/// payload once per instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetadataCommands<'a> {
    /// Prints the instance's cloud id.
    pub instance_id: &'a str,
    /// Prints the instance's private address.
    pub private_ip: &'a str,
    /// The cloud runs the payload once per instance (see [`BootTarget::per_boot`]).
    pub per_boot: bool,
    /// Whose notice endpoints a worker's watcher polls (`rayscale.preemption`).
    pub notices: Option<super::boot::NoticeCloud>,
    /// Prints which host of its instance this is (0 for the first), on a cloud whose
    /// instances may be several hosts (GCP's TPU slices); see [`BootTarget::host_index_command`].
    pub host_index: Option<&'a str>,
}

/// Every node type's boot script: the head type's (the launcher's head), and with
/// `head_ip` each worker type's (without, workers get none: tests of the API alone).
pub fn boot_scripts(
    config: &ClusterConfig,
    head_ip: Option<&str>,
    m: &MetadataCommands<'_>,
) -> Result<BTreeMap<String, String>, CoreError> {
    let mut out = BTreeMap::new();
    for t in &config.node_types {
        let t = t.name.as_str();
        let script = if config.head_node_type.as_deref() == Some(t) {
            render_head(
                config,
                &HeadBootTarget {
                    node_type: t,
                    instance_id_command: m.instance_id,
                    private_ip_command: m.private_ip,
                    per_boot: m.per_boot,
                },
            )?
        } else if let Some(ip) = head_ip {
            render_worker(
                config,
                &BootTarget {
                    node_type: t,
                    head_ip: ip,
                    instance_id_command: m.instance_id,
                    per_boot: m.per_boot,
                    notices: m.notices,
                    host_index_command: m.host_index,
                },
            )?
        } else {
            continue;
        };
        out.insert(t.to_string(), script);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t: &str) -> LaunchRequest {
        LaunchRequest {
            request_id: "lr-1".into(),
            node_type: t.into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        }
    }

    #[test]
    fn launches_keep_the_head_line() {
        assert!(check_launch(Some("h"), true, &req("w"), NodeKind::Worker).is_ok());
        assert!(check_launch(Some("h"), true, &req("h"), NodeKind::Head).is_ok());
        let e = check_launch(Some("h"), true, &req("h"), NodeKind::Worker).expect_err("refused");
        assert!(e.message.contains("only launch_head makes it"), "{e}");
        let e = check_launch(Some("h"), true, &req("w"), NodeKind::Head).expect_err("refused");
        assert!(e.message.contains("is not the head's type"), "{e}");
        let e = check_launch(Some("h"), false, &req("x"), NodeKind::Worker).expect_err("refused");
        assert_eq!(e.kind, ProviderErrorKind::InvalidConfig);
        assert!(e.message.contains("unknown node type \"x\""), "{e}");
        assert!(
            refuse_terminate("i-1", false)
                .message
                .contains("it is the cluster's head")
        );
    }

    #[test]
    fn provider_keys() {
        let keys = ProviderKeys {
            cloud: "GCP",
            known: &["type", "project_id"],
            ignored: &["_config_cache_path"],
            refused: &[("gcp_credentials", "use ADC")],
        };
        let m = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(
            keys.check(&m(
                serde_json::json!({"type": "gcp", "_config_cache_path": "x",
                    "disable_launch_config_check": false})
            ))
            .is_ok()
        );
        assert_eq!(
            keys.check(&m(serde_json::json!({"gcp_credentials": {}}))),
            Err(("provider.gcp_credentials".into(), "use ADC".into()))
        );
        let (path, msg) = keys
            .check(&m(serde_json::json!({"zone": "x"})))
            .expect_err("unknown");
        assert_eq!(path, "provider.zone");
        assert!(msg.starts_with("unknown key for the GCP provider (known: type, project_id, disable_launch_config_check)"));
        // The core's keys are accepted whatever the cloud's lists say.
        let none = ProviderKeys { known: &[], ..keys };
        assert!(
            none.check(&m(serde_json::json!({"disable_launch_config_check": true})))
                .is_ok()
        );
    }
}
