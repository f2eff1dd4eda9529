//! Ray's GCP bootstrap (`ray up`'s `bootstrap_gcp`), run by `rayscale up` before it
//! launches the head, so that a Ray GCP cluster YAML that leaves these out works as it
//! does under `ray up`:
//!
//! - **the project**: Cloud Resource Manager must know it and find it `ACTIVE`. Ray's
//!   bootstrap tries to create a project it cannot see; rayscale does not (a new project
//!   has no billing account and no Compute API, so the launch would fail later and
//!   leave a project behind): it says so and stops.
//! - **the head's service account**, when the head's type names no `serviceAccounts` (or
//!   an instance template): Ray's `ray-autoscaler-sa-v1@<project>.iam.gserviceaccount.com`,
//!   found or made, with Ray's four roles (and `roles/tpu.admin` with TPU node types)
//!   bound on the project where they are missing
//!   (`setIamPolicy` only when something is missing, as Ray's, since an administrator may
//!   have granted them; on a concurrent change the policy is read again). Only the head's
//!   launch takes it, with the `cloud-platform` scope (Ray's internal `head_node`,
//!   [`ClusterConfig::head_node`]), so that its `rayscale run` may call Compute. A head
//!   whose type names its own account gets nothing made: rayscale does not make an
//!   account with `compute.admin` that no instance uses.
//! - **the SSH key**, when `auth.ssh_private_key` is absent: Ray's project-wide key
//!   `ray-autoscaler_gcp_<region>_<project>_<user>_<i>` (`i` from 0 to 9): a key whose
//!   private half is in `~/.ssh/<name>` is taken (put back in the project's `ssh-keys`
//!   metadata when its public half is there locally and missing from the project); else
//!   a new RSA key is made there with `ssh-keygen` and its line `<user>:ssh-rsa <key>
//!   <user>` appended to the project's `ssh-keys` (`setCommonInstanceMetadata` with the
//!   fingerprint read; read again on 412). `up` copies the file mounts with it.
//! - **the subnet**, when a type names no `networkInterfaces` and no instance template
//!   (a TPU type: no `networkConfig`): the first subnetwork of the region's list, with an
//!   external address, as Ray picks it (a TPU type's `networkConfig.subnetwork`).
//!
//! Run again, it finds all of it and changes nothing; `down` leaves it all (other
//! clusters use the account, the key and the subnet), as `ray down` does.
//!
//! The pure part decides from what the APIs answered ([`policy_with_roles`],
//! [`metadata_with_line`], [`ssh_key_line`], [`key_name`], [`region_of`]); [`bootstrap`]
//! asks and rewrites the config.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use serde_json::{Value, json};

use crate::GcpError;
use crate::client::ENDPOINT_ENV;
use crate::rest::Rest;

mod key;
use key::project_key;
pub use key::{key_name, metadata_with_line, ssh_key_line};

/// The environment variable whose base URL replaces IAM's (`https://iam.googleapis.com`).
pub const IAM_ENDPOINT_ENV: &str = "RAYSCALE_GCP_IAM_ENDPOINT";
/// The environment variable whose base URL replaces Cloud Resource Manager's.
pub const CRM_ENDPOINT_ENV: &str = "RAYSCALE_GCP_CRM_ENDPOINT";

/// The account id of Ray's autoscaler service account (`ray-autoscaler-sa-` + Ray's
/// config version `v1`): the same account `ray up` makes, so either finds the other's.
pub const SERVICE_ACCOUNT_ID: &str = "ray-autoscaler-sa-v1";

/// The roles Ray 2.60 binds to its service account on the project: objects in Cloud
/// Storage, Compute, acting as a service account (workers may name one), and reading
/// roles; with TPU node types, [`TPU_ROLES`] too.
pub const ROLES: [&str; 4] = [
    "roles/storage.objectAdmin",
    "roles/compute.admin",
    "roles/iam.serviceAccountUser",
    "roles/iam.roleViewer",
];

/// The roles Ray adds when the config has TPU node types (`TPU_SERVICE_ACCOUNT_ROLES`):
/// the head makes and deletes TPU nodes.
pub const TPU_ROLES: [&str; 1] = ["roles/tpu.admin"];

/// The OAuth scope the head's service account is given (its roles limit it).
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The SSH user of Ray's GCP defaults (`auth.ssh_user` when the YAML has none).
pub const DEFAULT_SSH_USER: &str = "ubuntu";

