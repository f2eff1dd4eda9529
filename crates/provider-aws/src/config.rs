//! The `provider:` block of a Ray AWS cluster YAML and each node type's `node_config`
//! (boto3 `create_instances` keys, as Ray passes them), parsed into typed structs at load.
//! A key rayscale does not carry onto RunInstances is an error naming its path, never a
//! silently different instance.

use std::collections::BTreeMap;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::LaunchHashes;
use serde::Deserialize;
use serde_json::Value;

use crate::AwsError;

/// Ray's `provider.cache_stopped_nodes` default on AWS.
pub const DEFAULT_CACHE_STOPPED_NODES: bool = true;

/// The AWS provider's view of a cluster config.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsConfig {
    /// `cluster_name` (the `ray-cluster-name` tag).
    pub cluster_name: String,
    /// `provider.region`; `None` leaves it to the standard chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// `provider.availability_zone`, split at commas, in the user's order.
    pub availability_zones: Vec<String>,
    /// `provider.cache_stopped_nodes`: stop workers instead of terminating them, and
    /// start matching stopped ones before launching new ones.
    pub cache_stopped_nodes: bool,
    /// `provider.use_internal_ips`.
    pub use_internal_ips: bool,
    /// The head node type, if the config names one.
    pub head_node_type: Option<String>,
    /// Each node type's `node_config`, by type name.
    pub node_types: BTreeMap<String, NodeConfig>,
    /// Each node type's `ray-launch-config` tag, and the head's.
    pub launch_hashes: LaunchHashes,
    /// The head's instance profile when its type names none (`ClusterConfig::head_node`'s
    /// `IamInstanceProfile`, from `rayscale up`'s bootstrap): the head's launch alone
    /// takes it.
    pub head_iam_profile: Option<IamProfile>,
    /// `provider.aws_credentials`: the keys every client of this config takes.
    pub credentials: Option<crate::client::StaticKeys>,
    /// `provider.cloudwatch` with an agent config: every node's boot starts the agent.
    pub cloudwatch: Option<crate::cloudwatch::Cloudwatch>,
}

/// Provider keys Ray's AWS provider reads and rayscale does too.
const PROVIDER_KEYS: &[&str] = &[
    "type",
    "region",
    "availability_zone",
    "cache_stopped_nodes",
    "use_internal_ips",
    "security_group",
    "key_pair",
    "cloudwatch",
    "aws_credentials",
];

/// Provider keys of Ray's that rayscale does not act on, with what to do instead: none
/// today (`security_group` and `key_pair` are `rayscale up`'s, see `bootstrap` and
/// `keypair`).
const BOOTSTRAP_KEYS: &[(&str, &str)] = &[];

/// Provider keys of Ray's schema that change nothing for rayscale (it starts Ray at boot,
/// not through node updaters), and `_config_cache_path`, which `ray up` adds to the
/// config it writes to the head (`~/ray_bootstrap_config.yaml`).
const IGNORED_PROVIDER_KEYS: &[&str] = &[
    "disable_node_updaters",
    "foreground_node_launch",
    "_config_cache_path",
];

