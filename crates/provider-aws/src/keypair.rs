//! The key pair of Ray's AWS bootstrap (`ray up`'s `_configure_key_pair`), run by
//! `rayscale up` before it launches the head, so that a user can SSH into the nodes of a
//! cluster rayscale launched as into one `ray up` launched, with the same key file.
//!
//! When the YAML gives no `auth.ssh_private_key`, the node types without a `KeyName` get
//! the cluster's key pair: `provider.key_pair.key_name`, else `ray-autoscaler_<region>`;
//! when EC2 has that name but this machine has no `~/.ssh/<name>.pem` (or the other way
//! round) the next name is tried (`ray-autoscaler_<i>_<region>`, `<key_name>_key-<i>`), as
//! Ray tries them, so a key `ray up` made on this machine is found and used. A key made here
//! is written to `~/.ssh/<name>.pem` with mode 0600 before anything uses it. `down` leaves
//! it, as `ray down` does.
//!
//! Two differences from Ray, both for the user's YAML to win: a type that names its own
//! `KeyName` keeps it (Ray overwrites it), and with `auth.ssh_private_key` given nothing is
//! checked (Ray asserts that every type without `UserData` names a `KeyName`; rayscale
//! never SSHes into nodes, it boots them from user data). As Ray's, the config's
//! `auth.ssh_private_key` becomes the key's path: Ray hashes the key's text into each
//! node's `ray-launch-config` tag, so the head's tag is the one `ray up` computes for the
//! same YAML (and `ray up` run over the cluster does not relaunch the head).

use std::io::Write;
use std::path::{Path, PathBuf};

use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types as ec2;
use rayscale_core::config::ClusterConfig;
use serde_json::{Value, json};

use crate::AwsError;
use crate::client::sdk_error;

/// How many names are tried before giving up (Ray's `MAX_NUM_KEYS`).
pub const MAX_KEY_NAMES: u32 = 600;

/// The `i`-th name Ray's bootstrap tries for the cluster's key pair in `region`
/// (`key_name`: `provider.key_pair.key_name`).
pub fn key_pair_name(i: u32, region: &str, key_name: Option<&str>) -> String {
    match (i, key_name) {
        (0, None) => format!("ray-autoscaler_{region}"),
        (0, Some(k)) => k.to_string(),
        (i, None) => format!("ray-autoscaler_{i}_{region}"),
        (i, Some(k)) => format!("{k}_key-{i}"),
    }
}

/// What to do with the `i`-th name, from what EC2 and this machine have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChoice {
    /// Both have it: use it.
    Use,
    /// Neither has it: make it.
    Make,
    /// Only one has it (a key made elsewhere, or a file left over): try the next name.
    Next,
}

/// Ray's rule for one name.
pub fn choose(in_ec2: bool, on_disk: bool) -> KeyChoice {
    match (in_ec2, on_disk) {
        (true, true) => KeyChoice::Use,
        (false, false) => KeyChoice::Make,
        _ => KeyChoice::Next,
    }
}

/// `provider.key_pair.key_name`, checked (the config reader calls this at load).
pub fn key_name(config: &ClusterConfig) -> Result<Option<String>, AwsError> {
    let Some(kp) = config.raw.get("provider").and_then(|p| p.get("key_pair")) else {
        return Ok(None);
    };
    let obj = match kp {
        Value::Null => return Ok(None),
        Value::Object(m) => m,
        other => {
            return Err(AwsError::config(
                "provider.key_pair",
                format!("expected a mapping ({{key_name: ...}}), got {other}"),
            ));
        }
    };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "key_name") {
        return Err(AwsError::config(
            format!("provider.key_pair.{k}"),
            "unknown key (known: key_name)",
        ));
    }
    match obj.get("key_name") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(other) => Err(AwsError::config(
            "provider.key_pair.key_name",
            format!("expected a non-empty string, got {other}"),
        )),
    }
}

