//! Ray cluster config (`ray up` YAML) loading and validation.
//!
//! Every key Ray 2.60's schema allows is accepted (and kept in `raw`); the keys rayscale
//! uses are extracted into typed fields. Anything Ray's schema or Ray's own post-schema
//! checks reject is an error naming the offending path.

pub mod canonical_json;
pub mod expander_settings;
pub mod fast_yaml;
pub mod gangs;
pub mod install;
pub mod keys;
pub mod limits;
pub mod mounts;
pub mod preemption;
pub mod ray_defaults;
pub mod rsync_filter;
pub mod schema;

use serde_json::Value;

use crate::CoreError;
use crate::model::ResourceMap;
use expander_settings::ExpanderSettings;
use preemption::PreemptionSettings;
use schema::{describe, join};

/// Ray's default idle timeout (minutes) when the config does not set one.
pub const DEFAULT_IDLE_TIMEOUT_MINUTES: f64 = 5.0;
/// How long a capacity error makes a type unavailable, by default.
pub const DEFAULT_UNAVAILABLE_TTL_S: i64 = 180;

/// One entry of `available_node_types`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTypeConfig {
    /// Type name (the map key).
    pub name: String,
    /// Resources a node of this type offers.
    pub resources: ResourceMap,
    /// Static labels of nodes of this type.
    pub labels: Vec<(String, String)>,
    /// Minimum number of worker nodes.
    pub min_workers: u64,
    /// Maximum number of worker nodes, `None` for no cap.
    pub max_workers: Option<u64>,
    /// Idle timeout overriding the global one.
    pub idle_timeout_s: Option<f64>,
    /// Tie-break priority (higher wins exact score ties).
    pub priority: i64,
    /// The cloud-specific `node_config`, kept verbatim.
    pub node_config: Value,
    /// Hash of `node_config` (hex SHA-1 of its canonical JSON), used to find outdated nodes.
    pub launch_config_hash: String,
    /// Several hosts per cloud instance, each running its own Ray node under the
    /// instance's id (a multi-host Cloud TPU slice); `None`: one host. Set by the
    /// provider that launches such instances, never by the YAML.
    pub hosts: Option<MultiHost>,
}

/// A node type whose one cloud instance is several hosts, each a Ray node with the
/// instance's cloud id: the instance is one unit. Its first host carries
/// `first_host_only` (Ray's `TPU-<type>-head`) and stands for the instance in the
/// scheduler; the instance is idle only when every host is, and stopping it drains every
/// host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiHost {
    /// Hosts per instance (2 or more).
    pub count: u32,
    /// Resources of the node type only the first host (worker 0) starts with; the other
    /// hosts start with the type's resources without them.
    pub first_host_only: Vec<String>,
}

/// A validated Ray cluster config.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// `cluster_name`.
    pub cluster_name: String,
    /// Global `max_workers` (head excluded); `None` for no cap. Ray's default (2) for a cloud
    /// YAML that leaves it out ([`ray_defaults`]).
    pub max_workers: Option<u64>,
    /// `upscaling_speed` (default 1.0 as in Ray v1 configs; v2 treats 0 as "one per type").
    pub upscaling_speed: Option<f64>,
    /// `idle_timeout_minutes` (default 5).
    pub idle_timeout_minutes: f64,
    /// `head_node_type`.
    pub head_node_type: Option<String>,
    /// `provider.type`.
    pub provider_type: String,
    /// `provider.disable_launch_config_check` (default true, as in Ray v2).
    pub disable_launch_config_check: bool,
    /// Node types in file order (the order breaks ties).
    pub node_types: Vec<NodeTypeConfig>,
    /// Expander settings from the `rayscale:` extension block (default: Ray's choice).
    pub expander: ExpanderSettings,
    /// `rayscale.unavailable_type_ttl_s`: how long a capacity error makes a node type
    /// unavailable (default 180 s).
    pub unavailable_type_ttl_s: i64,
    /// `rayscale.preemption` (default: off).
    pub preemption: PreemptionSettings,
    /// The operator's limits of the `rayscale:` block (default: none).
    pub limits: limits::Limits,
    /// `rayscale.install`: how a head without `rayscale` installs it at boot.
    pub install: install::InstallSettings,
    /// `rayscale.gangs`: atomic placement groups (default: off, Ray's behaviour).
    pub gangs: Option<gangs::Gangs>,
    /// The whole document as given.
    pub raw: Value,
    /// Where workers fetch `file_mounts` (the head's `rayscale run` sets it when it
    /// serves them; never from the YAML): see [`mounts`].
    pub mounts_source: Option<mounts::MountsSource>,
    /// `node_config` members the head's launch alone takes, under its type's own (which
    /// win): Ray's internal `head_node`, where `ray up`'s AWS bootstrap puts the head's IAM
    /// instance profile so that workers of the head's type do not get it. Set by `rayscale
    /// up`'s bootstrap; never read from the YAML (Ray's schema has no such key).
    pub head_node: serde_json::Map<String, Value>,
}