impl AwsConfig {
    /// Reads the AWS view of `config`. Errors name the offending path in one line.
    pub fn from_cluster(config: &ClusterConfig) -> Result<Self, AwsError> {
        let provider = config
            .raw
            .get("provider")
            .and_then(Value::as_object)
            .ok_or_else(|| AwsError::config("provider", "must be a mapping"))?;
        rayscale_core::provider::cloud::ProviderKeys {
            cloud: "AWS",
            known: PROVIDER_KEYS,
            ignored: IGNORED_PROVIDER_KEYS,
            refused: BOOTSTRAP_KEYS,
        }
        .check(provider)
        .map_err(|(path, message)| AwsError::config(path, message))?;
        crate::bootstrap::check_security_group(config)?;
        crate::keypair::key_name(config)?;
        let region = match provider.get("region") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(v) => {
                return Err(AwsError::config(
                    "provider.region",
                    format!("must be a region name, got {v}"),
                ));
            }
        };
        let availability_zones = match provider.get("availability_zone") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => s
                .split(',')
                .map(str::trim)
                .filter(|z| !z.is_empty())
                .map(str::to_string)
                .collect(),
            Some(v) => {
                return Err(AwsError::config(
                    "provider.availability_zone",
                    format!("must be a comma-separated string of zones, got {v}"),
                ));
            }
        };
        let flag = |key: &str, default: bool| match provider.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(AwsError::config(
                format!("provider.{key}"),
                format!("must be true or false, got {v}"),
            )),
        };
        let mut node_types = BTreeMap::new();
        for t in &config.node_types {
            let path = format!("available_node_types.{}.node_config", t.name);
            node_types.insert(t.name.clone(), NodeConfig::parse(&t.node_config, &path)?);
        }
        let head_iam_profile = match config.head_node.get("IamInstanceProfile") {
            None => None,
            Some(v) => {
                let path = "head_node.IamInstanceProfile";
                let p: IamProfile = serde_json::from_value(v.clone())
                    .map_err(|e| AwsError::config(path, e.to_string()))?;
                if p.arn.is_some() == p.name.is_some() {
                    return Err(AwsError::config(path, "set exactly one of Arn and Name"));
                }
                Some(p)
            }
        };
        Ok(AwsConfig {
            cloudwatch: crate::cloudwatch::agent_of(provider)?,
            credentials: crate::client::StaticKeys::from_provider(provider)?,
            head_iam_profile,
            cluster_name: config.cluster_name.clone(),
            region,
            availability_zones,
            cache_stopped_nodes: flag("cache_stopped_nodes", DEFAULT_CACHE_STOPPED_NODES)?,
            use_internal_ips: flag("use_internal_ips", false)?,
            head_node_type: config.head_node_type.clone(),
            node_types,
            launch_hashes: LaunchHashes::of(config),
        })
    }
}

/// A node type's `node_config`: the RunInstances keys rayscale carries, spelled as boto3
/// spells them. Every other key is refused at load.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct NodeConfig {
    /// `InstanceType`.
    pub instance_type: Option<String>,
    /// `ImageId` (Ray's region default when absent, as Ray's bootstrap does).
    pub image_id: Option<String>,
    /// `SubnetIds`: Ray's key; one is used per call, the next on a capacity error.
    pub subnet_ids: Option<Vec<String>>,
    /// `SubnetId`.
    pub subnet_id: Option<String>,
    /// `SecurityGroupIds`.
    pub security_group_ids: Option<Vec<String>>,
    /// `KeyName`.
    pub key_name: Option<String>,
    /// `IamInstanceProfile`.
    pub iam_instance_profile: Option<IamProfile>,
    /// `BlockDeviceMappings`.
    pub block_device_mappings: Option<Vec<BlockDevice>>,
    /// `InstanceMarketOptions` (spot).
    pub instance_market_options: Option<MarketOptions>,
    /// `Placement`.
    pub placement: Option<PlacementConfig>,
    /// `NetworkInterfaces`.
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// `TagSpecifications` (merged with Ray's tags).
    pub tag_specifications: Option<Vec<TagSpec>>,
    /// `UserData` (plain text; it runs before rayscale's boot script).
    pub user_data: Option<String>,
    /// `MetadataOptions`.
    pub metadata_options: Option<MetadataOptions>,
    /// `EbsOptimized`.
    pub ebs_optimized: Option<bool>,
    /// `CapacityReservationSpecification`.
    pub capacity_reservation_specification: Option<CapacityReservation>,
    /// `LaunchTemplate`.
    pub launch_template: Option<LaunchTemplate>,
    /// Every other RunInstances member the config gives (`CpuOptions`, `Monitoring`, ...),
    /// checked and flattened into EC2 Query form pairs ([`crate::passthrough`]), appended
    /// to RunInstances as they are.
    #[serde(skip)]
    pub passthrough: Vec<(String, String)>,
}

/// `IamInstanceProfile`: by ARN or by name.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct IamProfile {
    /// `Arn`.
    pub arn: Option<String>,
    /// `Name`.
    pub name: Option<String>,
}

/// One of `BlockDeviceMappings`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct BlockDevice {
    /// `DeviceName`.
    pub device_name: Option<String>,
    /// `VirtualName`.
    pub virtual_name: Option<String>,
    /// `NoDevice`.
    pub no_device: Option<String>,
    /// `Ebs`.
    pub ebs: Option<Ebs>,
}

