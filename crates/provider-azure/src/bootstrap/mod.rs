//! Ray's Azure bootstrap (`ray up`'s `bootstrap_azure`), run by `rayscale up` before it
//! launches the head, so that a Ray Azure cluster YAML that leaves these out works as it
//! does under `ray up`. Ray deploys an ARM template (`azure-config-template.json`);
//! rayscale makes the same resources, with the same names, one call each, and makes
//! only what is missing:
//!
//! - **the resource group** `provider.resource_group`, in `provider.location` with
//!   `provider.tags`, when it does not exist (an existing group is left as it is, where
//!   Ray's PUT would rewrite its tags).
//! - **the network**, when `provider.subnet` is absent: the security group
//!   `ray-<cluster>-<uid>-nsg` (SSH in, Ray's one rule) and the virtual network
//!   `ray-<cluster>-<uid>-vnet` over Ray's range (`provider.subnet_mask`, else
//!   `10.<n>.0.0/16` with Ray's `n`) with one subnet behind that group. An existing
//!   network of that name is taken as it is; it must hold the subnet. `uid` is
//!   `provider.unique_id`, else Ray's hash of the resource group ([`names::names`]).
//! - **the identity**, when `provider.msi` is absent: the user-assigned identity
//!   `provider.msi_name` in `provider.msi_resource_group` when both are given (someone
//!   else's: it must exist), else `ray-<cluster>-<uid>-msi` in the cluster's group, made
//!   when missing; and Ray's role assignment (`Contributor` on the resource group, named
//!   as Ray names it) for its principal. An assignment of that name left by an identity
//!   made again (a new principal) is deleted and made again, as Ray does. Every VM
//!   carries the identity, so that the head's `rayscale run` may call Azure.
//! - **the SSH key**, when neither `auth.ssh_private_key` nor `auth.ssh_public_key` is
//!   given and a node type names no `publicKey`: Ray's
//!   `~/.ssh/ray-autoscaler_azure_<location>_<rg>_<user>` (and `.pub`), found or made with
//!   `ssh-keygen`, set as `publicKey` (with `adminUsername`) on the types without one.
//!   `up` copies the file mounts with it. As Ray, either of `ssh_private_key` and
//!   `ssh_public_key` without the other is an error (unless every type names its own
//!   `publicKey`, as the config `ray up` writes onto a head does, for the private half).
//!
//! Run again, it finds all of it and changes nothing; `down` leaves it all, as `ray
//! down` does (the group may hold more than the cluster). What rayscale makes carries
//! the `ray-cluster-name` tag.
//!
//! The pure part ([`names`]) derives the names and bodies; [`bootstrap`] asks and
//! rewrites the config.

pub mod names;

use std::path::{Path, PathBuf};
use std::time::Duration;

use azure_core::Method;
use rayscale_core::config::ClusterConfig;
use serde_json::{Map, Value, json};

use crate::AzureError;
use crate::client::{Arm, NETWORK_API_VERSION, Polling};
use crate::config::SUBSCRIPTION_ENV;
use names::Names;

/// The api-version of the resource-group calls (Microsoft.Resources).
pub const RESOURCES_API: &str = "2024-11-01";
/// The api-version of the user-assigned identity calls (Ray's template's).
pub const MSI_API: &str = "2024-11-30";
/// The api-version of the role-assignment calls (Ray's template's).
pub const AUTHORIZATION_API: &str = "2022-04-01";

/// How long a role assignment for a principal Entra ID does not know yet is tried again
/// (an identity just made takes a while to spread).
const PRINCIPAL_SPREAD: Duration = Duration::from_secs(90);

/// How long a network resource's create may run.
const NETWORK_WAIT: Duration = Duration::from_secs(300);

/// What [`bootstrap`] did.
#[derive(Debug)]
pub struct Bootstrap {
    /// The config with `provider.subnet`, `nsg` and `msi` and the key filled in.
    pub config: ClusterConfig,
    /// The names it derived.
    pub names: Names,
    /// What it made (`resource group rg`, ...), in order.
    pub made: Vec<String>,
    /// The subnet id the nodes join, when it set it.
    pub subnet: Option<String>,
    /// The identity id the nodes carry, when it set it.
    pub msi: Option<String>,
    /// The cluster's key (name, private key path), when it set it.
    pub key: Option<(String, PathBuf)>,
}

