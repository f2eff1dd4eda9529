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

use serde_json::Value;

use crate::AwsError;

#[rustfmt::skip]
mod table;

pub use table::MEMBERS;

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
