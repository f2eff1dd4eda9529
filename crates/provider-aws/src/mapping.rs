//! Pure mapping, no client and no I/O: a node type's `node_config` plus Ray's tags and a
//! launch request -> a `RunInstancesInput`; an EC2 instance -> core's `CloudInstance`.
//! Unit-tested on its own; the provider only sends what this builds.

use std::collections::BTreeMap;

use aws_sdk_ec2::operation::run_instances::RunInstancesInput;
use aws_sdk_ec2::types as ec2;
use base64::Engine as _;
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind, tags};

use crate::AwsError;
use crate::config::{AwsConfig, NodeConfig, default_ami};

/// EC2's tag key for an instance's name: Ray stores `ray-node-name` there
/// (`to_aws_format` in Ray's AWS provider), so the console and `ray` tooling show it.
pub const NAME_TAG: &str = "Name";

/// Ray's tags for a node of `node_type` and `kind`, made by `request_id`, in Ray's order
/// (the cluster first, then sorted keys, then `Name`).
pub fn ray_tags(
    cluster_name: &str,
    node_type: &str,
    kind: NodeKind,
    request_id: Option<&str>,
    launch_hash: &str,
) -> Vec<(String, String)> {
    let mut t: BTreeMap<&str, String> = BTreeMap::new();
    t.insert(tags::NODE_KIND, kind.tag_value().to_string());
    t.insert(tags::USER_NODE_TYPE, node_type.to_string());
    t.insert(tags::NODE_STATUS, tags::STATUS_UNINITIALIZED.to_string());
    t.insert(tags::LAUNCH_CONFIG, launch_hash.to_string());
    if let Some(r) = request_id {
        t.insert(tags::LAUNCH_REQUEST, r.to_string());
    }
    let mut out = vec![(tags::CLUSTER_NAME.to_string(), cluster_name.to_string())];
    out.extend(t.into_iter().map(|(k, v)| (k.to_string(), v)));
    out.push((
        NAME_TAG.to_string(),
        format!("ray-{cluster_name}-{}", kind.tag_value()),
    ));
    out
}

/// One RunInstances call to make: where, how many, with which token. Its place (the
/// subnet id, else the zone) is what capacity errors, a listed instance's zone and a
/// launch's `avoid_zones` name.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement<'a> {
    /// The subnet of this attempt (`SubnetId`), if the config names subnets.
    pub subnet: Option<&'a str>,
    /// The zone of this attempt (`Placement.AvailabilityZone`), when the config names no
    /// subnet but the provider names zones.
    pub zone: Option<&'a str>,
}

impl Placement<'_> {
    /// Whether this attempt goes to one of `avoid` (by subnet id or zone).
    pub fn avoided(&self, avoid: &[String]) -> bool {
        [self.subnet, self.zone]
            .into_iter()
            .flatten()
            .any(|p| avoid.iter().any(|a| a == p))
    }
}