/// The node types that get the cluster's key pair: none when `auth.ssh_private_key` is
/// set, else those without a `KeyName`.
pub fn types_needing_a_key(config: &ClusterConfig) -> Vec<String> {
    let has_private_key = config
        .raw
        .get("auth")
        .and_then(|a| a.get("ssh_private_key"))
        .is_some_and(|k| !k.is_null());
    if has_private_key {
        return Vec::new();
    }
    config
        .node_types
        .iter()
        .filter(|t| {
            config.raw["available_node_types"][t.name.as_str()]["node_config"]
                .get("KeyName")
                .is_none()
        })
        .map(|t| t.name.clone())
        .collect()
}

/// `config` with the cluster's key pair named in each node type that needs one (see the
/// module's docs): found in EC2 with its private key in `ssh_dir`, or made in EC2 and its
/// private key written there. `region` is the client's. Returns the config and, when a
/// key was set, its name and the private key's path.
pub async fn configure_key_pair(
    client: &Client,
    config: &ClusterConfig,
    region: &str,
    ssh_dir: Option<&Path>,
) -> Result<(ClusterConfig, Option<(String, PathBuf)>), AwsError> {
    let types = types_needing_a_key(config);
    if types.is_empty() {
        return Ok((config.clone(), None));
    }
    let Some(ssh_dir) = ssh_dir else {
        return Err(AwsError::config(
            "auth.ssh_private_key",
            "no home directory (HOME is not set) to keep the cluster key pair's private key in: \
             set auth.ssh_private_key and each node_config.KeyName",
        ));
    };
    let base = key_name(config)?;
    let (name, path) = find_or_make(client, region, base.as_deref(), ssh_dir).await?;
    let mut raw = config.raw.clone();
    for t in &types {
        raw["available_node_types"][t.as_str()]["node_config"]["KeyName"] = json!(name);
    }
    if !raw.get("auth").is_some_and(Value::is_object) {
        raw["auth"] = json!({});
    }
    raw["auth"]["ssh_private_key"] = json!(path.display().to_string());
    let config = config.with_raw(&raw).map_err(|e| {
        AwsError::config(
            "available_node_types",
            format!("with KeyName filled in: {e}"),
        )
    })?;
    Ok((config, Some((name, path))))
}

async fn find_or_make(
    client: &Client,
    region: &str,
    base: Option<&str>,
    ssh_dir: &Path,
) -> Result<(String, PathBuf), AwsError> {
    std::fs::create_dir_all(ssh_dir).map_err(|e| {
        AwsError::config(
            "auth.ssh_private_key",
            format!("cannot make {}: {e}", ssh_dir.display()),
        )
    })?;
    for i in 0..MAX_KEY_NAMES {
        let name = key_pair_name(i, region, base);
        let path = ssh_dir.join(format!("{name}.pem"));
        let in_ec2 = key_exists(client, &name).await?;
        match choose(in_ec2, path.exists()) {
            KeyChoice::Use => {
                tracing::info!(
                    "key pair {name}: found in EC2, private key {}",
                    path.display()
                );
                return Ok((name, path));
            }
            KeyChoice::Next => continue,
            KeyChoice::Make => {}
        }
        let made = client.create_key_pair().key_name(&name).send().await;
        let made = match made {
            Ok(m) => m,
            // Made meanwhile by someone else: the next name, as Ray does.
            Err(e) if e.code() == Some("InvalidKeyPair.Duplicate") => continue,
            Err(e) => return Err(sdk_error("CreateKeyPair", e, "", None)),
        };
        let material = made.key_material().ok_or_else(|| {
            AwsError::config(
                "provider.key_pair",
                format!("EC2 made key pair {name} but returned no key material"),
            )
        })?;
        write_private_key(&path, material)?;
        tracing::info!(
            "key pair {name}: made in EC2, private key {}",
            path.display()
        );
        return Ok((name, path));
    }
    Err(AwsError::config(
        "provider.key_pair",
        format!(
            "none of the {MAX_KEY_NAMES} key pair names Ray's bootstrap tries ({} ...) is both in \
             EC2 and in {} or free in both: delete unused key pairs, or set \
             auth.ssh_private_key and node_config.KeyName",
            key_pair_name(0, region, base),
            ssh_dir.display()
        ),
    ))
}

