//! The `node_config` keys rayscale passes to RunInstances as they are: every RunInstances
//! member of botocore's EC2 model that the typed [`NodeConfig`](crate::NodeConfig) does not
//! carry (`CpuOptions`, `HibernationOptions`, `CreditSpecification`, `Monitoring`,
//! `PrivateIpAddress`, ...; the list is [`table::MEMBERS`], generated from botocore). Ray's
//! AWS provider hands `node_config` to boto3's `create_instances` unchanged, so these reach
//! EC2 there too.
//!
//! Pure: a value is checked against the member's shape at load (unknown keys, wrong types
//! and enum values are one-line errors naming the path) and flattened into EC2 Query form
//! pairs as botocore's EC2 serializer writes them (`Prefix.Member`, lists `Prefix.N`,
//! booleans `true`/`false`). The provider appends the pairs to the RunInstances body
//! before it is signed ([`append_form`]); the SDK never sees them.
//!
//! The same goes for the nested keys of a typed member that its struct does not carry
//! (`Placement.AvailabilityZoneId`, `NetworkInterfaces[i].Ipv6AddressCount`,
//! `BlockDeviceMappings[i].Ebs.VolumeInitializationRate`, `SpotOptions.ValidUntil`, ...,
//! [`TYPED_NESTED`] against [`table::NESTED`]): [`split_typed`] keeps the rest at its
//! place, so its pairs (`NetworkInterface.1.Ipv6AddressCount`) join the SDK's own.

use serde_json::Value;

use crate::AwsError;

#[rustfmt::skip]
mod table;

pub use table::{MEMBERS, NESTED};

/// What a member takes, as botocore's model says.
#[derive(Debug)]
pub enum Shape {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// `true` or `false`.
    Bool,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// A time, written `YYYY-MM-DDTHH:MM:SSZ` (UTC): what botocore's serializer writes.
    Timestamp,
    /// A structure of these members.
    Struct(&'static [Member]),
    /// A list of this shape.
    List(&'static Shape),
}

/// One member: its `node_config` (boto3) name, its Query name, its shape.
#[derive(Debug)]
pub struct Member {
    /// As boto3 and `node_config` spell it.
    pub name: &'static str,
    /// As EC2's Query protocol spells it.
    pub query: &'static str,
    /// What it takes.
    pub shape: &'static Shape,
}

/// The passed-through member `name`, if it is one.
pub fn member(name: &str) -> Option<&'static Member> {
    MEMBERS.iter().find(|m| m.name == name)
}

/// What a typed struct carries of a typed member: a value, a structure of these keys, a
/// list of one shape. [`split_typed`] keeps what it carries for the struct.
#[derive(Debug)]
pub enum Typed {
    /// A value the struct takes.
    Leaf,
    /// A structure: the keys the struct carries.
    Struct(&'static [(&'static str, Typed)]),
    /// A list of this.
    List(&'static Typed),
}

const EBS_TYPED: &[(&str, Typed)] = &[
    ("VolumeSize", Typed::Leaf),
    ("VolumeType", Typed::Leaf),
    ("DeleteOnTermination", Typed::Leaf),
    ("Iops", Typed::Leaf),
    ("Throughput", Typed::Leaf),
    ("Encrypted", Typed::Leaf),
    ("KmsKeyId", Typed::Leaf),
    ("SnapshotId", Typed::Leaf),
];

/// The typed members whose nested keys [`BlockDevice`](crate::config::BlockDevice), [`MarketOptions`](crate::config::MarketOptions),
/// [`NetworkInterface`](crate::config::NetworkInterface) and [`PlacementConfig`](crate::config::PlacementConfig) do not all carry, and what they carry.
pub const TYPED_NESTED: &[(&str, Typed)] = &[
    (
        "BlockDeviceMappings",
        Typed::List(&Typed::Struct(&[
            ("DeviceName", Typed::Leaf),
            ("VirtualName", Typed::Leaf),
            ("NoDevice", Typed::Leaf),
            ("Ebs", Typed::Struct(EBS_TYPED)),
        ])),
    ),
    (
        "InstanceMarketOptions",
        Typed::Struct(&[
            ("MarketType", Typed::Leaf),
            (
                "SpotOptions",
                Typed::Struct(&[
                    ("MaxPrice", Typed::Leaf),
                    ("SpotInstanceType", Typed::Leaf),
                    ("InstanceInterruptionBehavior", Typed::Leaf),
                ]),
            ),
        ]),
    ),
    (
        "NetworkInterfaces",
        Typed::List(&Typed::Struct(&[
            ("DeviceIndex", Typed::Leaf),
            ("SubnetId", Typed::Leaf),
            ("Groups", Typed::Leaf),
            ("AssociatePublicIpAddress", Typed::Leaf),
            ("DeleteOnTermination", Typed::Leaf),
            ("Description", Typed::Leaf),
            ("InterfaceType", Typed::Leaf),
            ("NetworkCardIndex", Typed::Leaf),
            ("NetworkInterfaceId", Typed::Leaf),
        ])),
    ),
    (
        "Placement",
        Typed::Struct(&[
            ("AvailabilityZone", Typed::Leaf),
            ("GroupName", Typed::Leaf),
            ("GroupId", Typed::Leaf),
            ("Tenancy", Typed::Leaf),
            ("PartitionNumber", Typed::Leaf),
            ("HostId", Typed::Leaf),
            ("Affinity", Typed::Leaf),
        ]),
    ),
];