/// Builds the RunInstances request for `count` nodes of `node_type` (MinCount 1,
/// MaxCount `count`; MinCount `count` too when `all_or_nothing`: EC2 then makes all of
/// them or none, an atomic gang's launch), with Ray's tags merged into the user's `TagSpecifications` (the
/// user's value wins for a key of its own, Ray's for a `ray-` key), `user_data` (plain
/// text; base64-encoded here, as boto3 does), and `client_token`.
#[allow(clippy::too_many_arguments)]
pub fn run_instances_input(
    cfg: &AwsConfig,
    node_type: &str,
    kind: NodeKind,
    request_id: Option<&str>,
    count: u64,
    all_or_nothing: bool,
    at: &Placement<'_>,
    user_data: Option<&str>,
    client_token: &str,
) -> Result<RunInstancesInput, AwsError> {
    let path = format!("available_node_types.{node_type}.node_config");
    let nc: &NodeConfig = cfg.node_types.get(node_type).ok_or_else(|| {
        AwsError::config(
            "available_node_types",
            format!("no node type {node_type:?}"),
        )
    })?;
    let hash = cfg.launch_hashes.get(node_type, kind);
    let count = i32::try_from(count)
        .map_err(|_| AwsError::config(&path, format!("cannot launch {count} instances at once")))?;
    let mut b = RunInstancesInput::builder()
        .min_count(if all_or_nothing { count } else { 1 })
        .max_count(count)
        .client_token(client_token);
    if let Some(t) = &nc.instance_type {
        b = b.instance_type(ec2::InstanceType::from(t.as_str()));
    }
    match &nc.image_id {
        Some(i) if i != "latest_dlami" => b = b.image_id(i),
        _ if nc.launch_template.is_some() && nc.image_id.is_none() => {}
        _ => {
            let region = cfg.region.as_deref().unwrap_or("");
            let ami = default_ami(region).ok_or_else(|| {
                AwsError::config(
                    format!("{path}.ImageId"),
                    format!("required: Ray has no default AMI for region {region:?}"),
                )
            })?;
            b = b.image_id(ami);
        }
    }
    if let Some(s) = at.subnet {
        b = b.subnet_id(s);
    }
    if let Some(g) = &nc.security_group_ids {
        b = b.set_security_group_ids(Some(g.clone()));
    }
    if let Some(k) = &nc.key_name {
        b = b.key_name(k);
    }
    let head_profile = match kind {
        NodeKind::Head => cfg.head_iam_profile.as_ref(),
        NodeKind::Worker => None,
    };
    if let Some(p) = nc.iam_instance_profile.as_ref().or(head_profile) {
        b = b.iam_instance_profile(
            ec2::IamInstanceProfileSpecification::builder()
                .set_arn(p.arn.clone())
                .set_name(p.name.clone())
                .build(),
        );
    }
    for (i, d) in nc.block_device_mappings.iter().flatten().enumerate() {
        let ebs = match &d.ebs {
            Some(e) => Some(
                ec2::EbsBlockDevice::builder()
                    .set_volume_size(e.volume_size)
                    .set_volume_type(opt_known::<ec2::VolumeType>(
                        e.volume_type.as_deref(),
                        &format!("{path}.BlockDeviceMappings[{i}].Ebs.VolumeType"),
                    )?)
                    .set_delete_on_termination(e.delete_on_termination)
                    .set_iops(e.iops)
                    .set_throughput(e.throughput)
                    .set_encrypted(e.encrypted)
                    .set_kms_key_id(e.kms_key_id.clone())
                    .set_snapshot_id(e.snapshot_id.clone())
                    .build(),
            ),
            None => None,
        };
        b = b.block_device_mappings(
            ec2::BlockDeviceMapping::builder()
                .set_device_name(d.device_name.clone())
                .set_virtual_name(d.virtual_name.clone())
                .set_no_device(d.no_device.clone())
                .set_ebs(ebs)
                .build(),
        );
    }
    if let Some(m) = &nc.instance_market_options {
        let p = format!("{path}.InstanceMarketOptions");
        let spot = match &m.spot_options {
            Some(s) => Some(
                ec2::SpotMarketOptions::builder()
                    .set_max_price(s.max_price.clone())
                    .set_spot_instance_type(opt_known::<ec2::SpotInstanceType>(
                        s.spot_instance_type.as_deref(),
                        &format!("{p}.SpotOptions.SpotInstanceType"),
                    )?)
                    .set_instance_interruption_behavior(opt_known::<
                        ec2::InstanceInterruptionBehavior,
                    >(
                        s.instance_interruption_behavior.as_deref(),
                        &format!("{p}.SpotOptions.InstanceInterruptionBehavior"),
                    )?)
                    .build(),
            ),
            None => None,
        };
        b = b.instance_market_options(
            ec2::InstanceMarketOptionsRequest::builder()
                .set_market_type(opt_known::<ec2::MarketType>(
                    m.market_type.as_deref(),
                    &format!("{p}.MarketType"),
                )?)
                .set_spot_options(spot)
                .build(),
        );
    }
    let user_zone = nc
        .placement
        .as_ref()
        .and_then(|p| p.availability_zone.clone());
    // A zone named by id (passed through) is the user's: no zone name beside it.
    let zone_by_id = nc
        .passthrough
        .iter()
        .any(|(k, _)| k == "Placement.AvailabilityZoneId");
    let zone = user_zone.or_else(|| at.zone.filter(|_| !zone_by_id).map(str::to_string));
    if nc.placement.is_some() || zone.is_some() {
        let p = nc.placement.clone().unwrap_or_default();
        b = b.placement(
            ec2::Placement::builder()
                .set_availability_zone(zone)
                .set_group_name(p.group_name)
                .set_group_id(p.group_id)
                .set_tenancy(opt_known::<ec2::Tenancy>(
                    p.tenancy.as_deref(),
                    &format!("{path}.Placement.Tenancy"),
                )?)
                .set_partition_number(p.partition_number)
                .set_host_id(p.host_id)
                .set_affinity(p.affinity)
                .build(),
        );
    }
    for n in nc.network_interfaces.iter().flatten() {
        b = b.network_interfaces(
            ec2::InstanceNetworkInterfaceSpecification::builder()
                .set_device_index(n.device_index)
                .set_subnet_id(n.subnet_id.clone())
                .set_groups(n.groups.clone())
                .set_associate_public_ip_address(n.associate_public_ip_address)
                .set_delete_on_termination(n.delete_on_termination)
                .set_description(n.description.clone())
                .set_interface_type(n.interface_type.clone())
                .set_network_card_index(n.network_card_index)
                .set_network_interface_id(n.network_interface_id.clone())
                .build(),
        );
    }
    for spec in tag_specifications(cfg, nc, node_type, kind, request_id, hash, &path)? {
        b = b.tag_specifications(spec);
    }
    if let Some(u) = user_data {
        b = b.user_data(base64::engine::general_purpose::STANDARD.encode(u));
    }
    if let Some(m) = &nc.metadata_options {
        let p = format!("{path}.MetadataOptions");
        b = b.metadata_options(
            ec2::InstanceMetadataOptionsRequest::builder()
                .set_http_tokens(opt_known::<ec2::HttpTokensState>(
                    m.http_tokens.as_deref(),
                    &format!("{p}.HttpTokens"),
                )?)
                .set_http_put_response_hop_limit(m.http_put_response_hop_limit)
                .set_http_endpoint(opt_known::<ec2::InstanceMetadataEndpointState>(
                    m.http_endpoint.as_deref(),
                    &format!("{p}.HttpEndpoint"),
                )?)
                .set_http_protocol_ipv6(opt_known::<ec2::InstanceMetadataProtocolState>(
                    m.http_protocol_ipv6.as_deref(),
                    &format!("{p}.HttpProtocolIpv6"),
                )?)
                .set_instance_metadata_tags(opt_known::<ec2::InstanceMetadataTagsState>(
                    m.instance_metadata_tags.as_deref(),
                    &format!("{p}.InstanceMetadataTags"),
                )?)
                .build(),
        );
    }
    if let Some(e) = nc.ebs_optimized {
        b = b.ebs_optimized(e);
    }
    if let Some(c) = &nc.capacity_reservation_specification {
        let p = format!("{path}.CapacityReservationSpecification");
        b = b.capacity_reservation_specification(
            ec2::CapacityReservationSpecification::builder()
                .set_capacity_reservation_preference(
                    opt_known::<ec2::CapacityReservationPreference>(
                        c.capacity_reservation_preference.as_deref(),
                        &format!("{p}.CapacityReservationPreference"),
                    )?,
                )
                .set_capacity_reservation_target(c.capacity_reservation_target.as_ref().map(|t| {
                    ec2::CapacityReservationTarget::builder()
                        .set_capacity_reservation_id(t.capacity_reservation_id.clone())
                        .set_capacity_reservation_resource_group_arn(
                            t.capacity_reservation_resource_group_arn.clone(),
                        )
                        .build()
                }))
                .build(),
        );
    }
    if let Some(lt) = &nc.launch_template {
        b = b.launch_template(
            ec2::LaunchTemplateSpecification::builder()
                .set_launch_template_id(lt.launch_template_id.clone())
                .set_launch_template_name(lt.launch_template_name.clone())
                // Ray's bootstrap defaults the version to `$Default`.
                .version(lt.version.clone().unwrap_or_else(|| "$Default".to_string()))
                .build(),
        );
    }
    b.build()
        .map_err(|e| AwsError::config(path, format!("RunInstances request: {e}")))
}

