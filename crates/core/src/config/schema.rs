//! A small structural validator for Ray's cluster config, written for rayscale.
//!
//! It encodes the same constraints as Ray 2.60's cluster schema (which keys exist, which
//! objects are closed, the JSON type of every value, minimums) so that rayscale rejects
//! exactly what `ray up` rejects, and names the path of the first offending value.

use serde_json::Value;

use crate::CoreError;

/// The expected shape of one value.
#[derive(Debug)]
pub enum Node {
    /// Anything.
    Any,
    /// A string.
    Str,
    /// A string or null.
    StrOrNull,
    /// A boolean.
    Bool,
    /// An integer (a float with no fraction counts, as in JSON Schema draft 7).
    Int {
        /// Inclusive minimum.
        min: Option<i64>,
    },
    /// Any number.
    Num {
        /// Inclusive minimum.
        min: Option<f64>,
    },
    /// An array whose items have the given shape.
    Array(&'static Node),
    /// An object.
    Object(&'static Obj),
}

/// The expected shape of an object.
#[derive(Debug)]
pub struct Obj {
    /// Known properties.
    pub props: &'static [(&'static str, Node)],
    /// Keys that must be present.
    pub required: &'static [&'static str],
    /// What other keys may hold: `None` means they are rejected.
    pub other: Option<&'static Node>,
}

static ANY: Node = Node::Any;
static STR: Node = Node::Str;

static SECURITY_GROUP: Obj = Obj {
    props: &[
        ("GroupName", Node::Str),
        ("IpPermissions", Node::Array(&ANY)),
    ],
    required: &[],
    other: None,
};

static GCP_CREDENTIALS: Obj = Obj {
    props: &[("type", Node::Str), ("credentials", Node::Str)],
    required: &["type"],
    other: None,
};

static PROVIDER: Obj = Obj {
    props: &[
        ("type", Node::Str),
        ("region", Node::Str),
        ("module", Node::Str),
        ("head_ip", Node::Str),
        ("worker_ips", Node::Array(&ANY)),
        ("use_internal_ips", Node::Bool),
        ("namespace", Node::Str),
        ("location", Node::Str),
        ("resource_group", Node::Str),
        ("tags", Node::Object(&OPEN)),
        ("subscription_id", Node::Str),
        ("msi_identity_id", Node::Str),
        ("msi_identity_principal_id", Node::Str),
        ("subnet_id", Node::Str),
        ("autoscaler_service_account", Node::Object(&OPEN)),
        ("autoscaler_role", Node::Object(&OPEN)),
        ("autoscaler_role_binding", Node::Object(&OPEN)),
        ("cache_stopped_nodes", Node::Bool),
        ("availability_zone", Node::Str),
        ("project_id", Node::StrOrNull),
        ("security_group", Node::Object(&SECURITY_GROUP)),
        ("disable_node_updaters", Node::Bool),
        ("gcp_credentials", Node::Object(&GCP_CREDENTIALS)),
        ("cloudwatch", Node::Any),
    ],
    required: &["type"],
    other: Some(&ANY),
};

static OPEN: Obj = Obj {
    props: &[],
    required: &[],
    other: Some(&ANY),
};

static AUTH: Obj = Obj {
    props: &[
        ("ssh_user", Node::Str),
        ("ssh_public_key", Node::Str),
        ("ssh_private_key", Node::Str),
        ("ssh_proxy_command", Node::Str),
        ("ssh_proxy_use_node_id", Node::Bool),
    ],
    required: &[],
    other: None,
};

static DOCKER: Obj = Obj {
    props: &[
        ("image", Node::Str),
        ("container_name", Node::Str),
        ("pull_before_run", Node::Bool),
        ("run_options", Node::Array(&ANY)),
        ("head_image", Node::Str),
        ("head_run_options", Node::Array(&ANY)),
        ("worker_image", Node::Str),
        ("worker_run_options", Node::Array(&ANY)),
        ("disable_automatic_runtime_detection", Node::Bool),
        ("disable_shm_size_detection", Node::Bool),
        ("use_podman", Node::Bool),
    ],
    required: &[],
    other: None,
};

static NODE_DOCKER: Obj = Obj {
    props: &[
        ("pull_before_run", Node::Bool),
        ("worker_image", Node::Str),
        ("worker_run_options", Node::Array(&ANY)),
    ],
    required: &[],
    other: None,
};

static RESOURCE_AMOUNT: Node = Node::Int { min: Some(0) };
static RESOURCES: Obj = Obj {
    props: &[],
    required: &[],
    other: Some(&RESOURCE_AMOUNT),
};

static LABELS: Obj = Obj {
    props: &[],
    required: &[],
    other: Some(&STR),
};

static NODE_TYPE: Obj = Obj {
    props: &[
        ("node_config", Node::Object(&OPEN)),
        ("min_workers", Node::Int { min: None }),
        ("max_workers", Node::Int { min: None }),
        ("idle_timeout_s", Node::Num { min: None }),
        ("priority", Node::Int { min: None }),
        ("resources", Node::Object(&RESOURCES)),
        ("labels", Node::Object(&LABELS)),
        ("initialization_commands", COMMANDS_REF),
        ("worker_setup_commands", COMMANDS_REF),
        ("docker", Node::Object(&NODE_DOCKER)),
    ],
    // Ray's schema also requires `node_config`, but Ray's own vSphere defaults.yaml omits
    // it for its head type; rayscale accepts its absence (as `{}`) so every shipped
    // defaults.yaml loads.
    required: &["resources"],
    other: None,
};

