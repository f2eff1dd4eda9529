//! What the ARM fake answers for the resources Ray's Azure bootstrap makes (its ARM
//! template `azure-config-template.json`), each after Microsoft's REST reference:
//!
//! - `Resource Groups - Get / Create Or Update` (learn.microsoft.com/rest/api/resources/
//!   resource-groups, api-version 2024-11-01) — `GET|PUT /subscriptions/{s}/resourcegroups/
//!   {rg}`: 404 `ResourceGroupNotFound`; a create needs `location` (400
//!   `LocationRequired`); a create of an existing group in another location is 409
//!   `Conflict`. Anything inside a group that does not exist: 404
//!   `ResourceGroupNotFound`.
//! - `Network Security Groups - Create Or Update / Get`, `Virtual Networks - Create Or
//!   Update / Get`, `Subnets - Get` (learn.microsoft.com/rest/api/virtualnetwork,
//!   api-version 2024-05-01): a create answers 201 with `provisioningState: Updating` and
//!   an `Azure-AsyncOperation` (`.../providers/Microsoft.Network/locations/{l}/operations/
//!   {id}`); the resource reads `Succeeded` once the operation ends. Rules need a
//!   priority in 100..=4096, a protocol, access and direction; a network needs address
//!   prefixes, each subnet a prefix inside them, and a referenced security group that
//!   exists (400 `InvalidResourceReference`).
//! - `User Assigned Identities - Create Or Update / Get` (learn.microsoft.com/rest/api/
//!   managedidentity/user-assigned-identities, api-version 2024-11-30): made at once (201;
//!   200 for an existing one, whose principal stays) with `principalId`, `clientId` and
//!   `tenantId`.
//! - `Role Assignments - Create / Get / Delete` (learn.microsoft.com/rest/api/
//!   authorization/role-assignments, api-version 2022-04-01) at a resource group's
//!   scope: the principal must be an identity this fake made (400 `PrincipalNotFound`;
//!   [`super::Faults::principal_spread`] answers so for the first creates, as Entra ID
//!   does while a new principal spreads); the same name for another principal is 409
//!   `RoleAssignmentUpdateNotPermitted`; the same role, principal and scope under another
//!   name is 409 `RoleAssignmentExists` (Microsoft's "Troubleshoot Azure RBAC"); a missing
//!   one is 404 `RoleAssignmentNotFound`; [`super::Faults::role_forbidden`] answers a
//!   create 403 `AuthorizationFailed`, as for credentials without
//!   `Microsoft.Authorization/roleAssignments/write`.

use std::time::Instant;

use serde_json::{Value, json};
use wiremock::Request;

use super::super::record::Reply;
use super::{Shared, World, error};

/// A resource the bootstrap made: its body as `GET` answers it once ready.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) body: Value,
    /// When its create's operation ends (network resources).
    pub(super) ready: Instant,
}

const NETWORK_API: &str = "2024-05-01";
const GROUP_API: &str = "2024-11-01";
const MSI_API: &str = "2024-11-30";
const ROLE_API: &str = "2022-04-01";

/// The answer to `path`, or `None` when it is none of these resources.
pub(super) fn answer(
    w: &mut World,
    s: &Shared,
    req: &Request,
    path: &str,
    api: &str,
    base: &str,
) -> Option<Reply> {
    let sub = format!("/subscriptions/{}/", w.sub);
    let rest = path.strip_prefix(&sub)?;
    let segs: Vec<&str> = rest.split('/').collect();
    let method = req.method.as_str();
    let body = || serde_json::from_slice::<Value>(&req.body).unwrap_or(Value::Null);
    let version = |want: &str| {
        (api != want).then(|| {
            error(
                400,
                "InvalidApiVersionParameter",
                &format!("The api-version '{api}' is invalid here; this fake serves '{want}'."),
                None,
            )
        })
    };
    match segs.as_slice() {
        // The network API's operation status.
        [
            "providers",
            "Microsoft.Network",
            "locations",
            _,
            "operations",
            id,
        ] => Some(super::operation_status(w, s, id)),
        [g, rg] if g.eq_ignore_ascii_case("resourcegroups") => {
            Some(version(GROUP_API).unwrap_or_else(|| group(w, method, rg, body())))
        }
        [g, rg, "providers", ns, kind, name @ ..] if g.eq_ignore_ascii_case("resourcegroups") => {
            let key = rg.to_ascii_lowercase();
            if !w.groups.contains_key(&key) {
                return Some(error(
                    404,
                    "ResourceGroupNotFound",
                    &format!("Resource group '{rg}' could not be found."),
                    None,
                ));
            }
            let id = path.to_string();
            match (*ns, *kind, name) {
                ("Microsoft.Network", "networkSecurityGroups" | "virtualNetworks", [_])
                | ("Microsoft.Network", "virtualNetworks", [_, "subnets", _]) => Some(
                    version(NETWORK_API)
                        .unwrap_or_else(|| network(w, s, method, &id, kind, name, body(), base)),
                ),
                ("Microsoft.ManagedIdentity", "userAssignedIdentities", [n]) => {
                    Some(version(MSI_API).unwrap_or_else(|| identity(w, method, &id, n, body())))
                }
                ("Microsoft.Authorization", "roleAssignments", [n]) => Some(
                    version(ROLE_API).unwrap_or_else(|| role(w, s, method, &id, rg, n, body())),
                ),
                _ => None,
            }
        }
        _ => None,
    }
}