/// A user name that fits an `ssh-keys` line (`<user>:<key> <user>`) and a file name.
fn valid_user(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= 32
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// How many key names Ray tries (`_0` to `_9`).
const KEY_TRIES: usize = 10;

/// How many times the project metadata's read-modify-write is tried when another writer
/// got in between.
const WRITE_TRIES: usize = 5;

/// The three APIs' base URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Compute (`https://compute.googleapis.com`, or `RAYSCALE_GCP_ENDPOINT`).
    pub compute: String,
    /// IAM.
    pub iam: String,
    /// Cloud Resource Manager.
    pub crm: String,
}

impl Endpoints {
    /// Google's, each replaced by its environment variable when set.
    pub fn from_environment() -> Self {
        let pick = |env: &str, default: &str| {
            std::env::var(env)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        Endpoints {
            compute: pick(ENDPOINT_ENV, "https://compute.googleapis.com"),
            iam: pick(IAM_ENDPOINT_ENV, "https://iam.googleapis.com"),
            crm: pick(
                CRM_ENDPOINT_ENV,
                "https://cloudresourcemanager.googleapis.com",
            ),
        }
    }
}

/// What [`bootstrap`] did, for the user.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// The config with what was set (node types' `networkInterfaces`, the head's
    /// `serviceAccounts` in [`ClusterConfig::head_node`]).
    pub config: ClusterConfig,
    /// The service account the head takes, when one was set.
    pub service_account: Option<String>,
    /// The key's name and its private half on this machine, when one was set.
    pub key: Option<(String, PathBuf)>,
    /// The subnetwork given to types that named none.
    pub subnet: Option<String>,
}

/// `<account id>@<project>.iam.gserviceaccount.com`.
pub fn service_account_email(project: &str) -> String {
    format!("{SERVICE_ACCOUNT_ID}@{project}.iam.gserviceaccount.com")
}

/// `policy` (an IAM `Policy` as `getIamPolicy` answered it) with `member` in an
/// unconditional binding of each of `roles`, or `None` when it is in all already. A role
/// with no unconditional binding gets one; conditional bindings are left as they are (a
/// member added to one would be granted only under its condition).
pub fn policy_with_roles(
    policy: &Value,
    member: &str,
    roles: &[&str],
) -> Result<Option<Value>, GcpError> {
    let mut policy = policy.clone();
    let obj = policy.as_object_mut().ok_or_else(|| {
        GcpError::transient(
            "projects.getIamPolicy",
            None,
            "the policy is not a JSON object",
        )
    })?;
    let bindings = obj.entry("bindings").or_insert_with(|| json!([]));
    let Value::Array(bindings) = bindings else {
        return Err(GcpError::transient(
            "projects.getIamPolicy",
            None,
            "the policy's bindings are not a list",
        ));
    };
    let mut changed = false;
    for role in roles {
        let unconditional = bindings.iter_mut().find(|b| {
            b.get("role").and_then(Value::as_str) == Some(role) && b.get("condition").is_none()
        });
        match unconditional {
            Some(b) => {
                let members = b
                    .as_object_mut()
                    .map(|m| m.entry("members").or_insert_with(|| json!([])));
                match members {
                    Some(Value::Array(ms)) => {
                        if !ms.iter().any(|m| m.as_str() == Some(member)) {
                            ms.push(json!(member));
                            changed = true;
                        }
                    }
                    _ => {
                        return Err(GcpError::transient(
                            "projects.getIamPolicy",
                            None,
                            format!("the binding of {role} has no list of members"),
                        ));
                    }
                }
            }
            None => {
                bindings.push(json!({"role": role, "members": [member]}));
                changed = true;
            }
        }
    }
    Ok(changed.then_some(policy))
}

/// The region of the cluster: `provider.region`, else the zone's (`us-west1-a` ->
/// `us-west1`).
pub fn region_of(region: Option<&str>, zone: &str) -> String {
    match region {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => zone.rsplit_once('-').map_or(zone, |(r, _)| r).to_string(),
    }
}

/// Whether node type `t`'s config gives its own network (interfaces or a template).
fn network_given(raw: &Value, t: &str) -> bool {
    let nc = &raw["available_node_types"][t]["node_config"];
    if is_tpu(nc) {
        return nc.get("networkConfig").is_some();
    }
    nc.get("networkInterfaces").is_some() || nc.get("sourceInstanceTemplate").is_some()
}

