//! The expander settings: the optional `rayscale.expander` block of a cluster config, which
//! command-line flags may override.
//!
//! ```yaml
//! rayscale:
//!   expander:
//!     chain: [grpc, priority, least-waste]   # or "grpc,priority,least-waste"
//!     seed: 7                                 # for random and weighted (default 0)
//!     priorities: {10: ["cpu-.*"], 50: ["spot-.*"]}   # priority -> node-type regexes
//!     weights: {cpu-a: 80, cpu-b: 20}
//!     prices: {cpu-a: 0.34, cpu-b: 0.20}      # per node per hour
//!     grpc: {url: "https://127.0.0.1:7000", cert: ca.pem, insecure: false, timeout_s: 5}
//! ```

use regex::Regex;
use serde_json::Value;

use super::schema::{describe, join, obj};
use crate::CoreError;

/// Names of the built-in expanders, in the order of the documentation.
pub const BUILTIN_NAMES: [&str; 9] = [
    "ray",
    "random",
    "most-demands",
    "least-waste",
    "least-nodes",
    "price",
    "priority",
    "weighted",
    "grpc",
];

/// Default per-call timeout of the gRPC expander, in seconds.
pub const DEFAULT_GRPC_TIMEOUT_S: f64 = 5.0;

/// One rule of the priority map: node types matching any pattern get `priority`.
#[derive(Debug, Clone)]
pub struct PriorityRule {
    /// The priority (higher wins).
    pub priority: i64,
    /// Regexes matched against node type names (unanchored, as the Cluster Autoscaler does).
    pub patterns: Vec<Regex>,
}

impl PartialEq for PriorityRule {
    fn eq(&self, o: &Self) -> bool {
        self.priority == o.priority
            && self.patterns.len() == o.patterns.len()
            && self
                .patterns
                .iter()
                .zip(&o.patterns)
                .all(|(a, b)| a.as_str() == b.as_str())
    }
}

/// Where and how to reach the gRPC expander.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcExpanderSettings {
    /// Server address, e.g. `https://127.0.0.1:7000` (a bare `host:port` means https).
    pub url: String,
    /// PEM file of the CA (or self-signed server certificate) to trust.
    pub cert: Option<String>,
    /// Plain-text HTTP/2, only when asked for explicitly.
    pub insecure: bool,
    /// Per-call timeout in seconds.
    pub timeout_s: f64,
}

impl Default for GrpcExpanderSettings {
    /// No address yet, TLS, the default timeout.
    fn default() -> Self {
        GrpcExpanderSettings {
            url: String::new(),
            cert: None,
            insecure: false,
            timeout_s: DEFAULT_GRPC_TIMEOUT_S,
        }
    }
}

/// Every expander setting.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpanderSettings {
    /// Expander names in chain order; empty means `ray`.
    pub chain: Vec<String>,
    /// Seed of the random and weighted expanders.
    pub seed: u64,
    /// The priority map (empty: use each node type's Ray `priority` field).
    pub priorities: Vec<PriorityRule>,
    /// Weights per node type for the weighted expander.
    pub weights: Vec<(String, f64)>,
    /// Price per node per hour, per node type.
    pub prices: Vec<(String, f64)>,
    /// The gRPC expander, if configured.
    pub grpc: Option<GrpcExpanderSettings>,
}

