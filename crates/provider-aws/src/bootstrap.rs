//! The network part of Ray's AWS bootstrap (`ray up`'s `bootstrap_aws`:
//! `_configure_subnet` and `_configure_security_group`), run by `rayscale up` before it
//! launches the head: a node type without `SubnetIds` gets the usable subnets Ray picks,
//! and one without `SecurityGroupIds` gets the cluster's security group (named by
//! `provider.security_group.GroupName`, else `ray-autoscaler-<cluster>`), found in the
//! subnets' VPC or created there, tagged for the cluster, with Ray's inbound rules (all
//! traffic within the cluster's groups, SSH from anywhere, then
//! `provider.security_group.IpPermissions`) when it has none. Run again, it finds the
//! same group and adds nothing; `down` leaves it, as Ray's does.
//!
//! A type whose network comes from `NetworkInterfaces`, `LaunchTemplate` or `SubnetId` is
//! left as it is. The IAM role and the key pair of Ray's bootstrap are not made here.
//!
//! The pure part ([`usable_subnets`], [`inbound_rules`]) decides from EC2's descriptions;
//! [`bootstrap`] asks EC2 and rewrites the config.

use std::collections::BTreeSet;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types as ec2;
use rayscale_core::config::ClusterConfig;
use serde_json::{Value, json};

use crate::AwsError;
use crate::client::sdk_error;

/// What Ray's bootstrap reads of a subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetFacts {
    /// `subnet-...`.
    pub id: String,
    /// `vpc-...`.
    pub vpc: String,
    /// Its availability zone.
    pub zone: String,
    /// EC2's state is `available`.
    pub available: bool,
    /// `MapPublicIpOnLaunch`.
    pub public: bool,
}

/// The subnets node type `node_type` may use, as Ray 2.60's `_usable_subnet_ids` picks
/// them: the user's (`user`, all of which must be usable) or all of the region's; only
/// available ones, public unless `use_internal_ips`, in `vpc_of_groups` when the config
/// names security groups, sorted by zone from Z to A, then in the order of `zones` when
/// given; all in the first one's VPC. Returns them and that VPC.
pub fn usable_subnets(
    all: &[SubnetFacts],
    user: Option<&[String]>,
    zones: &[String],
    vpc_of_groups: Option<&str>,
    use_internal_ips: bool,
    node_type: &str,
) -> Result<(Vec<String>, String), AwsError> {
    let path = format!("available_node_types.{node_type}.node_config.SubnetIds");
    let candidates: Vec<&SubnetFacts> = match user {
        Some(ids) => {
            let mut found = Vec::new();
            for id in ids {
                match all.iter().find(|s| &s.id == id) {
                    Some(s) if !found.contains(&s) => found.push(s),
                    Some(_) => {}
                    None => {
                        return Err(AwsError::config(&path, format!("EC2 has no subnet {id}")));
                    }
                }
            }
            found
        }
        None => all.iter().collect(),
    };
    let wanted = candidates.len();
    let mut usable: Vec<&SubnetFacts> = candidates
        .into_iter()
        .filter(|s| vpc_of_groups.is_none_or(|v| s.vpc == v))
        .filter(|s| s.available && (use_internal_ips || s.public))
        .collect();
    // Ray's sort is stable and by zone only: subnets of one zone keep EC2's order.
    usable.sort_by(|a, b| b.zone.cmp(&a.zone));
    let pruned = |kept: &[&SubnetFacts]| user.is_some() && kept.len() != wanted;
    if usable.is_empty() {
        return Err(AwsError::config(
            &path,
            "no usable subnet: a subnet must be available, in the VPC of the config's \
             security groups, and map public IPs on launch unless provider.use_internal_ips \
             is true",
        ));
    }
    if pruned(&usable) {
        return Err(AwsError::config(
            &path,
            "some of these subnets are not usable (not available, in another VPC than the \
             security groups, or not public without provider.use_internal_ips)",
        ));
    }
    if !zones.is_empty() {
        usable = zones
            .iter()
            .flat_map(|z| usable.iter().filter(move |s| &s.zone == z).copied())
            .collect();
        if usable.is_empty() {
            return Err(AwsError::config(
                &path,
                format!("no usable subnet in provider.availability_zone {zones:?}"),
            ));
        }
        if pruned(&usable) {
            return Err(AwsError::config(
                &path,
                format!(
                    "some of these subnets are in none of provider.availability_zone {zones:?}"
                ),
            ));
        }
    }
    let vpc = usable[0].vpc.clone();
    let ids: Vec<String> = usable
        .iter()
        .filter(|s| s.vpc == vpc)
        .map(|s| s.id.clone())
        .collect();
    if user.is_some() && ids.len() != wanted {
        return Err(AwsError::config(
            &path,
            "these subnets are in more than one VPC: use subnets of one VPC",
        ));
    }
    Ok((ids, vpc))
}