/// Whether a node config is a Cloud TPU's (it takes `networkConfig`, not interfaces).
fn is_tpu(nc: &Value) -> bool {
    nc.as_object().is_some_and(crate::tpu::is_tpu)
}

/// Runs the bootstrap (see the module's docs) for `config` against `endpoints`; keys
/// live in `ssh_dir` (`~/.ssh`).
pub async fn bootstrap(
    config: &ClusterConfig,
    endpoints: &Endpoints,
    ssh_dir: Option<&Path>,
) -> Result<Bootstrap, GcpError> {
    let gcp = crate::GcpConfig::from_cluster(config)?;
    let project = gcp.project_id.clone();
    let region = region_of(gcp.region.as_deref(), &gcp.zone);
    let credentials = gcp
        .credentials
        .as_ref()
        .map(crate::client::GcpCredentials::to_credentials)
        .transpose()?;
    let compute = Rest::new(&endpoints.compute, ENDPOINT_ENV, credentials.as_ref()).await?;
    let crm = Rest::new(&endpoints.crm, CRM_ENDPOINT_ENV, credentials.as_ref()).await?;
    // The project.
    let p = crm
        .get("projects.get", &format!("v1/projects/{project}"))
        .await
        .map_err(|e| match e.status() {
            // A disabled API is said as Google says it.
            Some(403)
                if matches!(e.code(), Some("SERVICE_DISABLED" | "accessNotConfigured"))
                    || e.to_string().contains("has not been used in project") =>
            {
                e
            }
            Some(403 | 404) => GcpError::config(
                "provider.project_id",
                format!(
                    "Cloud Resource Manager does not show project {project} to these credentials \
                     ({e}): it does not exist, or they lack resourcemanager.projects.get; \
                     rayscale up does not create projects: create it (with billing and the \
                     Compute Engine API), or name one you can use"
                ),
            ),
            _ => e,
        })?;
    let state = p
        .get("lifecycleState")
        .and_then(Value::as_str)
        .unwrap_or("");
    if state != "ACTIVE" {
        return Err(GcpError::config(
            "provider.project_id",
            format!("project {project} is {state:?}, not ACTIVE"),
        ));
    }
    let mut raw = config.raw.clone();
    // The subnet.
    let types: Vec<String> = config.node_types.iter().map(|t| t.name.clone()).collect();
    let bare: Vec<&String> = types.iter().filter(|t| !network_given(&raw, t)).collect();
    let mut subnet = None;
    if !bare.is_empty() {
        let list = compute
            .get(
                "subnetworks.list",
                &format!("compute/v1/projects/{project}/regions/{region}/subnetworks"),
            )
            .await?;
        let first = list
            .get("items")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|s| s.get("selfLink"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                GcpError::config(
                    "provider.region",
                    format!(
                        "project {project} has no subnetwork in region {region}: make one, or \
                         give each node_config its networkInterfaces"
                    ),
                )
            })?
            .to_string();
        // As Ray's `_configure_subnet`: every type gets both a Compute Engine
        // `networkInterfaces` and a TPU `networkConfig` where it has none (each launch drops
        // the one its kind does not take), so the node configs, and the launch hashes Ray
        // computes from them, are Ray's. Unlike Ray, a type that starts from an instance
        // template keeps the template's network.
        for t in &types {
            let nc = &mut raw["available_node_types"][t.as_str()]["node_config"];
            // A TPU node's network (its create turns external addresses on).
            if nc.get("networkConfig").is_none() {
                nc["networkConfig"] = json!({"subnetwork": first});
            }
            let template = nc.get("sourceInstanceTemplate").is_some() && !is_tpu(nc);
            if nc.get("networkInterfaces").is_none() && !template {
                nc["networkInterfaces"] = json!([{
                    "subnetwork": first,
                    "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
                }]);
            }
        }
        subnet = Some(first);
    }
    // The SSH key.
    let auth = config.raw.get("auth");
    let has_private_key = auth
        .and_then(|a| a.get("ssh_private_key"))
        .is_some_and(|k| !k.is_null());
    let mut key = None;
    if !has_private_key {
        // Ray's GCP defaults give `ubuntu` to a YAML without one.
        let user = match auth.and_then(|a| a.get("ssh_user")) {
            None | Some(Value::Null) => DEFAULT_SSH_USER,
            Some(Value::String(u)) if valid_user(u) => u.as_str(),
            Some(other) => {
                return Err(GcpError::config(
                    "auth.ssh_user",
                    format!("{other}: not a user name for the project's ssh-keys"),
                ));
            }
        };
        let Some(dir) = ssh_dir else {
            return Err(GcpError::config(
                "auth.ssh_private_key",
                "no home directory (HOME is not set) to keep the cluster's SSH key in: set \
                 auth.ssh_private_key",
            ));
        };
        key = project_key(&compute, &project, &region, user, dir).await?;
        if let Some((_, path)) = &key {
            // As Ray's: `auth` names the key, which Ray hashes into each node's
            // `ray-launch-config` label (so `ray up` finds the head current).
            if !raw.get("auth").is_some_and(Value::is_object) {
                raw["auth"] = json!({});
            }
            raw["auth"]["ssh_private_key"] = json!(path.display().to_string());
        }
        if key.is_none() {
            // OS Login: instances take no ssh-keys metadata; only a copy needs SSH.
            let copies = rayscale_core::config::mounts::head_copies(&config.raw)
                .map_err(|e| GcpError::config("file_mounts", e.to_string()))?;
            if !copies.is_empty() {
                return Err(GcpError::config(
                    "auth.ssh_private_key",
                    format!(
                        "project {project} has enable-oslogin=TRUE, so its instances let in no \
                         ssh-keys line: rayscale up cannot copy file_mounts with a key it \
                         makes; set auth.ssh_private_key (and auth.ssh_user) to a login OS \
                         Login lets in"
                    ),
                ));
            }
            tracing::warn!(
                %project,
                "enable-oslogin is TRUE: no SSH key is put in the project's metadata"
            );
        }
    }
    let mut out = config.with_raw(&raw).map_err(|e| {
        GcpError::config(
            "available_node_types",
            format!("with networkInterfaces filled in: {e}"),
        )
    })?;
    // The head's service account.
    let head = gcp.head_node_type.clone().unwrap_or_default();
    let head_names_one = raw["available_node_types"][head.as_str()]["node_config"]
        .get("serviceAccounts")
        .is_some()
        || raw["available_node_types"][head.as_str()]["node_config"]
            .get("sourceInstanceTemplate")
            .is_some();
    let mut service_account = None;
    if !head.is_empty() && !head_names_one {
        let iam = Rest::new(&endpoints.iam, IAM_ENDPOINT_ENV, credentials.as_ref()).await?;
        let mut roles = ROLES.to_vec();
        if gcp.node_types.values().any(|n| n.tpu.is_some()) {
            roles.extend(TPU_ROLES);
        }
        let email = head_account(&iam, &crm, &project, &head, &roles).await?;
        out.head_node.insert(
            "serviceAccounts".into(),
            json!([{"email": email, "scopes": [CLOUD_PLATFORM]}]),
        );
        service_account = Some(email);
    }
    Ok(Bootstrap {
        config: out,
        service_account,
        key,
        subnet,
    })
}