/// `v` split by `t` into what the typed struct carries and the rest (`None` when
/// nothing is left), the rest keeping each list item's place (an item with nothing left
/// is `{}`), so that it flattens to the same `Prefix.N` positions. A value of the wrong
/// kind goes to the typed side, whose parse names it.
pub fn split_typed(v: &Value, t: &Typed) -> (Value, Option<Value>) {
    match (t, v) {
        (Typed::Struct(keys), Value::Object(o)) => {
            let (mut typed, mut rest) = (serde_json::Map::new(), serde_json::Map::new());
            for (k, sub) in o {
                match keys.iter().find(|(name, _)| name == k) {
                    Some((_, inner)) => {
                        let (ts, rs) = split_typed(sub, inner);
                        typed.insert(k.clone(), ts);
                        if let Some(r) = rs {
                            rest.insert(k.clone(), r);
                        }
                    }
                    None => {
                        rest.insert(k.clone(), sub.clone());
                    }
                }
            }
            (
                Value::Object(typed),
                (!rest.is_empty()).then_some(Value::Object(rest)),
            )
        }
        (Typed::List(item), Value::Array(items)) => {
            let (typed, rest): (Vec<Value>, Vec<Option<Value>>) =
                items.iter().map(|i| split_typed(i, item)).unzip();
            let any = rest.iter().any(Option::is_some);
            (
                Value::Array(typed),
                any.then(|| {
                    Value::Array(
                        rest.into_iter()
                            .map(|r| r.unwrap_or_else(|| Value::Object(Default::default())))
                            .collect(),
                    )
                }),
            )
        }
        _ => (v.clone(), None),
    }
}

/// The typed member `name` whose nested keys may be passed through, if it is one.
pub fn nested(name: &str) -> Option<&'static Member> {
    NESTED.iter().find(|m| m.name == name)
}

/// Whether `s` is a UTC time as botocore's EC2 serializer writes one
/// (`YYYY-MM-DDTHH:MM:SSZ`).
fn utc_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'Z'
}

/// `v`, the `node_config` value of member `m` at `path`, as EC2 Query form pairs.
pub fn flatten(m: &Member, v: &Value, path: &str) -> Result<Vec<(String, String)>, AwsError> {
    let mut out = Vec::new();
    walk(m.shape, v, m.query, path, &mut out)?;
    Ok(out)
}

