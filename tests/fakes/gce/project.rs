//! The project-level APIs of [`super::GceFake`], for `rayscale up`'s bootstrap (Ray's
//! `bootstrap_gcp`), on the same loopback server as the instances (their paths do not
//! meet). Each follows Google's public REST reference:
//!
//! - Cloud Resource Manager v1 (cloud.google.com/resource-manager/reference/rest/v1/projects):
//!   `projects.get` — `GET /v1/projects/{projectId}` (403 `PERMISSION_DENIED` for a project
//!   the caller cannot see, which is also what a missing one answers); `getIamPolicy` /
//!   `setIamPolicy` — `POST /v1/projects/{resource}:getIamPolicy` (`{options:
//!   {requestedPolicyVersion}}`) and `:setIamPolicy` (`{policy}`: a stale `etag` answers
//!   409 `ABORTED`, "Policy etags").
//! - IAM v1 (cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts):
//!   `get` — `GET /v1/projects/{project}/serviceAccounts/{email}` (404 when absent);
//!   `create` — `POST /v1/projects/{project}/serviceAccounts` with `{accountId,
//!   serviceAccount}` (`accountId` 6 to 30 of `[a-z0-9-]`, starting with a letter; 409
//!   `ALREADY_EXISTS` when taken).
//! - Compute v1: `projects.get` — `GET /compute/v1/projects/{project}` (with
//!   `commonInstanceMetadata`); `projects.setCommonInstanceMetadata` — `POST
//!   .../setCommonInstanceMetadata` with a `Metadata` (a stale `fingerprint` answers 412
//!   `conditionNotMet`), answering a global `Operation`; `globalOperations.get` — `GET
//!   .../global/operations/{operation}`; `subnetworks.list` — `GET
//!   .../regions/{region}/subnetworks` (the project's `default` subnetwork in each region
//!   unless a test sets others).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};
use wiremock::Request;

use super::record::Reply;
use super::{World, error, fingerprint};

/// The project's own state and the faults of its APIs.
#[derive(Debug, Default)]
pub struct ProjectApis {
    /// Resource Manager does not show the project (403), as for a missing one.
    pub hidden: bool,
    /// The project's `lifecycleState`; `None` is `ACTIVE`.
    pub lifecycle: Option<String>,
    /// `commonInstanceMetadata.items`.
    pub metadata: Vec<Value>,
    metadata_version: u64,
    /// The IAM policy's bindings.
    pub bindings: Vec<Value>,
    /// The policy's `version` (1 when unset; 3 once it has conditions).
    pub policy_format: u64,
    policy_version: u64,
    /// Service accounts by email.
    pub accounts: BTreeMap<String, Value>,
    /// Subnetwork names of the cluster's region; `None` is `["default"]`.
    pub subnets: Option<Vec<String>>,
    /// The next this-many `setCommonInstanceMetadata` answer 412 (another writer).
    pub metadata_conflicts: u32,
    /// The next this-many `setIamPolicy` answer 409 (another writer).
    pub policy_conflicts: u32,
    /// Calls answered, by method id (`projects.setIamPolicy`, ...).
    pub calls: BTreeMap<&'static str, u64>,
    ops: BTreeMap<String, Instant>,
}