/// Ray's tags in an `instance` tag specification, merged with the user's specs as Ray's
/// `_create_node` merges them: the user's other resource types are kept; for `instance`,
/// the user's value of a key of its own (`Name`, `team`, ...) wins, and a `ray-` key stays
/// rayscale's (a user who retags `ray-cluster-name` would hide the node from its cluster).
fn tag_specifications(
    cfg: &AwsConfig,
    nc: &NodeConfig,
    node_type: &str,
    kind: NodeKind,
    request_id: Option<&str>,
    hash: &str,
    path: &str,
) -> Result<Vec<ec2::TagSpecification>, AwsError> {
    let mut instance: Vec<(String, String)> =
        ray_tags(&cfg.cluster_name, node_type, kind, request_id, hash);
    instance.extend(
        cfg.launch_hashes
            .extra_tags(kind)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    let mut others = Vec::new();
    for (i, spec) in nc.tag_specifications.iter().flatten().enumerate() {
        if spec.resource_type == "instance" {
            for kv in &spec.tags {
                match instance.iter_mut().find(|(k, _)| *k == kv.key) {
                    Some(_) if kv.key.starts_with("ray-") || kv.key == tags::RAYSCALE_CONFIG => {}
                    Some(slot) => slot.1 = kv.value.clone(),
                    None => instance.push((kv.key.clone(), kv.value.clone())),
                }
            }
        } else {
            let rt = known::<ec2::ResourceType>(
                &spec.resource_type,
                &format!("{path}.TagSpecifications[{i}].ResourceType"),
            )?;
            others.push(spec_of(
                rt,
                spec.tags.iter().map(|t| (t.key.clone(), t.value.clone())),
            ));
        }
    }
    let mut out = vec![spec_of(ec2::ResourceType::Instance, instance)];
    out.extend(others);
    Ok(out)
}

fn spec_of(
    rt: ec2::ResourceType,
    kvs: impl IntoIterator<Item = (String, String)>,
) -> ec2::TagSpecification {
    let mut s = ec2::TagSpecification::builder().resource_type(rt);
    for (k, v) in kvs {
        s = s.tags(ec2::Tag::builder().key(k).value(v).build());
    }
    s.build()
}

/// `v` as an SDK enum, refused (naming `path`) unless EC2's model knows it.
fn known<T: for<'a> From<&'a str> + Known>(v: &str, path: &str) -> Result<T, AwsError> {
    if T::names().contains(&v) {
        Ok(T::from(v))
    } else {
        Err(AwsError::config(
            path,
            format!("{v:?} is not one of {}", T::names().join(", ")),
        ))
    }
}

/// [`known`] for an optional value.
fn opt_known<T: for<'a> From<&'a str> + Known>(
    v: Option<&str>,
    path: &str,
) -> Result<Option<T>, AwsError> {
    v.map(|v| known(v, path)).transpose()
}

/// An SDK enum's known values.
trait Known {
    fn names() -> &'static [&'static str];
}