fn walk(
    shape: &Shape,
    v: &Value,
    prefix: &str,
    path: &str,
    out: &mut Vec<(String, String)>,
) -> Result<(), AwsError> {
    let bad = |what: &str| AwsError::config(path, format!("expected {what}, got {v}"));
    match shape {
        Shape::Str => out.push((
            prefix.into(),
            v.as_str().ok_or_else(|| bad("a string"))?.into(),
        )),
        // As botocore's validation: an integer, not a float that looks like one.
        Shape::Int => out.push((
            prefix.into(),
            v.as_i64().ok_or_else(|| bad("an integer"))?.to_string(),
        )),
        Shape::Bool => out.push((
            prefix.into(),
            v.as_bool().ok_or_else(|| bad("true or false"))?.to_string(),
        )),
        Shape::Timestamp => {
            let s = v
                .as_str()
                .ok_or_else(|| bad("a time (YYYY-MM-DDTHH:MM:SSZ)"))?;
            if !utc_time(s) {
                return Err(AwsError::config(
                    path,
                    format!("{s:?}: write the time in UTC as YYYY-MM-DDTHH:MM:SSZ"),
                ));
            }
            out.push((prefix.into(), s.into()));
        }
        Shape::Enum(values) => {
            let s = v.as_str().ok_or_else(|| bad("a string"))?;
            if !values.contains(&s) {
                return Err(AwsError::config(
                    path,
                    format!("{s:?} is not one of {}", values.join(", ")),
                ));
            }
            out.push((prefix.into(), s.into()));
        }
        Shape::Struct(members) => {
            let obj = v.as_object().ok_or_else(|| bad("a mapping"))?;
            for (k, sub) in obj {
                let Some(m) = members.iter().find(|m| m.name == k) else {
                    let known: Vec<&str> = members.iter().map(|m| m.name).collect();
                    return Err(AwsError::config(
                        format!("{path}.{k}"),
                        format!("unknown key (known: {})", known.join(", ")),
                    ));
                };
                walk(
                    m.shape,
                    sub,
                    &format!("{prefix}.{}", m.query),
                    &format!("{path}.{k}"),
                    out,
                )?;
            }
        }
        Shape::List(item) => {
            let items = v.as_array().ok_or_else(|| bad("a list"))?;
            for (i, sub) in items.iter().enumerate() {
                walk(
                    item,
                    sub,
                    &format!("{prefix}.{}", i + 1),
                    &format!("{path}[{i}]"),
                    out,
                )?;
            }
        }
    }
    Ok(())
}