/// The inbound rules Ray puts on a security group it made, in boto3's shape: all traffic
/// from the cluster's groups (`groups`, sorted), SSH (22/tcp) from anywhere, then the
/// user's `extra` (`provider.security_group.IpPermissions`).
pub fn inbound_rules(groups: &BTreeSet<String>, extra: &[Value]) -> Vec<Value> {
    let mut rules = vec![
        json!({"FromPort": -1, "ToPort": -1, "IpProtocol": "-1",
               "UserIdGroupPairs": groups.iter().map(|g| json!({"GroupId": g})).collect::<Vec<_>>()}),
        json!({"FromPort": 22, "ToPort": 22, "IpProtocol": "tcp",
               "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}),
    ];
    rules.extend(extra.iter().cloned());
    rules
}

/// `provider.security_group`: the group's name and the user's extra inbound rules.
fn security_group_settings(config: &ClusterConfig) -> Result<(String, Vec<Value>), AwsError> {
    let default_name = format!("ray-autoscaler-{}", config.cluster_name);
    let Some(sg) = config
        .raw
        .get("provider")
        .and_then(|p| p.get("security_group"))
    else {
        return Ok((default_name, Vec::new()));
    };
    let Some(sg) = sg.as_object() else {
        return Err(AwsError::config(
            "provider.security_group",
            format!("must be a mapping with GroupName and IpPermissions, got {sg}"),
        ));
    };
    for k in sg.keys() {
        if k != "GroupName" && k != "IpPermissions" {
            return Err(AwsError::config(
                format!("provider.security_group.{k}"),
                "unknown key (known: GroupName, IpPermissions)",
            ));
        }
    }
    let name = match sg.get("GroupName") {
        None | Some(Value::Null) => default_name,
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(v) => {
            return Err(AwsError::config(
                "provider.security_group.GroupName",
                format!("must be a group name, got {v}"),
            ));
        }
    };
    let extra = match sg.get("IpPermissions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            for (i, p) in a.iter().enumerate() {
                ip_permission(p, &format!("provider.security_group.IpPermissions[{i}]"))?;
            }
            a.clone()
        }
        Some(v) => {
            return Err(AwsError::config(
                "provider.security_group.IpPermissions",
                format!("must be a list of EC2 IpPermission mappings, got {v}"),
            ));
        }
    };
    Ok((name, extra))
}

/// Checks `provider.security_group` where the config loads (a wrong shape is an error
/// naming its path, before anything is launched).
pub fn check_security_group(config: &ClusterConfig) -> Result<(), AwsError> {
    security_group_settings(config).map(|_| ())
}

