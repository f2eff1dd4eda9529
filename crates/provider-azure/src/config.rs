//! The `provider:` block of a Ray Azure cluster YAML and each node type's `node_config`
//! (`azure_arm_parameters`, the parameters of Ray's VM template, and `tags`), checked at
//! load. rayscale creates each VM directly (no ARM template), so it reads the template's
//! parameters and maps them itself (`mapping`); a parameter it does not carry, or a
//! missing size, image, key or subnet, is an error naming its path, never a silently
//! different VM.

use std::collections::BTreeMap;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::LaunchHashes;
use serde_json::{Map, Value};

use crate::AzureError;

/// Ray's `provider.cache_stopped_nodes` default on Azure.
pub const DEFAULT_CACHE_STOPPED_NODES: bool = true;

/// The environment variable naming the subscription when `provider.subscription_id` is
/// absent (the Azure SDKs' and Terraform's convention; Ray asks the Azure CLI instead).
pub const SUBSCRIPTION_ENV: &str = "AZURE_SUBSCRIPTION_ID";

/// Where VMs go within the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zones {
    /// No zone pinned (Ray's `none`/`null`; and `auto`, where Ray asks the SKU's zones:
    /// rayscale leaves the choice to Azure, regional).
    Any,
    /// These zones, spread over by VM name.
    List(Vec<String>),
}

/// The Azure provider's view of a cluster config.
#[derive(Debug, Clone, PartialEq)]
pub struct AzureConfig {
    /// `cluster_name` (the `ray-cluster-name` tag).
    pub cluster_name: String,
    /// `provider.subscription_id` (or `AZURE_SUBSCRIPTION_ID`).
    pub subscription_id: String,
    /// `provider.resource_group`: where every VM is made and listed.
    pub resource_group: String,
    /// `provider.location`: the region.
    pub location: String,
    /// `provider.availability_zone`.
    pub zones: Zones,
    /// `provider.cache_stopped_nodes`: deallocate workers instead of deleting them, and
    /// start matching deallocated ones before making new ones.
    pub cache_stopped_nodes: bool,
    /// `provider.use_internal_ips`: no public address on workers (and the head unless
    /// `use_external_head_ip`).
    pub use_internal_ips: bool,
    /// `provider.use_external_head_ip`.
    pub use_external_head_ip: bool,
    /// `provider.subnet`: the subnet id every NIC joins (Ray's bootstrap writes it).
    pub subnet: String,
    /// `provider.nsg`: the network security group id of each NIC, if any.
    pub nsg: Option<String>,
    /// `provider.msi`: the user-assigned identity id every VM carries, if any.
    pub msi: Option<String>,
    /// The head node type, if the config names one.
    pub head_node_type: Option<String>,
    /// Each node type's `node_config`, by type name.
    pub node_types: BTreeMap<String, NodeConfig>,
    /// Each node type's `ray-launch-config` tag, and the head's.
    pub launch_hashes: LaunchHashes,
}

/// Provider keys Ray's Azure provider reads and rayscale does too.
const PROVIDER_KEYS: &[&str] = &[
    "type",
    "location",
    "resource_group",
    "subscription_id",
    "availability_zone",
    "cache_stopped_nodes",
    "use_internal_ips",
    "use_external_head_ip",
    "subnet",
    "nsg",
    "msi",
];

/// Provider keys of Ray's schema that change nothing here: the inputs of the bootstrap
/// (`bootstrap`, run by `up`, reads them; this reads what it made: `subnet`, `nsg`,
/// `msi`), node-updater
/// settings (rayscale starts Ray at boot, not over SSH), and what `ray up` adds.
const IGNORED_PROVIDER_KEYS: &[&str] = &[
    "unique_id",
    "subnet_mask",
    "msi_name",
    "msi_resource_group",
    "tags",
    "disable_node_updaters",
    "foreground_node_launch",
    "_config_cache_path",
];