/// A form body (`application/x-www-form-urlencoded`) with `extra` appended.
pub fn append_form(body: &[u8], extra: &[(String, String)]) -> Vec<u8> {
    let mut out = body.to_vec();
    for (k, v) in extra {
        if !out.is_empty() {
            out.push(b'&');
        }
        out.extend(encode(k).bytes());
        out.push(b'=');
        out.extend(encode(v).bytes());
    }
    out
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(name: &str, v: Value) -> Result<Vec<(String, String)>, AwsError> {
        flatten(member(name).expect("a member"), &v, &format!("nc.{name}"))
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every key a typed struct carries is botocore's; what it lacks goes through at its
    /// place, as botocore's EC2 serializer writes it (the expected pairs are botocore
    /// 1.44.18's `serialize_to_request` of the same parameters).
    #[test]
    fn typed_members_pass_the_nested_keys_they_lack_at_their_place() {
        fn check(t: &Typed, s: &Shape, path: &str) {
            match (t, s) {
                (Typed::Leaf, _) => {}
                (Typed::Struct(keys), Shape::Struct(members)) => {
                    for (k, inner) in *keys {
                        let m = members
                            .iter()
                            .find(|m| m.name == *k)
                            .unwrap_or_else(|| panic!("{path}.{k} is not botocore's"));
                        check(inner, m.shape, &format!("{path}.{k}"));
                    }
                }
                (Typed::List(i), Shape::List(s)) => check(i, s, &format!("{path}[]")),
                _ => panic!("{path}: not the shape botocore gives"),
            }
        }
        for (name, t) in TYPED_NESTED {
            check(t, nested(name).expect("in the table").shape, name);
        }
        let through = |name: &str, v: Value| {
            let (_, t) = TYPED_NESTED
                .iter()
                .find(|(k, _)| *k == name)
                .expect("typed");
            let (typed, rest) = split_typed(&v, t);
            let pairs = rest
                .map(|r| flatten(nested(name).expect("nested"), &r, "nc").expect("flattens"))
                .unwrap_or_default();
            (typed, pairs)
        };
        let (typed, p) = through(
            "NetworkInterfaces",
            json!([{"DeviceIndex": 0, "SubnetId": "s"},
                {"DeviceIndex": 1, "Ipv6AddressCount": 2, "EnaSrdSpecification": {"EnaSrdEnabled": true},
                 "PrivateIpAddresses": [{"Primary": true, "PrivateIpAddress": "10.0.0.5"}]}]),
        );
        assert_eq!(
            typed,
            json!([{"DeviceIndex": 0, "SubnetId": "s"}, {"DeviceIndex": 1}])
        );
        assert_eq!(
            p,
            pairs(&[
                ("NetworkInterface.2.Ipv6AddressCount", "2"),
                (
                    "NetworkInterface.2.EnaSrdSpecification.EnaSrdEnabled",
                    "true"
                ),
                ("NetworkInterface.2.PrivateIpAddresses.1.Primary", "true"),
                (
                    "NetworkInterface.2.PrivateIpAddresses.1.PrivateIpAddress",
                    "10.0.0.5"
                ),
            ])
        );
        let (typed, p) = through("Placement", json!({"AvailabilityZoneId": "usw2-az1"}));
        assert_eq!(
            (typed, p),
            (
                json!({}),
                pairs(&[("Placement.AvailabilityZoneId", "usw2-az1")])
            )
        );
        let (_, p) = through(
            "InstanceMarketOptions",
            json!({"MarketType": "spot", "SpotOptions": {"ValidUntil": "2026-12-31T00:00:00Z", "BlockDurationMinutes": 60}}),
        );
        assert_eq!(
            p,
            pairs(&[
                (
                    "InstanceMarketOptions.SpotOptions.ValidUntil",
                    "2026-12-31T00:00:00Z"
                ),
                (
                    "InstanceMarketOptions.SpotOptions.BlockDurationMinutes",
                    "60"
                ),
            ])
        );
        let (typed, p) = through(
            "BlockDeviceMappings",
            json!([{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 10, "VolumeInitializationRate": 300}}]),
        );
        assert_eq!(
            typed,
            json!([{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 10}}])
        );
        assert_eq!(
            p,
            pairs(&[("BlockDeviceMapping.1.Ebs.VolumeInitializationRate", "300")])
        );
        // A time not in botocore's form, and a key botocore lacks, name their path.
        let (_, t) = &TYPED_NESTED[1];
        let (_, rest) = split_typed(&json!({"SpotOptions": {"ValidUntil": "tomorrow"}}), t);
        let e = flatten(
            nested("InstanceMarketOptions").expect("nested"),
            &rest.expect("rest"),
            "nc",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("nc.SpotOptions.ValidUntil: \"tomorrow\""),
            "{e}"
        );
    }

    #[test]
    fn members_flatten_as_botocores_ec2_serializer_writes_them() {
        assert_eq!(
            form("CpuOptions", json!({"CoreCount": 2, "ThreadsPerCore": 1})).unwrap(),
            pairs(&[
                ("CpuOptions.CoreCount", "2"),
                ("CpuOptions.ThreadsPerCore", "1")
            ])
        );
        // A locationName, capitalised, is the key.
        assert_eq!(
            form("DisableApiTermination", json!(true)).unwrap(),
            pairs(&[("DisableApiTermination", "true")])
        );
        // Lists are flattened under the member's location name.
        assert_eq!(
            form(
                "LicenseSpecifications",
                json!([{"LicenseConfigurationArn": "arn:a"}, {"LicenseConfigurationArn": "arn:b"}])
            )
            .unwrap(),
            pairs(&[
                ("LicenseSpecification.1.LicenseConfigurationArn", "arn:a"),
                ("LicenseSpecification.2.LicenseConfigurationArn", "arn:b"),
            ])
        );
        assert_eq!(
            form("SecurityGroups", json!(["default", "web"])).unwrap(),
            pairs(&[("SecurityGroup.1", "default"), ("SecurityGroup.2", "web")])
        );
    }

    #[test]
    fn a_wrong_value_is_a_one_line_error_naming_its_path() {
        let e = form("CpuOptions", json!({"CoreCnt": 2}))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("nc.CpuOptions.CoreCnt: unknown key (known: CoreCount"),
            "{e}"
        );
        let e = form("CpuOptions", json!({"CoreCount": 2.5}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected an integer"), "{e}");
        let e = form("CpuOptions", json!({"CoreCount": "two"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("nc.CpuOptions.CoreCount: expected an integer"),
            "{e}"
        );
        let e = form("InstanceInitiatedShutdownBehavior", json!("explode"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"explode\" is not one of stop, terminate"),
            "{e}"
        );
        let e = form("Monitoring", json!({"Enabled": "yes"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("nc.Monitoring.Enabled: expected true or false"),
            "{e}"
        );
    }

    #[test]
    fn the_typed_keys_and_rayscales_own_are_not_in_the_table() {
        for k in crate::config::NODE_CONFIG_KEYS.iter().chain(&[
            "MinCount",
            "MaxCount",
            "ClientToken",
            "DryRun",
        ]) {
            assert!(member(k).is_none(), "{k}");
        }
    }

    #[test]
    fn extra_pairs_are_appended_encoded() {
        let body = append_form(
            b"Action=RunInstances&Version=2016-11-15",
            &pairs(&[("AdditionalInfo", "a b&c=d/é")]),
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "Action=RunInstances&Version=2016-11-15&AdditionalInfo=a%20b%26c%3Dd%2F%C3%A9"
        );
    }
}