fn not_found(kind: &str, name: &str) -> Reply {
    error(
        404,
        "NotFound",
        &format!("Resource '{name}' of type {kind} was not found."),
        None,
    )
}

fn bad(code: &str, message: &str) -> Reply {
    error(400, code, message, None)
}

fn group(w: &mut World, method: &str, rg: &str, body: Value) -> Reply {
    let key = rg.to_ascii_lowercase();
    let json_of = |w: &World, b: &Value| {
        let mut g = b.clone();
        g["id"] = json!(format!("/subscriptions/{}/resourceGroups/{rg}", w.sub));
        g["name"] = json!(rg);
        g["type"] = json!("Microsoft.Resources/resourceGroups");
        g["properties"] = json!({"provisioningState": "Succeeded"});
        g
    };
    match method {
        "GET" => match w.groups.get(&key) {
            Some(b) => Reply::new(200).set_body_json(json_of(w, b)),
            None => error(
                404,
                "ResourceGroupNotFound",
                &format!("Resource group '{rg}' could not be found."),
                None,
            ),
        },
        "PUT" => {
            let Some(location) = body.get("location").and_then(Value::as_str) else {
                return bad(
                    "LocationRequired",
                    "The location property is required for this definition.",
                );
            };
            let mut stored = json!({"location": location});
            if let Some(t) = body.get("tags") {
                stored["tags"] = t.clone();
            }
            match w.groups.get(&key) {
                Some(old) if old["location"].as_str() != Some(location) => error(
                    409,
                    "Conflict",
                    &format!(
                        "Resource group '{rg}' already exists in location '{}'.",
                        old["location"].as_str().unwrap_or("")
                    ),
                    None,
                ),
                Some(_) => {
                    w.groups.insert(key, stored.clone());
                    Reply::new(200).set_body_json(json_of(w, &stored))
                }
                None => {
                    w.groups.insert(key, stored.clone());
                    Reply::new(201).set_body_json(json_of(w, &stored))
                }
            }
        }
        _ => bad(
            "BadRequest",
            &format!("{method} is not served for resource groups"),
        ),
    }
}

/// The stored resource `id` as `GET` answers it now.
fn read(w: &World, id: &str) -> Option<Value> {
    let r = w.resources.get(&id.to_ascii_lowercase())?;
    let mut b = r.body.clone();
    let state = if r.ready <= Instant::now() {
        "Succeeded"
    } else {
        "Updating"
    };
    b["properties"]["provisioningState"] = json!(state);
    // (`get_mut`: indexing would add a `subnets: null` to what has none.)
    if let Some(subnets) = b
        .get_mut("properties")
        .and_then(|p| p.get_mut("subnets"))
        .and_then(Value::as_array_mut)
    {
        for s in subnets {
            s["properties"]["provisioningState"] = json!(state);
        }
    }
    Some(b)
}

fn valid_prefix(p: &str) -> Option<(u32, u32)> {
    let (ip, bits) = p.split_once('/')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let bits: u32 = bits.parse().ok().filter(|b| *b <= 32)?;
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    Some((u32::from(ip) & mask, mask))
}