/// `azure_arm_parameters` keys of Ray's VM template (`azure-vm-template.json`) that
/// rayscale maps (`osDiskSizeGB` is accepted beside the template's `osDiskSize`).
const ARM_KEYS: &[&str] = &[
    "vmSize",
    "imagePublisher",
    "imageOffer",
    "imageSku",
    "imageVersion",
    "imageId",
    "osDiskSize",
    "osDiskSizeGB",
    "priority",
    "evictionPolicy",
    "billingProfile",
    "enableAcceleratedNetworking",
    "adminUsername",
    "publicKey",
    "availability_zone",
    "provisionPublicIp",
];

/// Template parameters Ray's provider sets itself (from the provider block and the
/// launch), never the YAML.
const ARM_SET_BY_PROVIDER: &[&str] = &[
    "vmName", "vmTags", "vmCount", "msi", "nsg", "subnet", "zones",
];

/// The image a VM boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A marketplace image.
    Marketplace {
        /// `imagePublisher`.
        publisher: String,
        /// `imageOffer`.
        offer: String,
        /// `imageSku`.
        sku: String,
        /// `imageVersion` (default `latest`).
        version: String,
    },
    /// `imageId`: a custom or gallery image's resource id.
    Id(String),
}

/// A node type's `node_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// `vmSize`.
    pub vm_size: String,
    /// The image.
    pub image: Image,
    /// `osDiskSize` (GB); `None` = the image's.
    pub os_disk_size_gb: Option<i32>,
    /// `priority`: `Regular`, `Low` or `Spot`.
    pub priority: Option<String>,
    /// `evictionPolicy` of a Spot or Low VM (default `Delete`, as Ray's template).
    pub eviction_policy: Option<String>,
    /// `billingProfile.maxPrice` of a Spot VM (-1: up to the on-demand price).
    pub max_price: Option<f64>,
    /// `enableAcceleratedNetworking`.
    pub accelerated_networking: bool,
    /// `adminUsername` (default `auth.ssh_user`, `ubuntu` when the YAML leaves `auth` out
    /// as Ray's defaults have it, else `ray`).
    pub admin_username: String,
    /// `publicKey` (default: the file `auth.ssh_public_key`).
    pub public_key: String,
    /// The type's `availability_zone` over the provider's.
    pub zones: Option<Zones>,
    /// `provisionPublicIp`, over the provider's `use_internal_ips`.
    pub public_ip: Option<bool>,
    /// `tags`: the user's VM tags (Ray's own go over them).
    pub tags: BTreeMap<String, String>,
}

impl NodeConfig {
    /// Whether the VM is Spot (or the older Low priority).
    pub fn is_spot(&self) -> bool {
        matches!(self.priority.as_deref(), Some("Spot" | "Low"))
    }
}

/// Reads `availability_zone` (Ray's spelling: `"1,2,3"`, `auto`, `none`, `null`).
fn parse_zones(v: &Value, path: &str) -> Result<Zones, AzureError> {
    let text = match v {
        Value::Null => return Ok(Zones::Any),
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(AzureError::config(
                path,
                format!("must be zones like \"1,2,3\", \"auto\" or \"none\", got {other}"),
            ));
        }
    };
    match text.to_ascii_lowercase().as_str() {
        "" | "auto" | "none" | "null" => Ok(Zones::Any),
        _ => {
            let zones: Vec<String> = text
                .split(',')
                .map(|z| z.trim().to_string())
                .filter(|z| !z.is_empty())
                .collect();
            if let Some(bad) = zones
                .iter()
                .find(|z| !z.chars().all(|c| c.is_ascii_digit()))
            {
                return Err(AzureError::config(
                    path,
                    format!("{bad:?} is not a zone number (zones are \"1\", \"2\", \"3\")"),
                ));
            }
            Ok(Zones::List(zones))
        }
    }
}