/// Splits a chain given as `a,b,c`.
pub fn parse_chain(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl ExpanderSettings {
    /// Reads the `rayscale` block of a cluster config (`v` is that block; `path` its path).
    /// Node type names in weights and prices must be known types.
    pub fn from_rayscale_block(
        v: Option<&Value>,
        path: &str,
        node_types: &[String],
    ) -> Result<Self, CoreError> {
        let mut s = ExpanderSettings::default();
        let Some(v) = v else {
            return Ok(s);
        };
        let block = obj(v, path)?;
        for (k, val) in block {
            let p = join(path, k);
            match k.as_str() {
                "expander" => s.read_expander(val, &p, node_types)?,
                // Read by the cluster config; `bridge` by the node-provider adapter.
                "unavailable_type_ttl_s"
                | "bridge"
                | "preemption"
                | "disruption_budget"
                | "scale_down_delay_after_launch_s"
                | "min_node_lifetime_s"
                | "max_hourly_cost"
                | "autostop_minutes"
                | "consolidation"
                | "install"
                | "gangs" => {}
                _ => {
                    return Err(CoreError::invalid(p, super::keys::unknown("")));
                }
            }
        }
        Ok(s)
    }

    fn read_expander(&mut self, v: &Value, path: &str, types: &[String]) -> Result<(), CoreError> {
        for (k, val) in obj(v, path)? {
            let p = join(path, k);
            match k.as_str() {
                "chain" => {
                    self.chain = match val {
                        Value::String(s) => parse_chain(s),
                        Value::Array(items) => items
                            .iter()
                            .enumerate()
                            .map(|(i, x)| {
                                x.as_str().map(str::to_string).ok_or_else(|| {
                                    CoreError::invalid(
                                        format!("{p}[{i}]"),
                                        format!("expected a string, got {}", describe(x)),
                                    )
                                })
                            })
                            .collect::<Result<_, _>>()?,
                        other => {
                            return Err(CoreError::invalid(
                                p,
                                format!("expected a list or a string, got {}", describe(other)),
                            ));
                        }
                    };
                    check_chain(&self.chain, &p)?;
                }
                "seed" => {
                    self.seed = val.as_u64().ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!("expected a non-negative integer, got {}", describe(val)),
                        )
                    })?;
                }
                "priorities" => {
                    self.priorities = Vec::new();
                    for (pk, pv) in obj(val, &p)? {
                        let pp = join(&p, pk);
                        let priority: i64 = pk.trim().parse().map_err(|_| {
                            CoreError::invalid(&pp, "a priority key must be an integer")
                        })?;
                        let list = pv.as_array().ok_or_else(|| {
                            CoreError::invalid(
                                &pp,
                                format!("expected a list of regexes, got {}", describe(pv)),
                            )
                        })?;
                        let mut patterns = Vec::new();
                        for (i, x) in list.iter().enumerate() {
                            let ip = format!("{pp}[{i}]");
                            let text = x.as_str().ok_or_else(|| {
                                CoreError::invalid(
                                    &ip,
                                    format!("expected a string, got {}", describe(x)),
                                )
                            })?;
                            let re = Regex::new(text).map_err(|e| {
                                CoreError::invalid(
                                    &ip,
                                    format!(
                                        "invalid regex {text:?}: {}",
                                        e.to_string().replace('\n', " ")
                                    ),
                                )
                            })?;
                            patterns.push(re);
                        }
                        self.priorities.push(PriorityRule { priority, patterns });
                    }
                }
                "weights" => self.weights = per_type_numbers(val, &p, types)?,
                "prices" => self.prices = per_type_numbers(val, &p, types)?,
                "grpc" => self.grpc = Some(read_grpc(val, &p)?),
                _ => {
                    return Err(CoreError::invalid(p, super::keys::unknown("expander")));
                }
            }
        }
        Ok(())
    }
}

/// Checks every name of a chain is a known expander.
pub fn check_chain(chain: &[String], path: &str) -> Result<(), CoreError> {
    for name in chain {
        if !BUILTIN_NAMES.contains(&name.as_str()) {
            return Err(CoreError::invalid(
                path,
                format!(
                    "unknown expander {name:?} (known: {})",
                    BUILTIN_NAMES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn per_type_numbers(
    v: &Value,
    path: &str,
    types: &[String],
) -> Result<Vec<(String, f64)>, CoreError> {
    let mut out = Vec::new();
    for (k, x) in obj(v, path)? {
        let p = join(path, k);
        if !types.iter().any(|t| t == k) {
            return Err(CoreError::invalid(p, "not one of available_node_types"));
        }
        let n = x
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| {
                CoreError::invalid(
                    &p,
                    format!("expected a non-negative number, got {}", describe(x)),
                )
            })?;
        out.push((k.clone(), n));
    }
    Ok(out)
}

fn read_grpc(v: &Value, path: &str) -> Result<GrpcExpanderSettings, CoreError> {
    let mut g = GrpcExpanderSettings::default();
    for (k, x) in obj(v, path)? {
        let p = join(path, k);
        let want_str = |x: &Value| {
            x.as_str().map(str::to_string).ok_or_else(|| {
                CoreError::invalid(&p, format!("expected a string, got {}", describe(x)))
            })
        };
        match k.as_str() {
            "url" => g.url = want_str(x)?,
            "cert" => g.cert = Some(want_str(x)?),
            "insecure" => {
                g.insecure = x.as_bool().ok_or_else(|| {
                    CoreError::invalid(&p, format!("expected a boolean, got {}", describe(x)))
                })?;
            }
            "timeout_s" => {
                g.timeout_s = x
                    .as_f64()
                    .filter(|t| *t > 0.0 && t.is_finite())
                    .ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!("expected a positive number of seconds, got {}", describe(x)),
                        )
                    })?;
            }
            _ => {
                return Err(CoreError::invalid(p, super::keys::unknown("expander.grpc")));
            }
        }
    }
    if g.url.is_empty() {
        return Err(CoreError::invalid(
            join(path, "url"),
            "required key is missing",
        ));
    }
    Ok(g)
}