#[allow(clippy::too_many_arguments)]
fn network(
    w: &mut World,
    s: &Shared,
    method: &str,
    id: &str,
    kind: &str,
    name: &[&str],
    body: Value,
    base: &str,
) -> Reply {
    if let [vnet, "subnets", subnet] = name {
        if method != "GET" {
            return bad("BadRequest", "only GET of a subnet is served");
        }
        let vnet_id = id.rsplit_once("/subnets/").map(|(v, _)| v).unwrap_or(id);
        return read(w, vnet_id)
            .and_then(|v| {
                v["properties"]["subnets"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x["name"] == json!(subnet)).cloned())
            })
            .map(|b| Reply::new(200).set_body_json(b))
            .unwrap_or_else(|| {
                not_found(
                    "Microsoft.Network/virtualNetworks/subnets",
                    &format!("{vnet}/{subnet}"),
                )
            });
    }
    let short = name.first().copied().unwrap_or("");
    let rtype = format!("Microsoft.Network/{kind}");
    match method {
        "GET" => read(w, id)
            .map(|b| Reply::new(200).set_body_json(b))
            .unwrap_or_else(|| not_found(&rtype, short)),
        "PUT" => {
            if body.get("location").and_then(Value::as_str).is_none() {
                return bad(
                    "LocationRequired",
                    "The location property is required for this definition.",
                );
            }
            let mut b = body.clone();
            if kind == "networkSecurityGroups" {
                for r in b["properties"]["securityRules"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    let p = &r["properties"];
                    let prio = p["priority"].as_u64().unwrap_or(0);
                    if r["name"].as_str().is_none()
                        || !(100..=4096).contains(&prio)
                        || p["protocol"].as_str().is_none()
                        || p["access"].as_str().is_none()
                        || p["direction"].as_str().is_none()
                    {
                        return bad(
                            "InvalidRequestFormat",
                            &format!(
                                "Security rule {r} needs a name, a priority in 100..4096, protocol, access and direction."
                            ),
                        );
                    }
                }
            } else {
                let spaces: Vec<(u32, u32)> = b["properties"]["addressSpace"]["addressPrefixes"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().and_then(valid_prefix))
                            .collect()
                    })
                    .unwrap_or_default();
                if spaces.is_empty() {
                    return bad(
                        "InvalidRequestFormat",
                        "addressSpace.addressPrefixes needs at least one IPv4 prefix.",
                    );
                }
                let subnets = b["properties"]["subnets"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for (i, sn) in subnets.iter().enumerate() {
                    let Some(sname) = sn["name"].as_str() else {
                        return bad("InvalidRequestFormat", "Each subnet needs a name.");
                    };
                    let inside = sn["properties"]["addressPrefix"]
                        .as_str()
                        .and_then(valid_prefix)
                        .is_some_and(|(net, mask)| {
                            spaces
                                .iter()
                                .any(|(snet, smask)| mask & smask == *smask && net & smask == *snet)
                        });
                    if !inside {
                        return bad(
                            "InvalidRequestFormat",
                            &format!(
                                "Subnet '{sname}' needs an addressPrefix inside the network's address space."
                            ),
                        );
                    }
                    if let Some(nsg) = sn["properties"]["networkSecurityGroup"]["id"].as_str()
                        && !w.resources.contains_key(&nsg.to_ascii_lowercase())
                    {
                        return bad(
                            "InvalidResourceReference",
                            &format!("Resource {nsg} referenced by resource {id} was not found."),
                        );
                    }
                    b["properties"]["subnets"][i]["id"] = json!(format!("{id}/subnets/{sname}"));
                    b["properties"]["subnets"][i]["type"] =
                        json!("Microsoft.Network/virtualNetworks/subnets");
                }
            }
            b["id"] = json!(id);
            b["name"] = json!(short);
            b["type"] = json!(rtype);
            let existed = w.resources.contains_key(&id.to_ascii_lowercase());
            let (_, op_url) = super::new_network_op(w, base);
            w.resources.insert(
                id.to_ascii_lowercase(),
                Stored {
                    body: b,
                    ready: Instant::now() + s.timing.operation,
                },
            );
            let now = read(w, id).unwrap_or(Value::Null);
            Reply::new(if existed { 200 } else { 201 })
                .insert_header("Azure-AsyncOperation", op_url.as_str())
                .insert_header("Retry-After", "0")
                .set_body_json(now)
        }
        _ => bad("BadRequest", &format!("{method} is not served for {rtype}")),
    }
}

fn identity(w: &mut World, method: &str, id: &str, name: &str, body: Value) -> Reply {
    let rtype = "Microsoft.ManagedIdentity/userAssignedIdentities";
    match method {
        "GET" => read(w, id)
            .map(|mut b| {
                if let Some(p) = b["properties"].as_object_mut() {
                    p.remove("provisioningState");
                }
                Reply::new(200).set_body_json(b)
            })
            .unwrap_or_else(|| not_found(rtype, name)),
        "PUT" => {
            let Some(location) = body.get("location").and_then(Value::as_str) else {
                return bad(
                    "LocationRequired",
                    "The location property is required for this definition.",
                );
            };
            let existed = w.resources.contains_key(&id.to_ascii_lowercase());
            let mut b = seed_identity(w, id, name, location);
            if let Some(t) = body.get("tags") {
                b["tags"] = t.clone();
                if let Some(r) = w.resources.get_mut(&id.to_ascii_lowercase()) {
                    r.body["tags"] = t.clone();
                }
            }
            Reply::new(if existed { 200 } else { 201 }).set_body_json(b)
        }
        _ => bad("BadRequest", &format!("{method} is not served for {rtype}")),
    }
}