async fn key_exists(client: &Client, name: &str) -> Result<bool, AwsError> {
    // A filter, not KeyNames: an absent name is an empty answer, not an error.
    let out = client
        .describe_key_pairs()
        .filters(ec2::Filter::builder().name("key-name").values(name).build())
        .send()
        .await
        .map_err(|e| sdk_error("DescribeKeyPairs", e, "", None))?;
    Ok(out.key_pairs().iter().any(|k| k.key_name() == Some(name)))
}

/// Writes a new private key file readable by its owner only (never over an existing one).
fn write_private_key(path: &Path, material: &str) -> Result<(), AwsError> {
    let fail = |e: std::io::Error| {
        AwsError::config(
            "provider.key_pair",
            format!("cannot write the private key to {}: {e}", path.display()),
        )
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path).map_err(fail)?;
    f.write_all(material.as_bytes()).map_err(fail)?;
    f.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_rays() {
        assert_eq!(
            key_pair_name(0, "us-west-2", None),
            "ray-autoscaler_us-west-2"
        );
        assert_eq!(
            key_pair_name(3, "us-west-2", None),
            "ray-autoscaler_3_us-west-2"
        );
        assert_eq!(key_pair_name(0, "us-west-2", Some("mine")), "mine");
        assert_eq!(key_pair_name(2, "us-west-2", Some("mine")), "mine_key-2");
    }

    #[test]
    fn a_name_is_used_only_when_both_sides_have_it() {
        assert_eq!(choose(true, true), KeyChoice::Use);
        assert_eq!(choose(false, false), KeyChoice::Make);
        assert_eq!(choose(true, false), KeyChoice::Next);
        assert_eq!(choose(false, true), KeyChoice::Next);
    }

    fn cluster(provider_extra: &str, auth: &str, worker_nc: &str) -> ClusterConfig {
        let yaml = format!(
            "cluster_name: k\nprovider: {{type: aws, region: us-east-1{provider_extra}}}\n\
             auth: {{ssh_user: ubuntu{auth}}}\nhead_node_type: head\n\
             available_node_types:\n  head: {{resources: {{}}, node_config: {{InstanceType: m5.large}}}}\n  \
             w: {{resources: {{CPU: 2}}, max_workers: 2, node_config: {{InstanceType: m5.large{worker_nc}}}}}\n"
        );
        ClusterConfig::from_yaml_str(&yaml, "t").unwrap()
    }

    #[test]
    fn types_without_a_key_name_need_the_clusters_unless_a_private_key_is_given() {
        assert_eq!(types_needing_a_key(&cluster("", "", "")), ["head", "w"]);
        assert_eq!(
            types_needing_a_key(&cluster("", "", ", KeyName: mine")),
            ["head"]
        );
        assert!(types_needing_a_key(&cluster("", ", ssh_private_key: ~/k.pem", "")).is_empty());
    }

    #[test]
    fn key_name_is_checked() {
        assert_eq!(key_name(&cluster("", "", "")).unwrap(), None);
        assert_eq!(
            key_name(&cluster(", key_pair: {key_name: mine}", "", "")).unwrap(),
            Some("mine".into())
        );
        let e = key_name(&cluster(", key_pair: {key_name: 3}", "", ""))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("provider.key_pair.key_name"), "{e}");
        let e = key_name(&cluster(", key_pair: {name: x}", "", ""))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("provider.key_pair.name"), "{e}");
    }

    #[test]
    fn a_private_key_is_written_owner_only_and_never_over_another() {
        let dir = std::env::temp_dir().join(format!("rayscale-kp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k.pem");
        let _ = std::fs::remove_file(&p);
        write_private_key(&p, "SECRET").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "SECRET");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(write_private_key(&p, "OTHER").is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "SECRET");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