impl AzureConfig {
    /// Reads the Azure view of `config`; `env_subscription` stands in for an absent
    /// `provider.subscription_id`. Errors name the offending path in one line.
    pub fn from_cluster(
        config: &ClusterConfig,
        env_subscription: Option<&str>,
    ) -> Result<Self, AzureError> {
        let provider = config
            .raw
            .get("provider")
            .and_then(Value::as_object)
            .ok_or_else(|| AzureError::config("provider", "must be a mapping"))?;
        rayscale_core::provider::cloud::ProviderKeys {
            cloud: "Azure",
            known: PROVIDER_KEYS,
            ignored: IGNORED_PROVIDER_KEYS,
            refused: &[],
        }
        .check(provider)
        .map_err(|(path, message)| AzureError::config(path, message))?;
        let text = |key: &str, what: &str| -> Result<Option<String>, AzureError> {
            match provider.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(v) => Err(AzureError::config(
                    format!("provider.{key}"),
                    format!("must be {what}, got {v}"),
                )),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool, AzureError> {
            match provider.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(AzureError::config(
                    format!("provider.{key}"),
                    format!("must be true or false, got {v}"),
                )),
            }
        };
        let location = text("location", "a region name")?.ok_or_else(|| {
            AzureError::config(
                "provider.location",
                "is required: the region (e.g. westus2)",
            )
        })?;
        let resource_group = text("resource_group", "a resource group name")?.ok_or_else(|| {
            AzureError::config(
                "provider.resource_group",
                "is required: the resource group the VMs are made in",
            )
        })?;
        let subscription_id = match text("subscription_id", "a subscription id")? {
            Some(s) => s,
            None => env_subscription
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    AzureError::config(
                        "provider.subscription_id",
                        format!("is required (or {SUBSCRIPTION_ENV} in the environment)"),
                    )
                })?,
        };
        let subnet = text("subnet", "a subnet resource id")?.ok_or_else(|| {
            AzureError::config(
                "provider.subnet",
                "is required: the id of the subnet the VMs join (/subscriptions/../virtualNetworks/V/subnets/S); \
                 rayscale up's bootstrap makes the network and writes it, as ray up's does (see docs/src/platforms/azure.md)",
            )
        })?;
        if !subnet.contains("/subnets/") {
            return Err(AzureError::config(
                "provider.subnet",
                format!("{subnet:?} is not a subnet resource id (.../virtualNetworks/V/subnets/S)"),
            ));
        }
        let zones = match provider.get("availability_zone") {
            None => Zones::Any,
            Some(v) => parse_zones(v, "provider.availability_zone")?,
        };
        let auth = config.raw.get("auth");
        let ssh_user = auth
            .and_then(|a| a.get("ssh_user"))
            .and_then(Value::as_str)
            .unwrap_or("ray")
            .to_string();
        let key_file = auth
            .and_then(|a| a.get("ssh_public_key"))
            .and_then(Value::as_str);
        let mut node_types = BTreeMap::new();
        for t in &config.node_types {
            let path = format!("available_node_types.{}.node_config", t.name);
            node_types.insert(
                t.name.clone(),
                NodeConfig::parse(&t.node_config, &path, &ssh_user, key_file)?,
            );
        }
        Ok(AzureConfig {
            cluster_name: config.cluster_name.clone(),
            subscription_id,
            resource_group,
            location,
            zones,
            cache_stopped_nodes: flag("cache_stopped_nodes", DEFAULT_CACHE_STOPPED_NODES)?,
            use_internal_ips: flag("use_internal_ips", false)?,
            use_external_head_ip: flag("use_external_head_ip", false)?,
            subnet,
            nsg: text("nsg", "a network security group id")?,
            msi: text("msi", "a user-assigned identity id")?,
            head_node_type: config.head_node_type.clone(),
            node_types,
            launch_hashes: LaunchHashes::of(config),
        })
    }
}

/// `~/x` with the home directory.
fn expand_home(p: &str) -> std::path::PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(p),
    }
}