/// Identity `id` made (a new principal) or kept as it is (its principal stays); its body.
pub(super) fn seed_identity(w: &mut World, id: &str, name: &str, location: &str) -> Value {
    let key = id.to_ascii_lowercase();
    if let Some(old) = w.resources.get(&key) {
        return old.body.clone();
    }
    w.next += 1;
    let n = w.next;
    let b = json!({
        "id": id, "name": name, "type": "Microsoft.ManagedIdentity/userAssignedIdentities",
        "location": location,
        "properties": {
            "principalId": format!("00000000-0000-4000-a000-{n:012x}"),
            "clientId": format!("00000000-0000-4000-b000-{n:012x}"),
            "tenantId": "00000000-0000-4000-c000-000000000001",
        },
    });
    w.resources.insert(
        key,
        Stored {
            body: b.clone(),
            ready: Instant::now(),
        },
    );
    b
}

#[allow(clippy::too_many_arguments)]
fn role(
    w: &mut World,
    s: &Shared,
    method: &str,
    id: &str,
    rg: &str,
    name: &str,
    body: Value,
) -> Reply {
    let rtype = "Microsoft.Authorization/roleAssignments";
    let key = id.to_ascii_lowercase();
    let answer = |b: &Value| {
        let mut b = b.clone();
        if let Some(p) = b["properties"].as_object_mut() {
            p.remove("provisioningState");
        }
        b
    };
    match method {
        "GET" => w
            .resources
            .get(&key)
            .map(|r| Reply::new(200).set_body_json(answer(&r.body)))
            .unwrap_or_else(|| {
                error(
                    404,
                    "RoleAssignmentNotFound",
                    &format!("The role assignment '{name}' is not found."),
                    None,
                )
            }),
        "DELETE" => match w.resources.remove(&key) {
            Some(r) => Reply::new(200).set_body_json(answer(&r.body)),
            None => Reply::new(204),
        },
        "PUT" => {
            let p = &body["properties"];
            let (Some(principal), Some(role_def)) =
                (p["principalId"].as_str(), p["roleDefinitionId"].as_str())
            else {
                return bad(
                    "InvalidRequestFormat",
                    "properties.principalId and properties.roleDefinitionId are required.",
                );
            };
            let role_prefix = format!(
                "/subscriptions/{}/providers/Microsoft.Authorization/roleDefinitions/",
                w.sub
            );
            if !role_def.starts_with(&role_prefix) {
                return bad(
                    "InvalidRequestFormat",
                    &format!("The role definition id '{role_def}' is not valid."),
                );
            }
            {
                let mut f = super::lock(&s.faults);
                if f.role_forbidden {
                    return error(
                        403,
                        "AuthorizationFailed",
                        "The client does not have authorization to perform action 'Microsoft.Authorization/roleAssignments/write'.",
                        None,
                    );
                }
                if f.principal_spread > 0 {
                    f.principal_spread -= 1;
                    return bad(
                        "PrincipalNotFound",
                        &format!("Principal {principal} does not exist in the directory."),
                    );
                }
            }
            let known = w.resources.values().any(|r| {
                r.body["type"] == json!("Microsoft.ManagedIdentity/userAssignedIdentities")
                    && r.body["properties"]["principalId"] == json!(principal)
            });
            if !known {
                return bad(
                    "PrincipalNotFound",
                    &format!("Principal {principal} does not exist in the directory."),
                );
            }
            if let Some(old) = w.resources.get(&key)
                && old.body["properties"]["principalId"] != json!(principal)
            {
                return error(
                    409,
                    "RoleAssignmentUpdateNotPermitted",
                    "Tenant ID, application ID, principal ID, and scope are not allowed to be updated.",
                    None,
                );
            }
            let scope = format!("/subscriptions/{}/resourceGroups/{rg}", w.sub);
            let twin = w.resources.iter().any(|(k, r)| {
                *k != key
                    && r.body["type"] == json!(rtype)
                    && r.body["properties"]["principalId"] == json!(principal)
                    && r.body["properties"]["roleDefinitionId"] == json!(role_def)
                    && r.body["properties"]["scope"]
                        .as_str()
                        .is_some_and(|x| x.eq_ignore_ascii_case(&scope))
            });
            if twin {
                return error(
                    409,
                    "RoleAssignmentExists",
                    "The role assignment already exists.",
                    None,
                );
            }
            let existed = w.resources.contains_key(&key);
            let mut props = p.clone();
            props["scope"] = json!(scope);
            let b = json!({"id": id, "name": name, "type": rtype, "properties": props});
            w.resources.insert(
                key,
                Stored {
                    body: b.clone(),
                    ready: Instant::now(),
                },
            );
            Reply::new(if existed { 200 } else { 201 }).set_body_json(answer(&b))
        }
        _ => bad("BadRequest", &format!("{method} is not served for {rtype}")),
    }
}