/// `Ebs` of a block device.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Ebs {
    /// `VolumeSize` (GiB).
    pub volume_size: Option<i32>,
    /// `VolumeType` (gp2, gp3, io1, ...).
    pub volume_type: Option<String>,
    /// `DeleteOnTermination`.
    pub delete_on_termination: Option<bool>,
    /// `Iops`.
    pub iops: Option<i32>,
    /// `Throughput`.
    pub throughput: Option<i32>,
    /// `Encrypted`.
    pub encrypted: Option<bool>,
    /// `KmsKeyId`.
    pub kms_key_id: Option<String>,
    /// `SnapshotId`.
    pub snapshot_id: Option<String>,
}

/// `InstanceMarketOptions`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct MarketOptions {
    /// `MarketType` (`spot`).
    pub market_type: Option<String>,
    /// `SpotOptions`.
    pub spot_options: Option<SpotOptions>,
}

/// `SpotOptions`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct SpotOptions {
    /// `MaxPrice`.
    pub max_price: Option<String>,
    /// `SpotInstanceType` (`one-time` / `persistent`).
    pub spot_instance_type: Option<String>,
    /// `InstanceInterruptionBehavior` (`terminate` / `stop` / `hibernate`).
    pub instance_interruption_behavior: Option<String>,
}

/// `Placement`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct PlacementConfig {
    /// `AvailabilityZone`.
    pub availability_zone: Option<String>,
    /// `GroupName` (a placement group).
    pub group_name: Option<String>,
    /// `GroupId`.
    pub group_id: Option<String>,
    /// `Tenancy`.
    pub tenancy: Option<String>,
    /// `PartitionNumber`.
    pub partition_number: Option<i32>,
    /// `HostId`.
    pub host_id: Option<String>,
    /// `Affinity`.
    pub affinity: Option<String>,
}

/// One of `NetworkInterfaces`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct NetworkInterface {
    /// `DeviceIndex`.
    pub device_index: Option<i32>,
    /// `SubnetId`.
    pub subnet_id: Option<String>,
    /// `Groups` (security group ids).
    pub groups: Option<Vec<String>>,
    /// `AssociatePublicIpAddress`.
    pub associate_public_ip_address: Option<bool>,
    /// `DeleteOnTermination`.
    pub delete_on_termination: Option<bool>,
    /// `Description`.
    pub description: Option<String>,
    /// `InterfaceType` (`efa`, ...).
    pub interface_type: Option<String>,
    /// `NetworkCardIndex`.
    pub network_card_index: Option<i32>,
    /// `NetworkInterfaceId`.
    pub network_interface_id: Option<String>,
}

/// One of `TagSpecifications`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct TagSpec {
    /// `ResourceType` (`instance`, `volume`, ...).
    pub resource_type: String,
    /// `Tags`.
    #[serde(default)]
    pub tags: Vec<TagKv>,
}

/// A tag.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct TagKv {
    /// `Key`.
    pub key: String,
    /// `Value`.
    #[serde(default)]
    pub value: String,
}

/// `MetadataOptions`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct MetadataOptions {
    /// `HttpTokens` (`required` for IMDSv2 only).
    pub http_tokens: Option<String>,
    /// `HttpPutResponseHopLimit`.
    pub http_put_response_hop_limit: Option<i32>,
    /// `HttpEndpoint` (`enabled` / `disabled`).
    pub http_endpoint: Option<String>,
    /// `HttpProtocolIpv6`.
    pub http_protocol_ipv6: Option<String>,
    /// `InstanceMetadataTags`.
    pub instance_metadata_tags: Option<String>,
}

/// `CapacityReservationSpecification`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CapacityReservation {
    /// `CapacityReservationPreference` (`open` / `none` / `capacity-reservations-only`).
    pub capacity_reservation_preference: Option<String>,
    /// `CapacityReservationTarget`.
    pub capacity_reservation_target: Option<CapacityReservationTarget>,
}

/// `CapacityReservationTarget`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CapacityReservationTarget {
    /// `CapacityReservationId`.
    pub capacity_reservation_id: Option<String>,
    /// `CapacityReservationResourceGroupArn`.
    pub capacity_reservation_resource_group_arn: Option<String>,
}