static NODE_TYPE_NODE: Node = Node::Object(&NODE_TYPE);
static NODE_TYPES: Obj = Obj {
    props: &[],
    required: &[],
    other: Some(&NODE_TYPE_NODE),
};

/// A list of shell commands.
const COMMANDS_REF: Node = Node::Array(&STR);

/// The top level of a Ray cluster config.
pub static CLUSTER: Obj = Obj {
    props: &[
        ("cluster_name", Node::Str),
        ("max_workers", Node::Int { min: Some(0) }),
        ("upscaling_speed", Node::Num { min: Some(0.0) }),
        ("idle_timeout_minutes", Node::Num { min: Some(0.0) }),
        ("provider", Node::Object(&PROVIDER)),
        ("auth", Node::Object(&AUTH)),
        ("docker", Node::Object(&DOCKER)),
        ("head_node_type", Node::Str),
        ("file_mounts", Node::Object(&OPEN)),
        ("cluster_synced_files", Node::Array(&ANY)),
        ("file_mounts_sync_continuously", Node::Bool),
        ("rsync_exclude", Node::Array(&ANY)),
        ("rsync_filter", Node::Array(&ANY)),
        ("metadata", Node::Object(&OPEN)),
        ("initialization_commands", COMMANDS_REF),
        ("setup_commands", COMMANDS_REF),
        ("head_setup_commands", COMMANDS_REF),
        ("worker_setup_commands", COMMANDS_REF),
        ("head_start_ray_commands", COMMANDS_REF),
        ("worker_start_ray_commands", COMMANDS_REF),
        ("no_restart", Node::Any),
        ("available_node_types", Node::Object(&NODE_TYPES)),
        // Ray 1.x's legacy fields: Ray 2.60 drops them when empty and refuses them
        // otherwise (checked in `ClusterConfig::from_value`).
        ("head_node", Node::Any),
        ("worker_nodes", Node::Any),
        // A top-level `min_workers` (Ray 1.x's): Ray 2.60 drops it before its schema
        // check (`fillout_defaults`), and so does `ClusterConfig::from_value`, saying so.
        ("min_workers", Node::Any),
        // rayscale's extension block (not in Ray's schema), checked by the expander settings.
        ("rayscale", Node::Any),
    ],
    required: &["cluster_name", "provider"],
    other: None,
};

/// A short description of a JSON value, for error messages: its type and, for scalars,
/// the value itself.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let shown: String = s.chars().take(40).collect();
            format!("{:?}", shown)
        }
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a mapping".to_string(),
    }
}

/// Joins a path and a key: `a.b` + `c` = `a.b.c`.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// True when `v` is an integer in JSON Schema draft 7's sense.
pub fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// Validates `v` against `node`, naming the first offending path.
pub fn validate(v: &Value, node: &Node, path: &str) -> Result<(), CoreError> {
    let bad =
        |what: &str| CoreError::invalid(path, format!("expected {what}, got {}", describe(v)));
    match node {
        Node::Any => Ok(()),
        Node::Str => v.is_string().then_some(()).ok_or_else(|| bad("a string")),
        Node::StrOrNull => (v.is_string() || v.is_null())
            .then_some(())
            .ok_or_else(|| bad("a string or null")),
        Node::Bool => v.is_boolean().then_some(()).ok_or_else(|| bad("a boolean")),
        Node::Int { min } => {
            if !is_integer(v) {
                return Err(bad("an integer"));
            }
            if let (Some(m), Some(f)) = (min, v.as_f64())
                && f < *m as f64
            {
                return Err(CoreError::invalid(
                    path,
                    format!("must be at least {m}, got {}", describe(v)),
                ));
            }
            Ok(())
        }
        Node::Num { min } => {
            let Some(f) = v.as_f64() else {
                return Err(bad("a number"));
            };
            if let Some(m) = min
                && f < *m
            {
                return Err(CoreError::invalid(
                    path,
                    format!("must be at least {m}, got {}", describe(v)),
                ));
            }
            Ok(())
        }
        Node::Array(items) => {
            let Some(arr) = v.as_array() else {
                return Err(bad("a list"));
            };
            for (i, item) in arr.iter().enumerate() {
                validate(item, items, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Node::Object(obj) => {
            let Some(map) = v.as_object() else {
                return Err(bad("a mapping"));
            };
            for req in obj.required {
                if !map.contains_key(*req) {
                    return Err(CoreError::invalid(
                        join(path, req),
                        "required key is missing",
                    ));
                }
            }
            for (k, child) in map {
                let child_path = join(path, k);
                if let Some((_, n)) = obj.props.iter().find(|(name, _)| name == k) {
                    validate(child, n, &child_path)?;
                } else if let Some(other) = obj.other {
                    validate(child, other, &child_path)?;
                } else {
                    return Err(CoreError::invalid(
                        child_path,
                        "unknown key (not allowed by Ray's cluster schema)",
                    ));
                }
            }
            Ok(())
        }
    }
}

/// `v` (at `path`) as a mapping of a config block, or the one-line error naming it.
pub(super) fn obj<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a serde_json::Map<String, Value>, CoreError> {
    v.as_object()
        .ok_or_else(|| CoreError::invalid(path, format!("expected a mapping, got {}", describe(v))))
}