impl ClusterConfig {
    /// Parses YAML (or JSON) text. `origin` names the source in errors.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Self, CoreError> {
        let v = parse_yaml(text, origin)?;
        Self::from_value(&v, "")
    }

    /// This config with its document replaced by `raw` (what a bootstrap or a fill-in
    /// wrote), validated again; what the process set and the YAML never holds
    /// ([`ClusterConfig::head_node`], [`ClusterConfig::mounts_source`]) is kept.
    pub fn with_raw(&self, raw: &Value) -> Result<Self, CoreError> {
        let mut out = Self::from_value(raw, "")?;
        out.head_node = self.head_node.clone();
        out.mounts_source = self.mounts_source.clone();
        // What a provider set on a type (not in the YAML) stays on it.
        for t in &mut out.node_types {
            t.hosts = self.node_type(&t.name).and_then(|o| o.hosts.clone());
        }
        Ok(out)
    }

    /// Validates and extracts a config from a parsed document; `path` prefixes error paths.
    /// The top-level keys a cloud's YAML leaves out are first filled from Ray's defaults
    /// for that cloud, as Ray's `prepare_config` fills them ([`ray_defaults`]); the result
    /// is [`ClusterConfig::raw`].
    pub fn from_value(v: &Value, path: &str) -> Result<Self, CoreError> {
        match ray_defaults::fill(v, path) {
            Some(filled) => Self::from_filled(&filled, path),
            None => Self::from_filled(v, path),
        }
    }

    fn from_filled(v: &Value, path: &str) -> Result<Self, CoreError> {
        schema::validate(v, &schema::Node::Object(&schema::CLUSTER), path)?;
        // After the schema check, the shapes below are known to be right.
        let obj = v
            .as_object()
            .ok_or_else(|| CoreError::invalid(path, "expected a mapping"))?;
        let get = |k: &str| obj.get(k);
        let cluster_name = get("cluster_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let max_workers = get("max_workers").and_then(Value::as_f64).map(|f| f as u64);
        let upscaling_speed = get("upscaling_speed").and_then(Value::as_f64);
        let idle_timeout_minutes = get("idle_timeout_minutes")
            .and_then(Value::as_f64)
            .unwrap_or(DEFAULT_IDLE_TIMEOUT_MINUTES);
        let provider = get("provider").and_then(Value::as_object);
        let provider_type = provider
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // Ray fills a missing `head_node_type` from the cloud's defaults.yaml
        // (`fillout_defaults`): its head type's name.
        let default_head = match get("head_node_type") {
            None => ray_defaults::head_type(&provider_type),
            Some(_) => None,
        };
        let head_node_type = get("head_node_type")
            .and_then(Value::as_str)
            .or(default_head)
            .map(str::to_string);
        if get("min_workers").is_some() {
            tracing::warn!(
                "{}: a top-level min_workers is dropped, as Ray drops it (give each node \
                 type its own min_workers in available_node_types)",
                join(path, "min_workers")
            );
        }
        for legacy in ["head_node", "worker_nodes"] {
            match get(legacy) {
                None => {}
                Some(Value::Null) => {}
                Some(Value::Object(m)) if m.is_empty() => {
                    tracing::warn!(
                        "{}: an empty legacy field, dropped (as Ray 2.x drops it)",
                        join(path, legacy)
                    );
                }
                Some(_) => {
                    return Err(CoreError::invalid(
                        join(path, legacy),
                        "a Ray 1.x field Ray 2.x no longer reads: describe the node types in \
                         available_node_types and name the head's in head_node_type",
                    ));
                }
            }
        }
        let disable_launch_config_check =
            match provider.and_then(|p| p.get("disable_launch_config_check")) {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(CoreError::invalid(
                        join(&join(path, "provider"), "disable_launch_config_check"),
                        format!("expected a boolean, got {}", describe(other)),
                    ));
                }
            };

        let types_path = join(path, "available_node_types");
        let mut node_types = Vec::new();
        if let Some(types) = get("available_node_types").and_then(Value::as_object) {
            for (name, t) in types {
                let tpath = join(&types_path, name);
                node_types.push(node_type_from_value(
                    name,
                    t,
                    &tpath,
                    max_workers,
                    head_node_type.as_deref() == Some(name.as_str()),
                )?);
            }
            let auth = launch_auth_here(get("auth"));
            for t in &mut node_types {
                t.launch_config_hash = launch_config_hash(&t.node_config, &auth);
            }
            // Ray's own checks after the schema (`validate_config`).
            match &head_node_type {
                None => {
                    return Err(CoreError::invalid(
                        join(path, "head_node_type"),
                        "required when available_node_types is set",
                    ));
                }
                Some(h) if !types.contains_key(h) => {
                    let why = match default_head {
                        Some(_) => format!(
                            "not set, so Ray's default for {provider_type}, {h:?}, which is \
                             not one of available_node_types: name the head's type"
                        ),
                        None => format!("{h:?} is not one of available_node_types"),
                    };
                    return Err(CoreError::invalid(join(path, "head_node_type"), why));
                }
                Some(_) => {}
            }
            if let Some(max) = max_workers {
                // Each type's min is bounded (MAX_MIN_WORKERS), so the sum cannot overflow.
                let sum: u64 = node_types
                    .iter()
                    .fold(0u64, |a, t| a.saturating_add(t.min_workers));
                if sum > max {
                    return Err(CoreError::invalid(
                        join(path, "max_workers"),
                        format!(
                            "{max} is smaller than the sum of min_workers of all node types ({sum})"
                        ),
                    ));
                }
            }
            // After Ray's checks: a worker type's min above its own max (the head type's
            // counts are not a worker's, as in Ray).
            for t in &node_types {
                if head_node_type.as_deref() != Some(t.name.as_str())
                    && let Some(max) = t.max_workers
                    && t.min_workers > max
                {
                    return Err(CoreError::invalid(
                        join(&join(&types_path, &t.name), "min_workers"),
                        format!(
                            "{} is more than the type's max_workers ({max})",
                            t.min_workers
                        ),
                    ));
                }
            }
        }

        let type_names: Vec<String> = node_types.iter().map(|t| t.name.clone()).collect();
        let expander = ExpanderSettings::from_rayscale_block(
            get("rayscale"),
            &join(path, "rayscale"),
            &type_names,
        )?;
        let ttl_path = join(&join(path, "rayscale"), "unavailable_type_ttl_s");
        let unavailable_type_ttl_s =
            match get("rayscale").and_then(|r| r.get("unavailable_type_ttl_s")) {
                None | Some(Value::Null) => DEFAULT_UNAVAILABLE_TTL_S,
                Some(x) => x
                    .as_u64()
                    .and_then(|n| i64::try_from(n).ok())
                    .ok_or_else(|| {
                        CoreError::invalid(
                            &ttl_path,
                            format!(
                                "expected a whole number of seconds >= 0, got {}",
                                describe(x)
                            ),
                        )
                    })?,
            };
        let preemption = PreemptionSettings::from_value(
            get("rayscale").and_then(|r| r.get("preemption")),
            &join(&join(path, "rayscale"), "preemption"),
        )?;
        let install = install::InstallSettings::from_value(
            get("rayscale").and_then(|r| r.get("install")),
            &join(&join(path, "rayscale"), "install"),
        )?;
        let gangs = gangs::Gangs::from_value(
            get("rayscale").and_then(|r| r.get("gangs")),
            &join(&join(path, "rayscale"), "gangs"),
        )?;
        let priced: Vec<String> = expander.prices.iter().map(|(t, _)| t.clone()).collect();
        let limits = limits::Limits::from_block(
            get("rayscale"),
            &join(path, "rayscale"),
            &type_names,
            &priced,
        )?;
        if limits.autostop_minutes.is_some() && provider_type == "kuberay" {
            return Err(CoreError::invalid(
                join(&join(path, "rayscale"), "autostop_minutes"),
                "not on KubeRay: the KubeRay operator owns the RayCluster (scale it to zero \
                 or delete it there)",
            ));
        }
        Ok(ClusterConfig {
            expander,
            unavailable_type_ttl_s,
            preemption,
            limits,
            install,
            gangs,
            cluster_name,
            max_workers,
            upscaling_speed,
            idle_timeout_minutes,
            head_node_type,
            provider_type,
            disable_launch_config_check,
            node_types,
            raw: v.clone(),
            mounts_source: None,
            head_node: serde_json::Map::new(),
        })
    }

    /// The node type called `name`.
    pub fn node_type(&self, name: &str) -> Option<&NodeTypeConfig> {
        self.node_types.iter().find(|t| t.name == name)
    }

    /// The head's `ray-launch-config` tag, as `ray up` computes it: the head type's
    /// `node_config` laid over [`ClusterConfig::head_node`] (what the bootstrap gave the
    /// head alone), hashed with `auth` ([`launch_config_hash`]). Without `head_node` it is
    /// the head type's own hash; `None` without a head type.
    pub fn head_launch_hash(&self) -> Option<String> {
        let t = self.node_type(self.head_node_type.as_deref()?)?;
        if self.head_node.is_empty() {
            return Some(t.launch_config_hash.clone());
        }
        let mut merged = self.head_node.clone();
        if let Some(nc) = t.node_config.as_object() {
            merged.extend(nc.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let auth = launch_auth_here(self.raw.get("auth"));
        Some(launch_config_hash(&Value::Object(merged), &auth))
    }

    /// The global idle timeout in seconds.
    pub fn idle_timeout_s(&self) -> f64 {
        self.idle_timeout_minutes * 60.0
    }

    /// Keys of Ray's schema this config sets that rayscale does not act on with its
    /// provider, one line each naming the key and what to do instead: `up` and `run` say
    /// them at start, so nothing is dropped silently. Ray's v1 providers (through the
    /// adapter) run Ray's own node updater, which acts on them all. On AWS, GCP and Azure
    /// `rayscale up` copies the mounts to the head and the head's `rayscale run` serves
    /// them to the workers it boots ([`mounts`]), and again when they change with
    /// `file_mounts_sync_continuously`.
    pub fn keys_not_acted_on(&self) -> Vec<String> {
        const V1: &[&str] = &["local", "vsphere", "aliyun", "external", "fake_multinode"];
        const BOOTED: &[&str] = &["aws", "gcp", "azure"];
        if V1.contains(&self.provider_type.as_str()) {
            return Vec::new();
        }
        let set = |k: &str| match self.raw.get(k) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Object(m)) => !m.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if BOOTED.contains(&self.provider_type.as_str()) {
            // With `file_mounts_sync_continuously`, each worker keeps fetching the head's
            // copies when they change (the boot script's sync loop).
            return Vec::new();
        }
        [
            "file_mounts",
            "cluster_synced_files",
            "file_mounts_sync_continuously",
            "rsync_exclude",
            "rsync_filter",
        ]
        .into_iter()
        .filter(|k| set(k))
        .map(|k| {
            format!(
                "{k}: not acted on by rayscale with provider {:?}: nothing is copied to the \
                 nodes (Ray's v1 providers' node updater copies it); put the files in the \
                 image, or fetch them in setup_commands",
                self.provider_type
            )
        })
        .collect()
    }
}