/// One inbound rule in boto3's shape, as the SDK's `IpPermission`; an unknown key or a
/// wrong type is an error at `path`.
fn ip_permission(v: &Value, path: &str) -> Result<ec2::IpPermission, AwsError> {
    let o = v
        .as_object()
        .ok_or_else(|| AwsError::config(path, format!("must be a mapping, got {v}")))?;
    let s = |k: &str| -> Result<Option<String>, AwsError> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(AwsError::config(
                format!("{path}.{k}"),
                format!("must be a string, got {v}"),
            )),
        }
    };
    let port = |k: &str| -> Result<Option<i32>, AwsError> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    AwsError::config(
                        format!("{path}.{k}"),
                        format!("must be a port number, got {v}"),
                    )
                }),
        }
    };
    let list = |k: &str| -> Result<Vec<(String, Option<String>)>, AwsError> {
        let inner = match k {
            "IpRanges" => "CidrIp",
            "Ipv6Ranges" => "CidrIpv6",
            "UserIdGroupPairs" => "GroupId",
            _ => "PrefixListId",
        };
        let Some(v) = o.get(k) else {
            return Ok(Vec::new());
        };
        let a = v.as_array().ok_or_else(|| {
            AwsError::config(format!("{path}.{k}"), format!("must be a list, got {v}"))
        })?;
        a.iter()
            .enumerate()
            .map(|(i, e)| {
                let at = format!("{path}.{k}[{i}]");
                let id = e.get(inner).and_then(Value::as_str).ok_or_else(|| {
                    AwsError::config(&at, format!("needs {inner} (a string), got {e}"))
                })?;
                if let Some(bad) = e
                    .as_object()
                    .and_then(|m| m.keys().find(|x| *x != inner && *x != "Description"))
                {
                    return Err(AwsError::config(
                        format!("{at}.{bad}"),
                        format!("unknown key (known: {inner}, Description)"),
                    ));
                }
                let d = e
                    .get("Description")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Ok((id.to_string(), d))
            })
            .collect()
    };
    const KNOWN: &[&str] = &[
        "IpProtocol",
        "FromPort",
        "ToPort",
        "IpRanges",
        "Ipv6Ranges",
        "UserIdGroupPairs",
        "PrefixListIds",
    ];
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(AwsError::config(
            format!("{path}.{k}"),
            format!("unknown key (known: {})", KNOWN.join(", ")),
        ));
    }
    let protocol = s("IpProtocol")?
        .ok_or_else(|| AwsError::config(format!("{path}.IpProtocol"), "is required"))?;
    let mut b = ec2::IpPermission::builder()
        .ip_protocol(protocol)
        .set_from_port(port("FromPort")?)
        .set_to_port(port("ToPort")?);
    for (id, d) in list("IpRanges")? {
        b = b.ip_ranges(
            ec2::IpRange::builder()
                .cidr_ip(id)
                .set_description(d)
                .build(),
        );
    }
    for (id, d) in list("Ipv6Ranges")? {
        b = b.ipv6_ranges(
            ec2::Ipv6Range::builder()
                .cidr_ipv6(id)
                .set_description(d)
                .build(),
        );
    }
    for (id, d) in list("UserIdGroupPairs")? {
        b = b.user_id_group_pairs(
            ec2::UserIdGroupPair::builder()
                .group_id(id)
                .set_description(d)
                .build(),
        );
    }
    for (id, d) in list("PrefixListIds")? {
        b = b.prefix_list_ids(
            ec2::PrefixListId::builder()
                .prefix_list_id(id)
                .set_description(d)
                .build(),
        );
    }
    Ok(b.build())
}