macro_rules! known_enums {
    ($($t:ty),*) => {$(
        impl Known for $t {
            fn names() -> &'static [&'static str] {
                <$t>::values()
            }
        }
    )*};
}

known_enums!(
    ec2::VolumeType,
    ec2::MarketType,
    ec2::SpotInstanceType,
    ec2::InstanceInterruptionBehavior,
    ec2::Tenancy,
    ec2::HttpTokensState,
    ec2::InstanceMetadataEndpointState,
    ec2::InstanceMetadataProtocolState,
    ec2::InstanceMetadataTagsState,
    ec2::CapacityReservationPreference,
    ec2::ResourceType
);

/// A shell command printing one IMDSv2 `meta-data/` path: a session token first, then the
/// path, each retried while the service comes up. `RAYSCALE_METADATA_URL` replaces the
/// service's address (the boot simulator's stand-in).
macro_rules! imds_command {
    ($path:literal) => {
        concat!(
            "M=\"${RAYSCALE_METADATA_URL:-http://169.254.169.254}\"; ",
            "T=$(curl -sf --retry 20 --retry-connrefused --retry-delay 1 -X PUT \"$M/latest/api/token\" ",
            "-H 'X-aws-ec2-metadata-token-ttl-seconds: 300'); ",
            "curl -sf --retry 20 --retry-connrefused --retry-delay 1 -H \"X-aws-ec2-metadata-token: $T\" ",
            "\"$M/latest/meta-data/",
            $path,
            "\""
        )
    };
}