/// `LaunchTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct LaunchTemplate {
    /// `LaunchTemplateId`.
    pub launch_template_id: Option<String>,
    /// `LaunchTemplateName`.
    pub launch_template_name: Option<String>,
    /// `Version` (a number or `$Latest` / `$Default`; Ray defaults it to `$Default`).
    #[serde(default, deserialize_with = "string_or_number")]
    pub version: Option<String>,
}

fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) => Ok(Some(n.to_string())),
        v => Err(serde::de::Error::custom(format!(
            "must be a version number or name, got {v}"
        ))),
    }
}

/// The keys [`NodeConfig`] accepts, as boto3 spells them.
pub const NODE_CONFIG_KEYS: &[&str] = &[
    "InstanceType",
    "ImageId",
    "SubnetIds",
    "SubnetId",
    "SecurityGroupIds",
    "KeyName",
    "IamInstanceProfile",
    "BlockDeviceMappings",
    "InstanceMarketOptions",
    "Placement",
    "NetworkInterfaces",
    "TagSpecifications",
    "UserData",
    "MetadataOptions",
    "EbsOptimized",
    "CapacityReservationSpecification",
    "LaunchTemplate",
];

impl NodeConfig {
    /// Parses `v` (a `node_config`); `path` names it in errors
    /// (`available_node_types.<type>.node_config`).
    pub fn parse(v: &Value, path: &str) -> Result<Self, AwsError> {
        let obj = match v {
            Value::Null => return Ok(NodeConfig::default()),
            Value::Object(o) => o,
            _ => return Err(AwsError::config(path, "must be a mapping")),
        };
        // Top-level keys first, for an error that names the key and says why; RunInstances
        // members rayscale does not type are passed through as they are.
        let mut typed = serde_json::Map::new();
        let mut passthrough = Vec::new();
        for (key, value) in obj {
            if let Some((_, t)) = crate::passthrough::TYPED_NESTED
                .iter()
                .find(|(k, _)| k == key)
            {
                // The nested keys the struct lacks go through at their place.
                let (carried, rest) = crate::passthrough::split_typed(value, t);
                typed.insert(key.clone(), carried);
                if let (Some(rest), Some(m)) = (rest, crate::passthrough::nested(key)) {
                    passthrough.extend(crate::passthrough::flatten(
                        m,
                        &rest,
                        &format!("{path}.{key}"),
                    )?);
                }
            } else if NODE_CONFIG_KEYS.contains(&key.as_str()) {
                typed.insert(key.clone(), value.clone());
            } else if let Some(m) = crate::passthrough::member(key) {
                passthrough.extend(crate::passthrough::flatten(
                    m,
                    value,
                    &format!("{path}.{key}"),
                )?);
            } else {
                return Err(AwsError::config(
                    format!("{path}.{key}"),
                    "not a RunInstances member (boto3's create_instances would refuse it); \
                     check its spelling",
                ));
            }
        }
        let typed = Value::Object(typed);
        let mut c: NodeConfig = serde_path_to_error::deserialize(&typed).map_err(|e| {
            let inner = e.path().to_string();
            AwsError::config(
                if inner == "." || inner.is_empty() {
                    path.to_string()
                } else {
                    format!("{path}.{inner}")
                },
                e.into_inner().to_string(),
            )
        })?;
        c.passthrough = passthrough;
        // Ray's own rules (`_configure_subnets_and_groups`): network interfaces carry
        // their own subnet and groups.
        if c.network_interfaces.is_some() {
            for (key, set) in [
                ("SubnetIds", c.subnet_ids.is_some()),
                ("SubnetId", c.subnet_id.is_some()),
                ("SecurityGroupIds", c.security_group_ids.is_some()),
            ] {
                if set {
                    return Err(AwsError::config(
                        format!("{path}.{key}"),
                        "cannot be set beside NetworkInterfaces (set it on the interfaces)",
                    ));
                }
            }
        }
        if c.subnet_ids.is_some() && c.subnet_id.is_some() {
            return Err(AwsError::config(
                format!("{path}.SubnetId"),
                "cannot be set beside SubnetIds",
            ));
        }
        if let Some(ids) = &c.subnet_ids
            && ids.is_empty()
        {
            return Err(AwsError::config(
                format!("{path}.SubnetIds"),
                "must list at least one subnet",
            ));
        }
        if let Some(p) = &c.iam_instance_profile
            && p.arn.is_some() == p.name.is_some()
        {
            return Err(AwsError::config(
                format!("{path}.IamInstanceProfile"),
                "set exactly one of Arn and Name",
            ));
        }
        if let Some(lt) = &c.launch_template
            && lt.launch_template_id.is_some() == lt.launch_template_name.is_some()
        {
            return Err(AwsError::config(
                format!("{path}.LaunchTemplate"),
                "set exactly one of LaunchTemplateId and LaunchTemplateName",
            ));
        }
        if c.instance_type.is_none() && c.launch_template.is_none() {
            return Err(AwsError::config(
                format!("{path}.InstanceType"),
                "required (or a LaunchTemplate that sets it)",
            ));
        }
        Ok(c)
    }