/// Whether node type `nc`'s network comes from a key the bootstrap leaves alone.
fn network_given(nc: &Value) -> bool {
    ["NetworkInterfaces", "LaunchTemplate", "SubnetId"]
        .iter()
        .any(|k| nc.get(*k).is_some())
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `config` with its node types' `SubnetIds` and `SecurityGroupIds` filled in as Ray's
/// bootstrap fills them (see the module's docs); the security group is made in EC2 when
/// missing.
pub async fn bootstrap(client: &Client, config: &ClusterConfig) -> Result<ClusterConfig, AwsError> {
    let (group_name, extra) = security_group_settings(config)?;
    let provider = config.raw.get("provider");
    let use_internal_ips = provider
        .and_then(|p| p.get("use_internal_ips"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let zones: Vec<String> = provider
        .and_then(|p| p.get("availability_zone"))
        .and_then(Value::as_str)
        .map(|z| {
            z.split(',')
                .map(str::trim)
                .filter(|z| !z.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut raw = config.raw.clone();
    let types: Vec<String> = config.node_types.iter().map(|t| t.name.clone()).collect();
    let nc = |raw: &Value, t: &str| raw["available_node_types"][t]["node_config"].clone();
    let configured: Vec<&String> = types
        .iter()
        .filter(|t| !network_given(&nc(&raw, t)))
        .collect();
    if configured.is_empty() {
        return Ok(config.clone());
    }
    let given_groups: BTreeSet<String> = types
        .iter()
        .flat_map(|t| strings(nc(&raw, t).get("SecurityGroupIds")))
        .collect();
    let vpc_of_groups = if given_groups.is_empty() {
        None
    } else {
        let vpcs: BTreeSet<String> =
            describe_groups(client, "group-id", given_groups.iter().cloned().collect())
                .await?
                .iter()
                .filter_map(|g| g.vpc_id().map(str::to_string))
                .collect();
        match vpcs.len() {
            0 => {
                return Err(AwsError::config(
                    "available_node_types",
                    format!(
                        "EC2 has none of the security groups the node configs name ({given_groups:?})"
                    ),
                ));
            }
            1 => vpcs.into_iter().next(),
            _ => {
                return Err(AwsError::config(
                    "available_node_types",
                    format!(
                        "the node configs' security groups are in more than one VPC ({vpcs:?})"
                    ),
                ));
            }
        }
    };
    let subnets = describe_subnets(client).await?;
    // Types with the user's subnets first: the last one's VPC is the one the others use.
    let mut vpc_lock = vpc_of_groups.clone();
    let mut vpc_of_type = std::collections::BTreeMap::new();
    for t in configured
        .iter()
        .filter(|t| nc(&raw, t).get("SubnetIds").is_some())
    {
        let user = strings(nc(&raw, t).get("SubnetIds"));
        let (_, vpc) = usable_subnets(
            &subnets,
            Some(&user),
            &zones,
            vpc_of_groups.as_deref(),
            use_internal_ips,
            t,
        )?;
        vpc_of_type.insert((*t).clone(), vpc.clone());
        if vpc_of_groups.is_none() {
            vpc_lock = Some(vpc);
        }
    }
    let without_subnets: Vec<&String> = configured
        .iter()
        .copied()
        .filter(|t| nc(&raw, t).get("SubnetIds").is_none())
        .collect();
    for t in without_subnets {
        let (ids, vpc) = usable_subnets(
            &subnets,
            None,
            &zones,
            vpc_lock.as_deref(),
            use_internal_ips,
            t,
        )?;
        raw["available_node_types"][t.as_str()]["node_config"]["SubnetIds"] = json!(ids);
        vpc_of_type.insert((*t).clone(), vpc);
    }
    // The security group of each VPC a type without groups launches into.
    let need: Vec<&String> = configured
        .iter()
        .copied()
        .filter(|t| nc(&raw, t).get("SecurityGroupIds").is_none())
        .collect();
    let vpcs: BTreeSet<String> = need
        .iter()
        .filter_map(|t| vpc_of_type.get(*t).cloned())
        .collect();
    let mut group_of_vpc = std::collections::BTreeMap::new();
    let mut made_or_found = Vec::new();
    for vpc in &vpcs {
        let found = describe_groups(client, "vpc-id", vec![vpc.clone()])
            .await?
            .into_iter()
            .find(|g| g.group_name() == Some(group_name.as_str()));
        let (id, has_rules) = match found {
            Some(g) => (
                g.group_id().unwrap_or_default().to_string(),
                !g.ip_permissions().is_empty(),
            ),
            None => (create_group(client, config, vpc, &group_name).await?, false),
        };
        group_of_vpc.insert(vpc.clone(), id.clone());
        made_or_found.push((id, has_rules));
    }
    let mut cluster_groups: BTreeSet<String> = group_of_vpc.values().cloned().collect();
    cluster_groups.extend(given_groups);
    for (id, has_rules) in &made_or_found {
        if *has_rules {
            continue;
        }
        let rules = inbound_rules(&cluster_groups, &extra)
            .iter()
            .enumerate()
            .map(|(i, r)| ip_permission(r, &format!("provider.security_group.IpPermissions[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        client
            .authorize_security_group_ingress()
            .group_id(id)
            .set_ip_permissions(Some(rules))
            .send()
            .await
            .map_err(|e| sdk_error("AuthorizeSecurityGroupIngress", e, "", None))?;
        tracing::info!("security group {id} ({group_name}): Ray's inbound rules added");
    }
    for t in need {
        if let Some(g) = vpc_of_type.get(t).and_then(|v| group_of_vpc.get(v)) {
            raw["available_node_types"][t.as_str()]["node_config"]["SecurityGroupIds"] = json!([g]);
        }
    }
    config.with_raw(&raw).map_err(|e| {
        AwsError::config(
            "available_node_types",
            format!("with subnets and security groups filled in: {e}"),
        )
    })
}

async fn describe_subnets(client: &Client) -> Result<Vec<SubnetFacts>, AwsError> {
    let mut out = Vec::new();
    let mut pages = client.describe_subnets().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("DescribeSubnets", e, "", None))?;
        for s in page.subnets() {
            let (Some(id), Some(vpc), Some(zone)) =
                (s.subnet_id(), s.vpc_id(), s.availability_zone())
            else {
                continue;
            };
            out.push(SubnetFacts {
                id: id.to_string(),
                vpc: vpc.to_string(),
                zone: zone.to_string(),
                available: s.state() == Some(&ec2::SubnetState::Available),
                public: s.map_public_ip_on_launch() == Some(true),
            });
        }
    }
    Ok(out)
}

async fn describe_groups(
    client: &Client,
    filter: &str,
    values: Vec<String>,
) -> Result<Vec<ec2::SecurityGroup>, AwsError> {
    let mut out = Vec::new();
    let mut pages = client
        .describe_security_groups()
        .filters(
            ec2::Filter::builder()
                .name(filter)
                .set_values(Some(values))
                .build(),
        )
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("DescribeSecurityGroups", e, "", None))?;
        out.extend(page.security_groups().iter().cloned());
    }
    Ok(out)
}

async fn create_group(
    client: &Client,
    config: &ClusterConfig,
    vpc: &str,
    name: &str,
) -> Result<String, AwsError> {
    let tag = |k: &str, v: &str| ec2::Tag::builder().key(k).value(v).build();
    let out = client
        .create_security_group()
        .description("Auto-created security group for Ray workers")
        .group_name(name)
        .vpc_id(vpc)
        .tag_specifications(
            ec2::TagSpecification::builder()
                .resource_type(ec2::ResourceType::SecurityGroup)
                .tags(tag("ray-autoscaler", "true"))
                .tags(tag("ray-cluster-name", &config.cluster_name))
                .build(),
        )
        .send()
        .await
        .map_err(|e| sdk_error("CreateSecurityGroup", e, "", None))?;
    let id = out.group_id().ok_or_else(|| {
        AwsError::config(
            "provider.security_group",
            "EC2 made the group but gave no id",
        )
    })?;
    tracing::info!("security group {id} ({name}) created in {vpc}");
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn subnet(id: &str, vpc: &str, zone: &str, public: bool) -> SubnetFacts {
        SubnetFacts {
            id: id.into(),
            vpc: vpc.into(),
            zone: zone.into(),
            available: true,
            public,
        }
    }

    #[test]
    fn subnets_are_picked_as_rays_bootstrap_picks_them() {
        let all = [
            subnet("s-a", "v1", "us-west-2a", true),
            subnet("s-c", "v1", "us-west-2c", true),
            subnet("s-b", "v1", "us-west-2b", true),
            subnet("s-priv", "v1", "us-west-2d", false),
            subnet("s-other", "v2", "us-west-2a", true),
        ];
        // Z to A, public only, one VPC: the first one's.
        let (ids, vpc) = usable_subnets(&all, None, &[], None, false, "w").unwrap();
        assert_eq!(ids, ["s-c", "s-b", "s-a"]);
        assert_eq!(vpc, "v1");
        // With use_internal_ips the private one (zone d) leads.
        let (ids, _) = usable_subnets(&all, None, &[], None, true, "w").unwrap();
        assert_eq!(ids[0], "s-priv");
        // The zones' order wins over Z to A.
        let zones = ["us-west-2a".to_string(), "us-west-2c".to_string()];
        let (ids, _) = usable_subnets(&all, None, &zones, None, false, "w").unwrap();
        assert_eq!(
            ids,
            ["s-a", "s-c"],
            "the first zone's subnets, then the next's"
        );
        // The security groups' VPC.
        let (ids, vpc) = usable_subnets(&all, None, &[], Some("v2"), false, "w").unwrap();
        assert_eq!((ids, vpc), (vec!["s-other".to_string()], "v2".to_string()));
        // The user's subnets must all be usable, and in one VPC.
        let e = usable_subnets(
            &all,
            Some(&["s-a".into(), "s-priv".into()]),
            &[],
            None,
            false,
            "w",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("available_node_types.w.node_config.SubnetIds: some of these"),
            "{e}"
        );
        let e = usable_subnets(
            &all,
            Some(&["s-a".into(), "s-other".into()]),
            &[],
            None,
            false,
            "w",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than one VPC"), "{e}");
        let e = usable_subnets(&all, Some(&["s-x".into()]), &[], None, false, "w")
            .unwrap_err()
            .to_string();
        assert!(e.contains("EC2 has no subnet s-x"), "{e}");
        let e = usable_subnets(&all, None, &["eu-west-1a".into()], None, false, "w")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no usable subnet in provider.availability_zone"),
            "{e}"
        );
    }

    #[test]
    fn rules_are_rays_and_a_bad_extra_rule_names_its_path() {
        let groups: BTreeSet<String> = ["sg-2".to_string(), "sg-1".to_string()].into();
        let extra = vec![
            json!({"IpProtocol": "tcp", "FromPort": 8265, "ToPort": 8265,
                                "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}),
        ];
        let r = inbound_rules(&groups, &extra);
        assert_eq!(
            r[0]["UserIdGroupPairs"],
            json!([{"GroupId": "sg-1"}, {"GroupId": "sg-2"}])
        );
        assert_eq!(r[1]["FromPort"], 22);
        assert_eq!(r[2]["FromPort"], 8265);
        for (i, rule) in r.iter().enumerate() {
            ip_permission(rule, &format!("r[{i}]")).unwrap();
        }
        let cfg = |sg: &str| {
            ClusterConfig::from_yaml_str(
                &format!(
                    "cluster_name: c\nprovider: {{type: aws, region: us-west-2, security_group: {sg}}}\n\
                     head_node_type: h\navailable_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
                ),
                "t.yaml",
            )
            .unwrap()
        };
        assert!(check_security_group(&cfg("{GroupName: g}")).is_ok());
        let e = check_security_group(&cfg("{IpPermissions: [{IpProtocol: tcp, FromPort: x}]}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("provider.security_group.IpPermissions[0].FromPort: must be a port"),
            "{e}"
        );
        let e = check_security_group(&cfg(
            "{IpPermissions: [{IpProtocol: tcp, IpRanges: [{Cidr: x}]}]}",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("provider.security_group.IpPermissions[0].IpRanges[0]: needs CidrIp"),
            "{e}"
        );
    }
}