/// The shell command that prints the instance's id (IMDSv2 `meta-data/instance-id`).
pub const INSTANCE_ID_COMMAND: &str = imds_command!("instance-id");

/// The shell command that prints the instance's private IPv4 address (IMDSv2
/// `meta-data/local-ipv4`).
pub const PRIVATE_IP_COMMAND: &str = imds_command!("local-ipv4");

/// How an instance learns who it is: IMDSv2; EC2 runs user data once per instance, so
/// the boot script installs itself to run at every boot.
pub const METADATA: rayscale_core::provider::cloud::MetadataCommands<'static> =
    rayscale_core::provider::cloud::MetadataCommands {
        instance_id: INSTANCE_ID_COMMAND,
        private_ip: PRIVATE_IP_COMMAND,
        per_boot: true,
        notices: Some(rayscale_core::provider::boot::NoticeCloud::Aws),
        host_index: None,
    };

/// EC2's limit on `UserData`, before base64 (RunInstances reference).
pub const MAX_USER_DATA: usize = 16 * 1024;

/// The boundary of the MIME document that carries a user's `UserData` and the boot script.
pub const MIME_BOUNDARY: &str = "==RAYSCALE_BOUNDARY==";

/// The instance's `UserData`: the user's own, the boot script, or both. Both go as a
/// MIME multi-part document (cloud-init's format), the user's part first, so it runs
/// first; its type follows its first line (`#cloud-config`, else a shell script).
pub fn user_data(user: Option<&str>, boot: Option<&str>) -> Option<String> {
    match (user, boot) {
        (None, None) => None,
        (Some(u), None) => Some(u.to_string()),
        (None, Some(b)) => Some(b.to_string()),
        (Some(u), Some(b)) => {
            let kind = if u.trim_start().starts_with("#cloud-config") {
                "text/cloud-config"
            } else {
                "text/x-shellscript"
            };
            let part = |ctype: &str, name: &str, body: &str| {
                format!(
                    "--{MIME_BOUNDARY}\nContent-Type: {ctype}; charset=\"utf-8\"\n\
                     MIME-Version: 1.0\nContent-Disposition: attachment; filename=\"{name}\"\n\n{body}\n"
                )
            };
            Some(format!(
                "Content-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\nMIME-Version: 1.0\n\n{}{}--{MIME_BOUNDARY}--\n",
                part(kind, "user-data", u),
                part("text/x-shellscript", "rayscale-boot.sh", b)
            ))
        }
    }
}

/// The EC2 instance as core sees it, or `None` for one that is not a Ray node of a known
/// kind (no `ray-node-type` tag, or `unmanaged`): such instances are never touched.
pub fn cloud_instance(i: &ec2::Instance) -> Option<CloudInstance> {
    let id = i.instance_id()?;
    let labels: BTreeMap<String, String> = i
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect();
    let kind = match labels.get(tags::NODE_KIND).map(String::as_str) {
        Some(tags::NODE_KIND_HEAD) => NodeKind::Head,
        Some(tags::NODE_KIND_WORKER) => NodeKind::Worker,
        _ => return None,
    };
    let state = match i.state().and_then(|s| s.name()) {
        Some(ec2::InstanceStateName::Pending) => CloudInstanceState::Pending,
        Some(ec2::InstanceStateName::Running) => CloudInstanceState::Running,
        Some(
            ec2::InstanceStateName::Stopping
            | ec2::InstanceStateName::ShuttingDown
            | ec2::InstanceStateName::Stopped
            | ec2::InstanceStateName::Terminated,
        ) => CloudInstanceState::Stopping,
        // A state this SDK does not know yet: not running, not usable.
        _ => CloudInstanceState::Pending,
    };
    Some(CloudInstance {
        cloud_instance_id: id.to_string(),
        node_type: labels
            .get(tags::USER_NODE_TYPE)
            .cloned()
            .unwrap_or_default(),
        kind,
        request_id: labels.get(tags::LAUNCH_REQUEST).cloned(),
        state,
        private_ip: i.private_ip_address().map(str::to_string),
        public_ip: i
            .public_ip_address()
            .filter(|ip| !ip.is_empty())
            .map(str::to_string),
        launch_config_hash: labels.get(tags::LAUNCH_CONFIG).cloned(),
        labels,
        zone: zone_of(i),
    })
}