fn node_type_from_value(
    name: &str,
    t: &Value,
    path: &str,
    global_max: Option<u64>,
    is_head: bool,
) -> Result<NodeTypeConfig, CoreError> {
    let obj = t.as_object().ok_or_else(|| {
        CoreError::invalid(path, format!("expected a mapping, got {}", describe(t)))
    })?;
    let resources = match obj.get("resources").and_then(Value::as_object) {
        Some(m) => ResourceMap::from_f64_pairs(
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or_default())),
        ),
        None => ResourceMap::default(),
    };
    let labels = obj
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let as_int = |k: &str| obj.get(k).and_then(Value::as_f64).map(|f| f as i64);
    let min_workers = as_int("min_workers").unwrap_or(0);
    if min_workers < 0 {
        return Err(CoreError::invalid(
            join(path, "min_workers"),
            "must not be negative",
        ));
    }
    if min_workers > MAX_MIN_WORKERS {
        return Err(CoreError::invalid(
            join(path, "min_workers"),
            format!("{min_workers} is more than rayscale keeps of one type ({MAX_MIN_WORKERS})"),
        ));
    }
    let max_workers = match as_int("max_workers") {
        Some(m) if m < 0 => {
            return Err(CoreError::invalid(
                join(path, "max_workers"),
                "must not be negative",
            ));
        }
        Some(m) => Some(m as u64),
        None if is_head => Some(0),
        None => global_max,
    };

    // Python's ints have no bound; a priority past 64 bits would be rounded or clamped
    // here and tie with its neighbours, so it is refused instead.
    let priority = match obj.get("priority") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_f64().filter(|f| f.abs() < 9.0e15).map(|f| f as i64))
            .ok_or_else(|| {
                CoreError::invalid(
                    join(path, "priority"),
                    format!(
                        "{v} is not an integer rayscale orders exactly (a 64-bit one; \
                         priorities only compare, so smaller numbers in the same order do)"
                    ),
                )
            })?,
    };
    let node_config = obj
        .get("node_config")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    Ok(NodeTypeConfig {
        name: name.to_string(),
        resources,
        labels,
        min_workers: min_workers as u64,
        max_workers,
        idle_timeout_s: obj.get("idle_timeout_s").and_then(Value::as_f64),
        priority,
        // Set with the config's `auth` once every type is read.
        launch_config_hash: String::new(),
        node_config,
        hosts: None,
    })
}