/// Ray's service account, found or made, with `roles` bound on the project. IAM is
/// eventually consistent: an account just made may be unknown to `setIamPolicy` (400)
/// or `get` (404) for a while, so those are tried again with backoff for up to
/// [`IAM_SPREAD`] when this run made the account; a concurrent policy change (409) is
/// read again after a backoff, as Google's answer asks.
async fn head_account(
    iam: &Rest,
    crm: &Rest,
    project: &str,
    head: &str,
    roles: &[&str],
) -> Result<String, GcpError> {
    let email = service_account_email(project);
    // What went wrong, with the way out (naming an account skips this step).
    let explain = |e: GcpError| GcpError::Call {
        call: "head service account",
        code: e.code().map(str::to_string),
        status: e.status(),
        kind: e.kind(),
        message: format!(
            "{email} in project {project}: {e}; or name the head's own in \
             available_node_types.{head}.node_config.serviceAccounts"
        ),
    };
    let path = format!("v1/projects/{project}/serviceAccounts/{email}");
    let mut made = false;
    let account = match iam.get("serviceAccounts.get", &path).await {
        Ok(a) => a,
        Err(e) if e.status() == Some(404) => {
            let create = iam
                .post(
                    "serviceAccounts.create",
                    &format!("v1/projects/{project}/serviceAccounts"),
                    &json!({
                        "accountId": SERVICE_ACCOUNT_ID,
                        "serviceAccount": {
                            "displayName": "Ray autoscaler (head nodes of ray up and rayscale up)"
                        }
                    }),
                )
                .await;
            match create {
                Ok(a) => {
                    made = true;
                    a
                }
                // Made meanwhile by another `up` (it may take a while to read back).
                Err(e) if e.status() == Some(409) => {
                    let mut backoff = Backoff::new();
                    loop {
                        match iam.get("serviceAccounts.get", &path).await {
                            Ok(a) => break a,
                            Err(e) if e.status() == Some(404) && backoff.wait().await => {}
                            Err(e) => return Err(explain(e)),
                        }
                    }
                }
                Err(e) => return Err(explain(e)),
            }
        }
        Err(e) => return Err(explain(e)),
    };
    let email = account
        .get("email")
        .and_then(Value::as_str)
        .unwrap_or(&email)
        .to_string();
    let member = format!("serviceAccount:{email}");
    let mut backoff = Backoff::new();
    loop {
        let policy = crm
            .post(
                "projects.getIamPolicy",
                &format!("v1/projects/{project}:getIamPolicy"),
                &json!({"options": {"requestedPolicyVersion": 3}}),
            )
            .await
            .map_err(explain)?;
        let Some(new) = policy_with_roles(&policy, &member, roles)? else {
            return Ok(email);
        };
        match crm
            .post(
                "projects.setIamPolicy",
                &format!("v1/projects/{project}:setIamPolicy"),
                &json!({"policy": new}),
            )
            .await
        {
            Ok(_) => return Ok(email),
            // The etag is stale: another writer changed the policy.
            Err(e) if e.status() == Some(409) && backoff.wait().await => {
                tracing::info!(%project, "the IAM policy changed meanwhile; reading it again");
            }
            // The account just made is not known everywhere yet.
            Err(e) if made && e.status() == Some(400) && backoff.wait().await => {
                tracing::info!(%email, "IAM does not know the new account yet; trying again");
            }
            Err(e) => return Err(explain(e)),
        }
    }
}