/// The resource id prefix of group `rg` in `sub`.
fn group_id(sub: &str, rg: &str) -> String {
    format!("/subscriptions/{sub}/resourceGroups/{rg}")
}

/// The codes with which ARM says a resource does not exist (a 404 with another code, or
/// none, is not taken for absence: nothing is made on it).
const ABSENT: &[&str] = &[
    "NotFound",
    "ResourceNotFound",
    "ResourceGroupNotFound",
    "RoleAssignmentNotFound",
];

/// `GET` of `id`, `None` when ARM says it does not exist.
async fn get(
    arm: &Arm,
    call: &'static str,
    id: &str,
    api: &str,
) -> Result<Option<Value>, AzureError> {
    match arm.resource(call, Method::Get, id, api, None).await {
        Ok(a) => Ok(Some(a.body)),
        Err(e) if e.status() == Some(404) && e.code().is_some_and(|c| ABSENT.contains(&c)) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `PUT` of `id` with `body`; waits for the operation it starts, then reads the
/// resource until it is `Succeeded`.
async fn put_and_wait(
    arm: &Arm,
    call: &'static str,
    id: &str,
    api: &str,
    body: &Value,
) -> Result<Value, AzureError> {
    let a = arm.resource(call, Method::Put, id, api, Some(body)).await?;
    let deadline = tokio::time::Instant::now() + NETWORK_WAIT;
    if let Some(op) = &a.operation {
        let polling = Polling {
            initial: Duration::from_millis(500),
            ..Polling::default()
        };
        if !arm
            .wait(call, op, a.retry_after, &polling, deadline, "", None)
            .await?
        {
            return Err(unusable(
                call,
                format!(
                    "{id}: its create could not be seen to end within {NETWORK_WAIT:?} (the \
                     operation ran on, or could not be read); rayscale up again finds it"
                ),
            ));
        }
    }
    let mut delay = Duration::from_secs(1);
    loop {
        let v = get(arm, call, id, api)
            .await?
            .ok_or_else(|| unusable(call, format!("{id} was made and then not found")))?;
        let state = v
            .pointer("/properties/provisioningState")
            .and_then(Value::as_str)
            .ok_or_else(|| unusable(call, format!("{id} has no properties.provisioningState")))?;
        match state {
            "Succeeded" => return Ok(v),
            "Failed" | "Canceled" => {
                return Err(unusable(call, format!("{id} ended {state}")));
            }
            _ if tokio::time::Instant::now() + delay > deadline => {
                return Err(unusable(
                    call,
                    format!("{id} was still {state} after {NETWORK_WAIT:?}"),
                ));
            }
            _ => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// A network resource found is usable: `Succeeded` (one that failed or is being changed
/// is said, not used).
fn usable(call: &'static str, id: &str, v: &Value) -> Result<(), AzureError> {
    match v
        .pointer("/properties/provisioningState")
        .and_then(Value::as_str)
    {
        Some("Succeeded") => Ok(()),
        Some(state) => Err(unusable(
            call,
            format!("{id} is {state}: wait for it, or delete it and rayscale up again"),
        )),
        None => Err(unusable(
            call,
            format!("{id} has no properties.provisioningState"),
        )),
    }
}

fn unusable(call: &'static str, message: String) -> AzureError {
    AzureError::Call {
        call,
        code: None,
        status: None,
        kind: rayscale_core::provider::ProviderErrorKind::Transient,
        message,
    }
}

/// `provider.tags` as ARM takes tags: strings (a number or boolean written as Python
/// writes it, as Ray's SDK sends it).
fn group_tags(t: &Value) -> Result<Value, AzureError> {
    let Some(o) = t.as_object() else {
        return Err(AzureError::config(
            "provider.tags",
            format!("must be a mapping, got {t}"),
        ));
    };
    let mut out = Map::new();
    for (k, v) in o {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            other => {
                return Err(AzureError::config(
                    format!("provider.tags.{k}"),
                    format!("must be a string, got {other}"),
                ));
            }
        };
        out.insert(k.clone(), json!(text));
    }
    Ok(Value::Object(out))
}

/// Reads `provider.<key>` as a required name.
fn required(provider: &Map<String, Value>, key: &str, what: &str) -> Result<String, AzureError> {
    match provider.get(key) {
        Some(Value::String(s)) if names::valid_name(s.trim()) => Ok(s.trim().to_string()),
        None | Some(Value::Null) => Err(AzureError::config(
            format!("provider.{key}"),
            format!("is required: {what}"),
        )),
        Some(v) => Err(AzureError::config(
            format!("provider.{key}"),
            format!("{v} is not an Azure name ({what})"),
        )),
    }
}

/// What the bootstrap reads of `config`.
struct Inputs<'a> {
    /// The `provider:` block.
    provider: &'a Map<String, Value>,
    /// `provider.location`.
    location: String,
    /// `provider.resource_group`.
    rg: String,
    /// The subscription (`provider.subscription_id`, else the environment's).
    sub: String,
    /// The names derived.
    names: Names,
}

/// The location, resource group, subscription and names of `config`.
fn inputs<'a>(
    config: &'a ClusterConfig,
    env_subscription: Option<&str>,
) -> Result<Inputs<'a>, AzureError> {
    let provider = config
        .raw
        .get("provider")
        .and_then(Value::as_object)
        .ok_or_else(|| AzureError::config("provider", "must be a mapping"))?;
    let location = required(provider, "location", "the region (e.g. westus2)")?;
    let rg = required(
        provider,
        "resource_group",
        "the resource group the cluster is made in",
    )?;
    let sub = match provider.get("subscription_id").and_then(Value::as_str) {
        Some(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => env_subscription
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
    if !names::valid_name(&sub) {
        return Err(AzureError::config(
            "provider.subscription_id",
            format!("{sub:?} is not a subscription id"),
        ));
    }
    let names = names::names(provider, &config.cluster_name, &rg)?;
    Ok(Inputs {
        provider,
        location,
        rg,
        sub,
        names,
    })
}

/// Runs the bootstrap (see the module's docs) for `config` through `arm`;
/// `env_subscription` stands in for an absent `provider.subscription_id`; keys live in
/// `ssh_dir` (`~/.ssh`).
pub async fn bootstrap(
    arm: &Arm,
    config: &ClusterConfig,
    env_subscription: Option<&str>,
    ssh_dir: Option<&Path>,
) -> Result<Bootstrap, AzureError> {
    let Inputs {
        provider,
        location,
        rg,
        sub,
        names: n,
    } = inputs(config, env_subscription)?;
    let tags = json!({"ray-cluster-name": config.cluster_name});
    let mut made = Vec::new();
    let mut raw = config.raw.clone();
    // The key first: it touches only this machine, and its errors are the YAML's.
    let key = cluster_key(&mut raw, &location, &rg, ssh_dir, true)?;
    // The resource group.
    // Checked whether or not the group is made (a YAML that is wrong is wrong now).
    let group_tags = provider.get("tags").map(group_tags).transpose()?;
    let gid = group_id(&sub, &rg);
    let group_path = format!("/subscriptions/{sub}/resourcegroups/{rg}");
    if get(arm, "resourceGroups.get", &group_path, RESOURCES_API)
        .await?
        .is_none()
    {
        let mut body = json!({"location": location});
        if let Some(t) = group_tags {
            body["tags"] = t;
        }
        arm.resource(
            "resourceGroups.createOrUpdate",
            Method::Put,
            &group_path,
            RESOURCES_API,
            Some(&body),
        )
        .await?;
        made.push(format!("resource group {rg}"));
    }
    let given = |k: &str| provider.get(k).is_some_and(|v| !v.is_null());
    // The network.
    let mut subnet = None;
    if !given("subnet") {
        let (subnet_id, nsg_id, _) = ids(&sub, &rg, &n);
        let vnet_id = format!(
            "{gid}/providers/Microsoft.Network/virtualNetworks/{}",
            n.vnet
        );
        let found = get(
            arm,
            "networkSecurityGroups.get",
            &nsg_id,
            NETWORK_API_VERSION,
        )
        .await?;
        if let Some(v) = &found {
            usable("networkSecurityGroups.get", &nsg_id, v)?;
        } else {
            put_and_wait(
                arm,
                "networkSecurityGroups.createOrUpdate",
                &nsg_id,
                NETWORK_API_VERSION,
                &names::nsg_body(&location, &tags),
            )
            .await?;
            made.push(format!("network security group {}", n.nsg));
        }
        match get(arm, "virtualNetworks.get", &vnet_id, NETWORK_API_VERSION).await? {
            Some(v) => {
                usable("virtualNetworks.get", &vnet_id, &v)?;
                let has = v
                    .pointer("/properties/subnets")
                    .and_then(Value::as_array)
                    .is_some_and(|s| {
                        s.iter()
                            .any(|s| s.get("name").and_then(Value::as_str) == Some(&n.subnet))
                    });
                if !has {
                    return Err(AzureError::config(
                        "provider.subnet",
                        format!(
                            "virtual network {} exists in {rg} without subnet {}: add it, or \
                             give provider.subnet",
                            n.vnet, n.subnet
                        ),
                    ));
                }
            }
            None => {
                put_and_wait(
                    arm,
                    "virtualNetworks.createOrUpdate",
                    &vnet_id,
                    NETWORK_API_VERSION,
                    &names::vnet_body(&location, &tags, &n, &nsg_id),
                )
                .await?;
                made.push(format!("virtual network {} ({})", n.vnet, n.subnet_mask));
            }
        }
        raw["provider"]["subnet"] = json!(subnet_id);
        if !given("nsg") {
            raw["provider"]["nsg"] = json!(nsg_id);
        }
        subnet = Some(subnet_id);
    }
    // The identity and its role.
    let mut msi = None;
    if !given("msi") {
        let (_, _, msi_id) = ids(&sub, &rg, &n);
        let identity = match get(arm, "userAssignedIdentities.get", &msi_id, MSI_API).await? {
            Some(v) => v,
            None if n.shared_msi => {
                return Err(AzureError::config(
                    "provider.msi_name",
                    format!(
                        "identity {} not found in resource group {} (provider.msi_name and \
                         msi_resource_group name an identity that exists)",
                        n.msi_name, n.msi_group
                    ),
                ));
            }
            None => {
                let a = arm
                    .resource(
                        "userAssignedIdentities.createOrUpdate",
                        Method::Put,
                        &msi_id,
                        MSI_API,
                        Some(&json!({"location": location, "tags": tags})),
                    )
                    .await?;
                made.push(format!("managed identity {}", n.msi_name));
                a.body
            }
        };
        let principal = identity
            .pointer("/properties/principalId")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                unusable(
                    "userAssignedIdentities.get",
                    format!("identity {} has no properties.principalId", n.msi_name),
                )
            })?
            .to_string();
        if role_assignment(arm, &sub, &gid, &n, &principal).await? {
            made.push(format!(
                "role assignment {} (Contributor on {rg} for {})",
                n.role_assignment, n.msi_name
            ));
        }
        raw["provider"]["msi"] = json!(msi_id);
        msi = Some(msi_id);
    }
    // As Ray's: the head's config names the subscription (the head has no environment).
    raw["provider"]["subscription_id"] = json!(sub);
    let out = config.with_raw(&raw).map_err(|e| {
        AzureError::config(
            "available_node_types",
            format!("with the bootstrap's network, identity and key filled in: {e}"),
        )
    })?;
    Ok(Bootstrap {
        config: out,
        names: n,
        made,
        subnet,
        msi,
        key,
    })
}

/// The key a config for [`offline`] carries where the cluster's key is not on this
/// machine: nothing is launched from such a config.
pub const NO_KEY: &str = "ssh-rsa AAAA-no-key-on-this-machine";

/// The resource ids the bootstrap gives the nodes: (subnet, security group, identity).
fn ids(sub: &str, rg: &str, n: &Names) -> (String, String, String) {
    let gid = group_id(sub, rg);
    (
        format!(
            "{gid}/providers/Microsoft.Network/virtualNetworks/{}/subnets/{}",
            n.vnet, n.subnet
        ),
        format!(
            "{gid}/providers/Microsoft.Network/networkSecurityGroups/{}",
            n.nsg
        ),
        format!(
            "{}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{}",
            group_id(sub, &n.msi_group),
            n.msi_name
        ),
    )
}

/// `config` as [`bootstrap`] would leave it, without asking Azure or making a key: the
/// ids it derives, and the cluster's key when it is on this machine (else [`NO_KEY`]).
/// For the commands that list and remove a cluster `up` made (`down`, `get-head-ip`).
pub fn offline(
    config: &ClusterConfig,
    env_subscription: Option<&str>,
    ssh_dir: Option<&Path>,
) -> Result<ClusterConfig, AzureError> {
    let absent = |raw: &Value, key: &str| raw["provider"].get(key).is_none_or(Value::is_null);
    let mut raw = config.raw.clone();
    if !absent(&raw, "subnet") && !absent(&raw, "msi") && names::every_type_has_key(&raw) {
        // Nothing to derive (a config the bootstrap wrote, or the user's own).
        return Ok(config.clone());
    }
    let Inputs {
        location,
        rg,
        sub,
        names: n,
        ..
    } = inputs(config, env_subscription)?;
    if cluster_key(&mut raw, &location, &rg, ssh_dir, false).is_err() {
        // Listing and removing need no key.
        names::with_key(&mut raw, "ubuntu", NO_KEY);
    }
    let (subnet, nsg, msi) = ids(&sub, &rg, &n);
    // As the bootstrap: its group goes with its network only.
    if absent(&raw, "subnet") {
        raw["provider"]["subnet"] = json!(subnet);
        if absent(&raw, "nsg") {
            raw["provider"]["nsg"] = json!(nsg);
        }
    }
    if absent(&raw, "msi") {
        raw["provider"]["msi"] = json!(msi);
    }
    raw["provider"]["subscription_id"] = json!(sub);
    config
        .with_raw(&raw)
        .map_err(|e| AzureError::config("available_node_types", e.to_string()))
}

/// Ray's role assignment for `principal`, found or made; `true` when made. Entra ID may
/// not know a principal just made (400 `PrincipalNotFound`): tried again for
/// [`PRINCIPAL_SPREAD`].
async fn role_assignment(
    arm: &Arm,
    sub: &str,
    gid: &str,
    n: &Names,
    principal: &str,
) -> Result<bool, AzureError> {
    let id = format!(
        "{gid}/providers/Microsoft.Authorization/roleAssignments/{}",
        n.role_assignment
    );
    if let Some(a) = get(arm, "roleAssignments.get", &id, AUTHORIZATION_API).await? {
        let Some(theirs) = a.pointer("/properties/principalId").and_then(Value::as_str) else {
            // What cannot be read is no reason to delete.
            return Err(unusable(
                "roleAssignments.get",
                format!("{id} has no properties.principalId"),
            ));
        };
        if theirs == principal {
            return Ok(false);
        }
        // Left by an identity of the same name made again: it cannot be updated.
        arm.resource(
            "roleAssignments.delete",
            Method::Delete,
            &id,
            AUTHORIZATION_API,
            None,
        )
        .await?;
    }
    let body = names::role_assignment_body(sub, principal, &n.cluster_id);
    let deadline = tokio::time::Instant::now() + PRINCIPAL_SPREAD;
    let mut delay = Duration::from_secs(2);
    loop {
        match arm
            .resource(
                "roleAssignments.create",
                Method::Put,
                &id,
                AUTHORIZATION_API,
                Some(&body),
            )
            .await
        {
            Ok(_) => return Ok(true),
            // The same role for the same principal on the group, under another name.
            Err(e) if e.code() == Some("RoleAssignmentExists") => return Ok(false),
            // A new principal spreading through Entra ID; an assignment just deleted
            // still seen under its name.
            Err(e)
                if matches!(
                    e.code(),
                    Some("PrincipalNotFound" | "RoleAssignmentUpdateNotPermitted")
                ) && tokio::time::Instant::now() + delay < deadline =>
            {
                tracing::info!(%principal, "the identity's principal is not known yet; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(15));
            }
            Err(e) if e.status() == Some(403) => {
                return Err(AzureError::config(
                    "provider.msi",
                    format!(
                        "{e}: these credentials may not assign roles on the resource group \
                         (Owner or User Access Administrator can); give provider.msi, the \
                         id of an identity that has Contributor on it, to skip this"
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ray's key, found or made, set on the types without one (see the module's docs).
fn cluster_key(
    raw: &mut Value,
    location: &str,
    rg: &str,
    ssh_dir: Option<&Path>,
    make: bool,
) -> Result<Option<(String, PathBuf)>, AzureError> {
    let auth = raw.get("auth").cloned().unwrap_or(Value::Null);
    let has = |k: &str| auth.get(k).is_some_and(|v| !v.is_null());
    let user = match auth.get("ssh_user") {
        // Ray's Azure defaults' user (its key's name takes it).
        None | Some(Value::Null) => "ubuntu".to_string(),
        Some(Value::String(u)) if names::valid_name(u) => u.clone(),
        Some(other) => {
            return Err(AzureError::config(
                "auth.ssh_user",
                format!("{other}: not a login name for the VMs"),
            ));
        }
    };
    match (has("ssh_private_key"), has("ssh_public_key")) {
        // The user's pair, as Ray's bootstrap takes it: the public half's text goes into
        // the types' `publicKey` (with `adminUsername`), and `auth.ssh_public_key` leaves
        // the config, whose copy on the head may name only what is there (the head has
        // no such file: its `rayscale run` would fail to read it).
        (true, true) => {
            let f = auth
                .get("ssh_public_key")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let file = match (f.strip_prefix("~/"), ssh_dir.and_then(Path::parent)) {
                (Some(rest), Some(home)) => home.join(rest),
                _ => PathBuf::from(f),
            };
            let public = std::fs::read_to_string(&file).map_err(|e| {
                AzureError::config("auth.ssh_public_key", format!("{}: {e}", file.display()))
            })?;
            names::with_key(raw, &user, &public);
            if let Some(a) = raw.get_mut("auth").and_then(Value::as_object_mut) {
                a.remove("ssh_public_key");
            }
            return Ok(None);
        }
        // As Ray's Azure config: the two go together (`up` copies the file mounts, and a
        // head `ray up` set up reaches its workers, with the private half).
        (false, true) => {
            return Err(AzureError::config(
                "auth.ssh_private_key",
                "is required with auth.ssh_public_key (the key the VMs take is useless without \
                 it), as Ray's Azure config asks; or give neither and rayscale up makes Ray's key",
            ));
        }
        (true, false) if names::every_type_has_key(raw) => return Ok(None),
        (true, false) => {
            return Err(AzureError::config(
                "auth.ssh_public_key",
                "is required with auth.ssh_private_key (its public half, which the VMs take), \
                 as Ray's Azure config asks; or give neither and rayscale up makes Ray's key",
            ));
        }
        (false, false) if names::every_type_has_key(raw) => return Ok(None),
        (false, false) => {}
    }
    let Some(dir) = ssh_dir else {
        return Err(AzureError::config(
            "auth.ssh_private_key",
            "no home directory (HOME is not set) to keep the cluster's SSH key in: set \
             auth.ssh_private_key and auth.ssh_public_key",
        ));
    };
    let name = names::key_name(location, rg, &user);
    let private = dir.join(&name);
    let public_path = dir.join(format!("{name}.pub"));
    let public = if private.is_file() {
        match std::fs::read_to_string(&public_path) {
            Ok(p) => p,
            // Ours without its public half: read it off the private one.
            Err(_) => public_of(&private)?,
        }
    } else if make {
        generate_key(&private)?
    } else {
        names::with_key(raw, &user, NO_KEY);
        return Ok(None);
    };
    names::with_key(raw, &user, &public);
    // As Ray's: `auth` names the key (Ray hashes its text into each node's
    // `ray-launch-config` tag, so `ray up` finds the head current).
    if !raw.get("auth").is_some_and(Value::is_object) {
        raw["auth"] = json!({});
    }
    raw["auth"]["ssh_private_key"] = json!(private.display().to_string());
    Ok(Some((name, private)))
}

/// Makes a 2048-bit RSA key at `private` (and `<private>.pub`) with `ssh-keygen`, as
/// Ray's bootstrap makes one; returns the public key.
fn generate_key(private: &Path) -> Result<String, AzureError> {
    let err = |m: String| AzureError::config("auth.ssh_private_key", m);
    if let Some(dir) = private.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    // A public half without its private one (ssh-keygen would ask to overwrite it).
    let _ = std::fs::remove_file(format!("{}.pub", private.display()));
    let out = std::process::Command::new("ssh-keygen")
        .args([
            "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-C", "",
        ])
        .arg("-f")
        .arg(private)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            err(format!(
                "ssh-keygen (OpenSSH's, to make the cluster's key as ray up does): {e}"
            ))
        })?;
    if !out.status.success() {
        return Err(err(format!(
            "ssh-keygen {}: {}",
            private.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let public = format!("{}.pub", private.display());
    std::fs::read_to_string(&public).map_err(|e| err(format!("{public}: {e}")))
}

/// The public key of the private key at `private` (`ssh-keygen -y`).
fn public_of(private: &Path) -> Result<String, AzureError> {
    let err = |m: String| AzureError::config("auth.ssh_private_key", m);
    let out = std::process::Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(private)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            err(format!(
                "ssh-keygen -y (to read {}): {e}",
                private.display()
            ))
        })?;
    if !out.status.success() {
        return Err(err(format!(
            "ssh-keygen -y {}: {}",
            private.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