/// The most workers of one type `min_workers` may ask for: far above any real cluster,
/// low enough that keeping them is bounded work (a typo such as 2000000000 is refused at
/// load instead of running the process out of memory).
pub const MAX_MIN_WORKERS: i64 = 100_000;

/// Ray's launch hash of a node type (`hash_launch_conf`): the SHA-256 of Python's
/// `json.dumps([node_config, auth], sort_keys=True)`, in lower-case base32hex without
/// padding (52 characters, a valid GCP label value). `auth` is [`launch_hash_auth`]'s: the
/// SSH keys' text in place of their paths, as Ray hashes it, so the `ray-launch-config`
/// tag `rayscale up` puts on a head is the one `ray up` expects of the same YAML (and Ray
/// does not relaunch it), and a worker's is the one Ray's autoscaler gives it.
pub fn launch_config_hash(node_config: &Value, auth: &Value) -> String {
    use sha2::Digest as _;
    let mut s = String::from("[");
    canonical_json::python_json_spaced(node_config, &mut s);
    s.push_str(", ");
    canonical_json::python_json_spaced(auth, &mut s);
    s.push(']');
    base32hex_lower(&sha2::Sha256::digest(s.as_bytes()))
}

/// RFC 4648's base32 with the extended hex alphabet, lower case, no padding (Ray's
/// `base32hex`).
pub(crate) fn base32hex_lower(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((acc >> bits) & 31) as usize]));
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// [`launch_hash_auth`] with `~` as this process's HOME: what a config load and
/// [`ClusterConfig::head_launch_hash`] hash with.
fn launch_auth_here(auth: Option<&Value>) -> Value {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    launch_hash_auth(auth, home.as_deref())
}