impl NodeConfig {
    /// Checks one `node_config` (at `path`): `azure_arm_parameters` with a size, an image
    /// and an SSH key (`publicKey`, else the file `key_file`), and optional `tags`.
    pub fn parse(
        v: &Value,
        path: &str,
        ssh_user: &str,
        key_file: Option<&str>,
    ) -> Result<Self, AzureError> {
        let map = match v {
            Value::Object(m) => m.clone(),
            other => {
                return Err(AzureError::config(
                    path,
                    format!("must be a mapping with azure_arm_parameters, got {other}"),
                ));
            }
        };
        for key in map.keys() {
            if key != "azure_arm_parameters" && key != "tags" {
                return Err(AzureError::config(
                    format!("{path}.{key}"),
                    "not a key of an Azure node config (azure_arm_parameters, tags)",
                ));
            }
        }
        let ppath = format!("{path}.azure_arm_parameters");
        let p: Map<String, Value> = match map.get("azure_arm_parameters") {
            Some(Value::Object(m)) => m.clone(),
            None => {
                return Err(AzureError::config(
                    ppath,
                    "is required: the VM's parameters (vmSize, the image, ...)",
                ));
            }
            Some(other) => {
                return Err(AzureError::config(
                    ppath,
                    format!("must be a mapping, got {other}"),
                ));
            }
        };
        for key in p.keys() {
            if ARM_SET_BY_PROVIDER.contains(&key.as_str()) {
                return Err(AzureError::config(
                    format!("{ppath}.{key}"),
                    "is set by the provider (from the provider block and the launch), not per node type",
                ));
            }
            if !ARM_KEYS.contains(&key.as_str()) {
                return Err(AzureError::config(
                    format!("{ppath}.{key}"),
                    format!(
                        "not a parameter rayscale maps (Ray's VM template: {})",
                        ARM_KEYS.join(", ")
                    ),
                ));
            }
        }
        let text = |key: &str| -> Result<Option<String>, AzureError> {
            match p.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(Value::String(_)) => Ok(None),
                Some(v) => Err(AzureError::config(
                    format!("{ppath}.{key}"),
                    format!("must be a string, got {v}"),
                )),
            }
        };
        let flag = |key: &str| -> Result<Option<bool>, AzureError> {
            match p.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(v) => Err(AzureError::config(
                    format!("{ppath}.{key}"),
                    format!("must be true or false, got {v}"),
                )),
            }
        };
        let vm_size = text("vmSize")?.ok_or_else(|| {
            AzureError::config(
                format!("{ppath}.vmSize"),
                "is required: the VM size (e.g. Standard_D2s_v3)",
            )
        })?;
        let image = match text("imageId")? {
            Some(id) => Image::Id(id),
            None => {
                let need = |key: &str| {
                    text(key)?.ok_or_else(|| {
                        AzureError::config(
                            format!("{ppath}.{key}"),
                            "is required (imagePublisher, imageOffer and imageSku name a marketplace image; or give imageId)",
                        )
                    })
                };
                Image::Marketplace {
                    publisher: need("imagePublisher")?,
                    offer: need("imageOffer")?,
                    sku: need("imageSku")?,
                    version: text("imageVersion")?.unwrap_or_else(|| "latest".into()),
                }
            }
        };
        let os_disk_size_gb = match p.get("osDiskSize").or_else(|| p.get("osDiskSizeGB")) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_i64() {
                // The template's 0 means the image's size.
                Some(0) => None,
                Some(g) if (1..=4095).contains(&g) => i32::try_from(g).ok(),
                _ => {
                    return Err(AzureError::config(
                        format!("{ppath}.osDiskSize"),
                        format!("must be a size in GB from 1 to 4095, got {n}"),
                    ));
                }
            },
            Some(v) => {
                return Err(AzureError::config(
                    format!("{ppath}.osDiskSize"),
                    format!("must be a size in GB, got {v}"),
                ));
            }
        };
        let priority = text("priority")?;
        if let Some(pr) = &priority
            && !["Regular", "Low", "Spot"].contains(&pr.as_str())
        {
            return Err(AzureError::config(
                format!("{ppath}.priority"),
                format!("{pr:?} is not a priority (Regular, Low, Spot)"),
            ));
        }
        let spot = matches!(priority.as_deref(), Some("Spot" | "Low"));
        let eviction_policy = text("evictionPolicy")?;
        if let Some(e) = &eviction_policy
            && !["Delete", "Deallocate"].contains(&e.as_str())
        {
            return Err(AzureError::config(
                format!("{ppath}.evictionPolicy"),
                format!("{e:?} is not an eviction policy (Delete, Deallocate)"),
            ));
        }
        let max_price = match p.get("billingProfile") {
            None | Some(Value::Null) => None,
            Some(Value::Object(b)) => {
                for k in b.keys() {
                    if k != "maxPrice" {
                        return Err(AzureError::config(
                            format!("{ppath}.billingProfile.{k}"),
                            "not a field of billingProfile (maxPrice)",
                        ));
                    }
                }
                match b.get("maxPrice") {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(n)) => n.as_f64(),
                    Some(v) => {
                        return Err(AzureError::config(
                            format!("{ppath}.billingProfile.maxPrice"),
                            format!("must be a number (-1: up to the on-demand price), got {v}"),
                        ));
                    }
                }
            }
            Some(v) => {
                return Err(AzureError::config(
                    format!("{ppath}.billingProfile"),
                    format!("must be a mapping {{maxPrice: N}}, got {v}"),
                ));
            }
        };
        if !spot && (max_price.is_some() || eviction_policy.is_some()) {
            return Err(AzureError::config(
                format!("{ppath}.priority"),
                "billingProfile and evictionPolicy apply only to priority Spot (or Low)",
            ));
        }
        let public_key = match text("publicKey")? {
            Some(k) => k,
            None => match key_file {
                Some(f) => std::fs::read_to_string(expand_home(f))
                    .map(|s| s.trim().to_string())
                    .map_err(|e| AzureError::config("auth.ssh_public_key", format!("{f}: {e}")))?,
                None => {
                    return Err(AzureError::config(
                        format!("{ppath}.publicKey"),
                        "is required (or auth.ssh_public_key): Azure Linux VMs need an SSH key for adminUsername",
                    ));
                }
            },
        };
        let tags = match map.get("tags") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
                    other => Err(AzureError::config(
                        format!("{path}.tags.{k}"),
                        format!("must be a string, got {other}"),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(AzureError::config(
                    format!("{path}.tags"),
                    format!("must be a mapping of tag names to values, got {v}"),
                ));
            }
        };
        let zones = match p.get("availability_zone") {
            None => None,
            Some(v) => Some(parse_zones(v, &format!("{ppath}.availability_zone"))?),
        };
        Ok(NodeConfig {
            vm_size,
            image,
            os_disk_size_gb,
            priority,
            eviction_policy,
            max_price,
            accelerated_networking: flag("enableAcceleratedNetworking")?.unwrap_or(false),
            admin_username: text("adminUsername")?.unwrap_or_else(|| ssh_user.to_string()),
            public_key,
            zones,
            public_ip: flag("provisionPublicIp")?,
            tags,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> ClusterConfig {
        ClusterConfig::from_yaml_str(yaml, "test.yaml").expect("config loads")
    }

    const SUBNET: &str = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s";

    fn base() -> String {
        format!(
            "cluster_name: demo\nprovider: {{type: azure, location: westus2, resource_group: rg, subscription_id: sub, subnet: {SUBNET}}}\n\
             head_node_type: head\navailable_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2, publicKey: ssh-ed25519 AAAA}}}}}}\n"
        )
    }

    #[test]
    fn reads_ray_provider_and_defaults() {
        let c = AzureConfig::from_cluster(
            &cluster(&format!(
                "{}  w: {{resources: {{CPU: 2}}, node_config: {{tags: {{team: ml}}, azure_arm_parameters: {{vmSize: Standard_D4s_v3, imageId: /subscriptions/s/img, priority: Spot, billingProfile: {{maxPrice: -1}}, osDiskSize: 100, availability_zone: '1,2', publicKey: k}}}}}}\n",
                base()
            )),
            None,
        )
        .expect("loads");
        assert_eq!(c.subscription_id, "sub");
        assert!(c.cache_stopped_nodes, "Ray's Azure default");
        assert_eq!(c.zones, Zones::Any);
        let h = &c.node_types["head"];
        assert_eq!(h.admin_username, "ubuntu", "Ray's default auth");
        assert_eq!(
            h.image,
            Image::Marketplace {
                publisher: "microsoft-dsvm".into(),
                offer: "ubuntu-2204".into(),
                sku: "2204-gen2".into(),
                version: "latest".into()
            }
        );
        let w = &c.node_types["w"];
        assert!(w.is_spot());
        assert_eq!(w.max_price, Some(-1.0));
        assert_eq!(w.os_disk_size_gb, Some(100));
        assert_eq!(w.zones, Some(Zones::List(vec!["1".into(), "2".into()])));
        assert_eq!(w.tags["team"], "ml");
    }

    #[test]
    fn errors_name_their_path() {
        let err = |yaml: String, env: Option<&str>| {
            AzureConfig::from_cluster(&cluster(&yaml), env)
                .expect_err("refused")
                .to_string()
        };
        let e = err(
            format!(
                "{}  t: {{resources: {{}}, node_config: {{azure_arm_parameters: {{vmsize: x}}}}}}\n",
                base()
            ),
            None,
        );
        assert!(
            e.starts_with(
                "available_node_types.t.node_config.azure_arm_parameters.vmsize: not a parameter"
            ),
            "{e}"
        );
        let e = err(
            format!(
                "{}  t: {{resources: {{}}, node_config: {{azure_arm_parameters: {{vmSize: x, imagePublisher: p, imageOffer: o, publicKey: k}}}}}}\n",
                base()
            ),
            None,
        );
        assert!(
            e.starts_with(
                "available_node_types.t.node_config.azure_arm_parameters.imageSku: is required"
            ),
            "{e}"
        );
        let e = err(
            format!(
                "{}  t: {{resources: {{}}, node_config: {{InstanceType: m5}}}}\n",
                base()
            ),
            None,
        );
        assert!(
            e.starts_with("available_node_types.t.node_config.InstanceType: not a key"),
            "{e}"
        );
        let e = err(
            format!(
                "{}  t: {{resources: {{}}, node_config: {{azure_arm_parameters: {{vmSize: x, imageId: i, publicKey: k, evictionPolicy: Deallocate}}}}}}\n",
                base()
            ),
            None,
        );
        assert!(
            e.contains(".azure_arm_parameters.priority: billingProfile and evictionPolicy"),
            "{e}"
        );
        let e = err(base().replace(&format!(", subnet: {SUBNET}"), ""), None);
        assert!(e.starts_with("provider.subnet: is required"), "{e}");
        let e = err(base().replace("subscription_id: sub, ", ""), None);
        assert!(
            e.starts_with("provider.subscription_id: is required"),
            "{e}"
        );
        let ok = AzureConfig::from_cluster(
            &cluster(&base().replace("subscription_id: sub, ", "")),
            Some("env-sub"),
        )
        .expect("from the environment");
        assert_eq!(ok.subscription_id, "env-sub");
        let e = err(
            base().replace(
                "location: westus2, ",
                "location: westus2, availability_zone: east, ",
            ),
            None,
        );
        assert!(
            e.starts_with("provider.availability_zone: \"east\" is not a zone"),
            "{e}"
        );
        let e = err(base().replace(", publicKey: ssh-ed25519 AAAA", ""), None);
        assert!(
            e.starts_with(
                "available_node_types.head.node_config.azure_arm_parameters.publicKey: is required"
            ),
            "{e}"
        );
    }
}