impl ProjectApis {
    /// The `ssh-keys` item of the project's metadata ("" without one).
    pub fn ssh_keys(&self) -> String {
        self.metadata
            .iter()
            .find(|i| i["key"] == "ssh-keys")
            .and_then(|i| i["value"].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// The members bound to `role` unconditionally.
    pub fn members_of(&self, role: &str) -> Vec<String> {
        self.bindings
            .iter()
            .filter(|b| b["role"] == role && b.get("condition").is_none())
            .flat_map(|b| b["members"].as_array().cloned().unwrap_or_default())
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect()
    }

    fn count(&mut self, call: &'static str) {
        *self.calls.entry(call).or_default() += 1;
    }
}

/// The answer to `req` when its path is one of these APIs', else `None`.
pub(super) fn reply(w: &mut World, req: &Request, op_time: std::time::Duration) -> Option<Reply> {
    let path = req.url.path().to_string();
    let method = req.method.as_str();
    let project = w.project.clone();
    let region = w
        .zone
        .rsplit_once('-')
        .map_or(w.zone.clone(), |(r, _)| r.to_string());
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let a = &mut w.project_apis;
    let crm = format!("/v1/projects/{project}");
    let iam = format!("/v1/projects/{project}/serviceAccounts");
    let compute = format!("/compute/v1/projects/{project}");
    // Resource Manager.
    if path == crm && method == "GET" {
        a.count("projects.get");
        if a.hidden {
            return Some(forbidden(&project));
        }
        return Some(Reply::new(200).set_body_json(json!({
            "projectNumber": "123456789012",
            "projectId": project,
            "lifecycleState": a.lifecycle.clone().unwrap_or_else(|| "ACTIVE".into()),
            "name": project,
            "createTime": "2026-01-01T00:00:00.000Z",
        })));
    }
    if path == format!("{crm}:getIamPolicy") && method == "POST" {
        a.count("projects.getIamPolicy");
        if a.hidden {
            return Some(forbidden(&project));
        }
        return Some(Reply::new(200).set_body_json(policy(a)));
    }
    if path == format!("{crm}:setIamPolicy") && method == "POST" {
        a.count("projects.setIamPolicy");
        let Some(p) = body.get("policy") else {
            return Some(error(
                400,
                "badRequest",
                "setIamPolicy takes {\"policy\": ...}",
            ));
        };
        if a.policy_conflicts > 0 || p.get("etag") != policy(a).get("etag") {
            a.policy_conflicts = a.policy_conflicts.saturating_sub(1);
            a.policy_version += 1;
            return Some(error(
                409,
                "conflict",
                "There were concurrent policy changes. Please retry the whole read-modify-write \
                 with exponential backoff.",
            ));
        }
        let Some(bindings) = p.get("bindings").and_then(Value::as_array) else {
            return Some(error(400, "badRequest", "policy.bindings must be a list"));
        };
        // "Policy versions": a policy with conditions must be version 3.
        let version = p.get("version").and_then(Value::as_u64).unwrap_or(1);
        if version < 3 && bindings.iter().any(|b| b.get("condition").is_some()) {
            return Some(error(
                400,
                "badRequest",
                "Conditional role bindings require policy version 3",
            ));
        }
        a.bindings = bindings.clone();
        a.policy_format = version;
        a.policy_version += 1;
        return Some(Reply::new(200).set_body_json(policy(a)));
    }
    // IAM.
    if let Some(email) = path.strip_prefix(&format!("{iam}/")) {
        if method != "GET" {
            return None;
        }
        a.count("serviceAccounts.get");
        return Some(match a.accounts.get(email) {
            Some(acc) => Reply::new(200).set_body_json(acc.clone()),
            None => error(
                404,
                "notFound",
                &format!("Unknown service account: projects/{project}/serviceAccounts/{email}"),
            ),
        });
    }
    if path == iam && method == "POST" {
        a.count("serviceAccounts.create");
        let id = body["accountId"].as_str().unwrap_or("");
        let ok = (6..=30).contains(&id.len())
            && id.starts_with(|c: char| c.is_ascii_lowercase())
            && !id.ends_with('-')
            && id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Some(error(
                400,
                "badRequest",
                &format!("accountId {id:?} is invalid"),
            ));
        }
        let email = format!("{id}@{project}.iam.gserviceaccount.com");
        if a.accounts.contains_key(&email) {
            return Some(error(
                409,
                "conflict",
                &format!("Service account {id} already exists within project projects/{project}."),
            ));
        }
        let n = a.accounts.len() + 1;
        let acc = json!({
            "name": format!("projects/{project}/serviceAccounts/{email}"),
            "projectId": project,
            "uniqueId": format!("10000000000000000000{n}"),
            "email": email,
            "displayName": body["serviceAccount"]["displayName"].clone(),
            "etag": "MDEwMjE5MjA=",
            "oauth2ClientId": format!("10000000000000000000{n}"),
        });
        a.accounts.insert(email, acc.clone());
        return Some(Reply::new(200).set_body_json(acc));
    }
    // Compute's project.
    if path == compute && method == "GET" {
        a.count("compute.projects.get");
        return Some(Reply::new(200).set_body_json(json!({
            "kind": "compute#project",
            "id": "123456789012",
            "name": project,
            "commonInstanceMetadata": metadata(a),
            "selfLink": format!("https://www.googleapis.com/compute/v1/projects/{project}"),
        })));
    }
    if path == format!("{compute}/setCommonInstanceMetadata") && method == "POST" {
        a.count("compute.projects.setCommonInstanceMetadata");
        if a.metadata_conflicts > 0 || body.get("fingerprint") != metadata(a).get("fingerprint") {
            a.metadata_conflicts = a.metadata_conflicts.saturating_sub(1);
            a.metadata_version += 1;
            return Some(error(
                412,
                "conditionNotMet",
                "Supplied fingerprint does not match current metadata fingerprint.",
            ));
        }
        a.metadata = body["items"].as_array().cloned().unwrap_or_default();
        a.metadata_version += 1;
        let name = format!("operation-meta-{}", a.metadata_version);
        a.ops.insert(name.clone(), Instant::now());
        return Some(Reply::new(200).set_body_json(global_op(&project, &name, "PENDING")));
    }
    if let Some(name) = path.strip_prefix(&format!("{compute}/global/operations/")) {
        a.count("compute.globalOperations.get");
        return Some(match a.ops.get(name) {
            Some(start) => {
                let status = if start.elapsed() >= op_time {
                    "DONE"
                } else {
                    "RUNNING"
                };
                Reply::new(200).set_body_json(global_op(&project, name, status))
            }
            None => error(
                404,
                "notFound",
                &format!("The resource '{name}' was not found"),
            ),
        });
    }
    if let Some(r) = path
        .strip_prefix(&format!("{compute}/regions/"))
        .and_then(|r| r.strip_suffix("/subnetworks"))
    {
        a.count("compute.subnetworks.list");
        let names = if r == region {
            a.subnets.clone().unwrap_or_else(|| vec!["default".into()])
        } else {
            Vec::new()
        };
        let base = format!("https://www.googleapis.com/compute/v1/projects/{project}");
        let items: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                json!({
                    "kind": "compute#subnetwork",
                    "id": format!("{}", 7_000_000_000_000_000_000u64 + k as u64),
                    "name": n,
                    "network": format!("{base}/global/networks/{n}"),
                    "ipCidrRange": format!("10.{}.0.0/20", 128 + k),
                    "region": format!("{base}/regions/{r}"),
                    "selfLink": format!("{base}/regions/{r}/subnetworks/{n}"),
                })
            })
            .collect();
        let mut list = json!({
            "kind": "compute#subnetworkList",
            "id": format!("projects/{project}/regions/{r}/subnetworks"),
            "selfLink": format!("{base}/regions/{r}/subnetworks"),
        });
        if !items.is_empty() {
            list["items"] = json!(items);
        }
        return Some(Reply::new(200).set_body_json(list));
    }
    None
}

fn forbidden(project: &str) -> Reply {
    error(
        403,
        "forbidden",
        &format!(
            "The caller does not have permission (project {project} does not exist or is not \
             visible)"
        ),
    )
}

fn policy(a: &ProjectApis) -> Value {
    json!({
        "version": a.policy_format.max(1),
        "etag": fingerprint(a.policy_version),
        "bindings": a.bindings,
    })
}

fn metadata(a: &ProjectApis) -> Value {
    json!({
        "kind": "compute#metadata",
        "fingerprint": fingerprint(1_000 + a.metadata_version),
        "items": a.metadata,
    })
}

fn global_op(project: &str, name: &str, status: &str) -> Value {
    let base = format!("https://www.googleapis.com/compute/v1/projects/{project}");
    json!({
        "kind": "compute#operation",
        "id": "4000000000000000001",
        "name": name,
        "operationType": "setMetadata",
        "targetLink": base,
        "status": status,
        "progress": if status == "DONE" { 100 } else { 0 },
        "insertTime": "2026-12-01T00:00:00.000-08:00",
        "selfLink": format!("{base}/global/operations/{name}"),
    })
}