/// The `auth` Ray hashes a launch config with: `auth` (an empty mapping when absent) with
/// `ssh_private_key` and `ssh_public_key` each replaced by its file's text, as Ray's
/// `hash_launch_conf` reads it (`~` is `home`; text mode, so `\r\n` reads as `\n`). A key
/// this machine cannot read (the head reading a config whose key stayed on the machine
/// that ran `up`) keeps its path: Ray would stop there; rayscale's hash stays the same
/// from one load to the next on that machine, which is all the head compares.
pub fn launch_hash_auth(auth: Option<&Value>, home: Option<&std::path::Path>) -> Value {
    let mut auth = match auth {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    for k in ["ssh_private_key", "ssh_public_key"] {
        let Some(path) = auth.get(k).and_then(Value::as_str) else {
            continue;
        };
        let file = match home {
            Some(h) => mounts::expand_home(path, h),
            None => std::path::PathBuf::from(path),
        };
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let text = text.replace("\r\n", "\n").replace('\r', "\n");
                auth.insert(k.to_string(), Value::String(text));
            }
            Err(e) => tracing::debug!(
                "auth.{k}: {} is not readable here ({e}); the launch hash takes its path",
                file.display()
            ),
        }
    }
    Value::Object(auth)
}

/// Parses YAML (a superset of JSON) into a JSON value, keeping mapping order.
pub fn parse_yaml(text: &str, origin: &str) -> Result<Value, CoreError> {
    // JSON is YAML too, but a JSON parser reads it several times faster.
    if text.trim_start().starts_with('{') {
        return serde_json::from_str::<Value>(text).map_err(|e| CoreError::Parse {
            origin: origin.to_string(),
            message: e.to_string().replace('\n', " "),
        });
    }
    // Most configs and scenarios are plain YAML that the fast reader takes; the rest (and
    // every malformed document, with libyaml's error) goes to libyaml.
    if let Some(v) = fast_yaml::parse(text) {
        return Ok(v);
    }
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| CoreError::Parse {
        origin: origin.to_string(),
        message: e.to_string().replace('\n', " "),
    })
}

#[cfg(test)]
mod tests;