/// How long an account just made is given to spread through IAM.
const IAM_SPREAD: Duration = Duration::from_secs(60);

/// Waits of 0.5 s doubling to 4 s, for up to [`IAM_SPREAD`] in all.
struct Backoff {
    next: Duration,
    until: tokio::time::Instant,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            next: Duration::from_millis(500),
            until: tokio::time::Instant::now() + IAM_SPREAD,
        }
    }

    /// Sleeps the next wait and says true, or says false when the time is up.
    async fn wait(&mut self) -> bool {
        if tokio::time::Instant::now() + self.next > self.until {
            return false;
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(4));
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn roles_are_added_once_and_conditional_bindings_are_left_alone() {
        let m = "serviceAccount:a@p.iam.gserviceaccount.com";
        let policy = json!({"version": 3, "etag": "BwX", "bindings": [
            {"role": "roles/compute.admin", "members": ["user:x@example.com"]},
            {"role": "roles/storage.objectAdmin", "members": [m],
             "condition": {"title": "t", "expression": "true"}}
        ]});
        let new = policy_with_roles(&policy, m, &ROLES).unwrap().unwrap();
        assert_eq!(new["etag"], "BwX");
        let b = new["bindings"].as_array().unwrap();
        assert_eq!(b.len(), 5, "{new}");
        assert_eq!(b[0]["members"], json!(["user:x@example.com", m]));
        // The conditional binding is unchanged, an unconditional one is added.
        assert_eq!(b[1], policy["bindings"][1]);
        assert!(
            b[2..]
                .iter()
                .any(|x| x["role"] == "roles/storage.objectAdmin" && x.get("condition").is_none())
        );
        assert_eq!(policy_with_roles(&new, m, &ROLES).unwrap(), None);
        assert!(policy_with_roles(&json!([]), m, &ROLES).is_err());
    }

    #[test]
    fn names_and_region() {
        assert!(valid_user("ubuntu") && valid_user("ray_user-1"));
        assert!(!valid_user("a b") && !valid_user("a:b") && !valid_user("../x"));
        assert_eq!(
            key_name("us-west1", "proj", "ubuntu", 0),
            "ray-autoscaler_gcp_us-west1_proj_ubuntu_0"
        );
        assert_eq!(region_of(None, "us-west1-a"), "us-west1");
        assert_eq!(
            region_of(Some("europe-west4"), "us-west1-a"),
            "europe-west4"
        );
        assert_eq!(
            service_account_email("proj"),
            "ray-autoscaler-sa-v1@proj.iam.gserviceaccount.com"
        );
    }
}