/// The instance's zone as the launch attempts name places: its availability zone (the
/// provider names its subnet instead for a type that launches into subnets, see
/// [`Placement`]).
pub fn zone_of(i: &ec2::Instance) -> Option<String> {
    i.placement()
        .and_then(|p| p.availability_zone())
        .filter(|z| !z.is_empty())
        .map(str::to_string)
}

/// Whether an instance is a spot instance (terminated, never stopped, when workers are
/// cached: EC2 refuses to stop one-time spot instances).
pub fn is_spot(i: &ec2::Instance) -> bool {
    i.instance_lifecycle() == Some(&ec2::InstanceLifecycleType::Spot)
        || i.spot_instance_request_id().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayscale_core::config::ClusterConfig;

    fn cfg(worker: &str) -> AwsConfig {
        let yaml = format!(
            "cluster_name: demo\nprovider: {{type: aws, region: us-west-2}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{InstanceType: m5.large}}}}\n  \
             w: {{resources: {{CPU: 2}}, node_config: {worker}}}\n"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        AwsConfig::from_cluster(&c).unwrap_or_else(|e| panic!("{e}"))
    }

    fn tags_of(input: &RunInstancesInput, rt: ec2::ResourceType) -> Vec<(String, String)> {
        input
            .tag_specifications
            .iter()
            .flatten()
            .filter(|s| s.resource_type() == Some(&rt))
            .flat_map(|s| s.tags())
            .map(|t| (t.key().unwrap_or("").into(), t.value().unwrap_or("").into()))
            .collect()
    }

    #[test]
    fn ray_defaults_worker() {
        let c = cfg("{InstanceType: m5.large, InstanceMarketOptions: {MarketType: spot}}");
        let at = Placement {
            subnet: Some("subnet-1"),
            zone: None,
        };
        let i = run_instances_input(
            &c,
            "w",
            NodeKind::Worker,
            Some("lr-1"),
            3,
            false,
            &at,
            None,
            "tok",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((i.min_count, i.max_count), (Some(1), Some(3)));
        // An atomic gang's launch: all three or none.
        let g = run_instances_input(
            &c,
            "w",
            NodeKind::Worker,
            Some("lr-1"),
            3,
            true,
            &at,
            None,
            "tok",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((g.min_count, g.max_count), (Some(3), Some(3)));
        assert_eq!(
            i.image_id.as_deref(),
            Some("ami-0a2b85e15b7c0ac34"),
            "Ray's default AMI"
        );
        assert_eq!(i.instance_type, Some(ec2::InstanceType::M5Large));
        assert_eq!(i.subnet_id.as_deref(), Some("subnet-1"));
        assert_eq!(i.client_token.as_deref(), Some("tok"));
        assert_eq!(
            i.instance_market_options
                .as_ref()
                .and_then(|m| m.market_type()),
            Some(&ec2::MarketType::Spot)
        );
        let t = tags_of(&i, ec2::ResourceType::Instance);
        let keys: Vec<&str> = t.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "ray-cluster-name",
                "ray-launch-config",
                "ray-launch-request",
                "ray-node-status",
                "ray-node-type",
                "ray-user-node-type",
                "Name"
            ]
        );
        assert!(t.contains(&("Name".into(), "ray-demo-worker".into())));
        assert!(t.contains(&("ray-launch-request".into(), "lr-1".into())));
    }

    #[test]
    fn user_tags_merge_and_user_data_is_base64() {
        let c = cfg(
            "{InstanceType: m5.large, ImageId: ami-1, TagSpecifications: [\
             {ResourceType: instance, Tags: [{Key: Name, Value: mine}, {Key: team, Value: ml}, \
             {Key: ray-cluster-name, Value: other}]}, \
             {ResourceType: volume, Tags: [{Key: team, Value: ml}]}]}",
        );
        let at = Placement {
            subnet: None,
            zone: Some("us-west-2b"),
        };
        let i = run_instances_input(
            &c,
            "w",
            NodeKind::Worker,
            None,
            1,
            false,
            &at,
            Some("echo hi"),
            "t",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = tags_of(&i, ec2::ResourceType::Instance);
        assert!(t.contains(&("Name".into(), "mine".into())));
        assert!(t.contains(&("team".into(), "ml".into())));
        assert!(
            t.contains(&("ray-cluster-name".into(), "demo".into())),
            "ours win for ray- keys"
        );
        assert_eq!(
            tags_of(&i, ec2::ResourceType::Volume),
            [("team".to_string(), "ml".to_string())]
        );
        assert_eq!(i.user_data.as_deref(), Some("ZWNobyBoaQ=="));
        assert_eq!(
            i.placement.as_ref().and_then(|p| p.availability_zone()),
            Some("us-west-2b")
        );
    }

    #[test]
    fn unknown_enum_values_name_their_path() {
        let c = cfg(
            "{InstanceType: m5.large, ImageId: ami-1, BlockDeviceMappings: [{DeviceName: /dev/sda1, Ebs: {VolumeType: gp9}}]}",
        );
        let at = Placement {
            subnet: None,
            zone: None,
        };
        let e = run_instances_input(&c, "w", NodeKind::Worker, None, 1, false, &at, None, "t")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with(
                "available_node_types.w.node_config.BlockDeviceMappings[0].Ebs.VolumeType: \"gp9\""
            ),
            "{e}"
        );
    }

    #[test]
    fn user_data_runs_the_users_part_first() {
        assert_eq!(user_data(None, None), None);
        assert_eq!(
            user_data(Some("#!/bin/sh\necho u"), None).as_deref(),
            Some("#!/bin/sh\necho u")
        );
        let both = user_data(
            Some("#cloud-config\npackages: [htop]"),
            Some("#!/bin/bash\necho b"),
        )
        .unwrap_or_default();
        let u = both.find("packages: [htop]").unwrap_or(usize::MAX);
        let b = both.find("echo b").unwrap_or(0);
        assert!(u < b, "{both}");
        assert!(both.contains("Content-Type: text/cloud-config"));
        assert!(both.contains("Content-Type: text/x-shellscript"));
        assert!(both.trim_end().ends_with(&format!("--{MIME_BOUNDARY}--")));
    }

    #[test]
    fn instances_map_back() {
        let inst = ec2::Instance::builder()
            .instance_id("i-1")
            .private_ip_address("10.0.0.5")
            .state(
                ec2::InstanceState::builder()
                    .name(ec2::InstanceStateName::Pending)
                    .build(),
            )
            .tags(
                ec2::Tag::builder()
                    .key("ray-node-type")
                    .value("worker")
                    .build(),
            )
            .tags(
                ec2::Tag::builder()
                    .key("ray-user-node-type")
                    .value("w")
                    .build(),
            )
            .tags(
                ec2::Tag::builder()
                    .key("ray-launch-request")
                    .value("lr-9")
                    .build(),
            )
            .build();
        let c = cloud_instance(&inst).unwrap_or_else(|| panic!("a worker"));
        assert_eq!(c.cloud_instance_id, "i-1");
        assert_eq!(c.node_type, "w");
        assert_eq!(c.request_id.as_deref(), Some("lr-9"));
        assert_eq!(c.state, CloudInstanceState::Pending);
        assert_eq!(c.private_ip.as_deref(), Some("10.0.0.5"));
        let unmanaged = ec2::Instance::builder().instance_id("i-2").build();
        assert!(cloud_instance(&unmanaged).is_none());
    }
}