    /// The subnets to try, in order: `SubnetIds`, else `SubnetId`, else none (EC2
    /// picks the default subnet, or the network interfaces name theirs).
    pub fn subnets(&self) -> Vec<String> {
        match (&self.subnet_ids, &self.subnet_id) {
            (Some(ids), _) => ids.clone(),
            (None, Some(id)) => vec![id.clone()],
            (None, None) => Vec::new(),
        }
    }

    /// Whether instances of this config are spot instances.
    pub fn is_spot(&self) -> bool {
        self.instance_market_options
            .as_ref()
            .and_then(|m| m.market_type.as_deref())
            .is_some_and(|t| t.eq_ignore_ascii_case("spot"))
    }
}

/// Ray 2.60's default AMI per region (`_private/aws/config.py`, `DEFAULT_AMI`: the Deep
/// Learning AMI, Ubuntu 18.04, v71), used as Ray's bootstrap does when `ImageId` is
/// absent. The ids are facts about AWS, not Ray's code.
pub fn default_ami(region: &str) -> Option<&'static str> {
    Some(match region {
        "us-east-1" => "ami-0271ce88f6c03e149",
        "us-east-2" => "ami-0ce21b0ce8e0f5a37",
        "us-west-1" => "ami-030896954b2b72361",
        "us-west-2" => "ami-0a2b85e15b7c0ac34",
        "ca-central-1" => "ami-044b98bea12677052",
        "eu-central-1" => "ami-004d285ecf53fb335",
        "eu-west-1" => "ami-0e17ed40febe794a6",
        "eu-west-2" => "ami-0ad9e6b9d4e22df1a",
        "eu-west-3" => "ami-05698775025146698",
        "sa-east-1" => "ami-004b19c7ed8d790bc",
        "ap-northeast-1" => "ami-03e45b1f18378ea97",
        "ap-northeast-2" => "ami-095bae3e623e2ff99",
        "ap-northeast-3" => "ami-02fd0ba69c1ef37ad",
        "ap-southeast-1" => "ami-03ef1223872072e95",
        "ap-southeast-2" => "ami-0bcf4f75e44e0a866",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(node_config: &str, provider: &str) -> Result<AwsConfig, String> {
        let yaml = format!(
            "cluster_name: c\nprovider: {provider}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{InstanceType: m5.large}}}}\n  \
             w: {{resources: {{CPU: 2}}, node_config: {node_config}}}\n"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").map_err(|e| e.to_string())?;
        AwsConfig::from_cluster(&c).map_err(|e| e.to_string())
    }

    const AWS: &str = "{type: aws, region: us-west-2}";

    #[test]
    fn ray_defaults_and_zones() {
        let c = cluster(
            "{InstanceType: m5.large}",
            "{type: aws, region: us-west-2, availability_zone: 'us-west-2a, us-west-2b'}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.region.as_deref(), Some("us-west-2"));
        assert_eq!(c.availability_zones, ["us-west-2a", "us-west-2b"]);
        assert!(c.cache_stopped_nodes, "Ray's AWS default");
        assert_eq!(c.node_types.len(), 2);
        assert_eq!(default_ami("us-west-2"), Some("ami-0a2b85e15b7c0ac34"));
    }

    #[test]
    fn unsupported_keys_name_their_path_in_one_line() {
        for (nc, path) in [
            (
                "{InstanceType: m5.large, HibernationOptions: {Configurd: true}}",
                "available_node_types.w.node_config.HibernationOptions.Configurd",
            ),
            (
                "{InstanceType: m5.large, InstanceTypo: m5.large}",
                "available_node_types.w.node_config.InstanceTypo",
            ),
            (
                "{InstanceType: m5.large, BlockDeviceMappings: [{DeviceName: /dev/sda1, Ebs: {VolumeSize: 10, Bogus: 1}}]}",
                "available_node_types.w.node_config.BlockDeviceMappings[0].Ebs",
            ),
            (
                "{InstanceType: m5.large, BlockDeviceMappings: [{Ebs: {VolumeSize: big}}]}",
                "available_node_types.w.node_config.BlockDeviceMappings[0].Ebs.VolumeSize",
            ),
            (
                "{InstanceType: m5.large, SubnetId: s-1, NetworkInterfaces: [{DeviceIndex: 0}]}",
                "available_node_types.w.node_config.SubnetId",
            ),
            (
                "{ImageId: ami-1}",
                "available_node_types.w.node_config.InstanceType",
            ),
            (
                "{InstanceType: m5.large, IamInstanceProfile: {}}",
                "available_node_types.w.node_config.IamInstanceProfile",
            ),
        ] {
            let e = cluster(nc, AWS).err().unwrap_or_default();
            assert!(e.starts_with(path), "{nc}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = cluster(
            "{InstanceType: m5.large}",
            "{type: aws, aws_credentials: {aws_access_key_id: k}}",
        )
        .err()
        .unwrap_or_default();
        assert!(e.starts_with("provider.aws_credentials:"), "{e}");
        assert!(e.contains("go together"), "{e}");
        let e = cluster(
            "{InstanceType: m5.large}",
            "{type: aws, aws_credentials: {aws_access_key_id: k, aws_secret_access_key: s, region_name: r}}",
        )
        .err()
        .unwrap_or_default();
        assert!(
            e.starts_with("provider.aws_credentials.region_name:"),
            "{e}"
        );
        let keys = crate::client::StaticKeys::from_provider(
            serde_json::json!({"aws_credentials": {"aws_access_key_id": "AKIA1",
                "aws_secret_access_key": "s3cret", "aws_session_token": "t0ken"}})
            .as_object()
            .expect("a mapping"),
        )
        .expect("read")
        .expect("present");
        let shown = format!("{keys:?}");
        assert!(
            shown.contains("AKIA1") && !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
        // security_group is read (by `rayscale up`'s bootstrap), and checked at load.
        assert!(
            cluster(
                "{InstanceType: m5.large}",
                "{type: aws, security_group: {GroupName: g}}"
            )
            .is_ok()
        );
        let e = cluster(
            "{InstanceType: m5.large}",
            "{type: aws, security_group: {GroupName: 3}}",
        )
        .err()
        .unwrap_or_default();
        assert!(e.starts_with("provider.security_group.GroupName"), "{e}");
        let e = cluster("{InstanceType: m5.large}", "{type: aws, region: 3}")
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("provider.region"), "{e}");
    }

    #[test]
    fn every_supported_key_parses() {
        let c = cluster(
            "{InstanceType: m5.large, ImageId: ami-1, SubnetIds: [s-1, s-2], \
             SecurityGroupIds: [sg-1], KeyName: k, IamInstanceProfile: {Arn: 'arn:x'}, \
             BlockDeviceMappings: [{DeviceName: /dev/sda1, Ebs: {VolumeSize: 256, VolumeType: gp3}}], \
             InstanceMarketOptions: {MarketType: spot, SpotOptions: {MaxPrice: '0.5'}}, \
             Placement: {AvailabilityZone: us-west-2a}, \
             TagSpecifications: [{ResourceType: instance, Tags: [{Key: team, Value: ml}]}], \
             UserData: 'echo hi', MetadataOptions: {HttpTokens: required}, EbsOptimized: true, \
             CapacityReservationSpecification: {CapacityReservationPreference: open}, \
             LaunchTemplate: {LaunchTemplateName: lt, Version: 3}}",
            AWS,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let w = &c.node_types["w"];
        assert!(w.is_spot());
        assert_eq!(w.subnets(), ["s-1", "s-2"]);
        assert_eq!(
            w.launch_template
                .as_ref()
                .and_then(|l| l.version.as_deref()),
            Some("3")
        );
    }
}
