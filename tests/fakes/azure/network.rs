//! What the ARM fake answers of the network API (learn.microsoft.com/rest/api/
//! virtualnetwork), api-version 2024-05-01, for the resources a VM-level network
//! configuration made (Azure names each after its configuration):
//!
//! - `Network Interfaces - Get` — `GET .../Microsoft.Network/networkInterfaces/{nic}`:
//!   its primary `ipConfigurations[0]`, `privateIPAddress` loopback (every node is on
//!   this machine), and `publicIPAddress: {id}` when the configuration asks for one
//!   (`publicIPAddressConfiguration`).
//! - `Public IP Addresses - Get` — `GET .../Microsoft.Network/publicIPAddresses/{name}`:
//!   `properties.ipAddress` (static: given at create), an address of the documentation
//!   range 203.0.113.0/24 that nothing connects to.
//!
//! Anything else of the network API, or a resource no VM made: 404 `NotFound`.

use serde_json::{Value, json};

use super::super::record::Reply;
use super::{Vm, World, error};

/// The answer to a network API `path`, or `None` when it is not one.
pub(super) fn answer(w: &World, path: &str) -> Option<Reply> {
    let prefix = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/",
        w.sub, w.rg
    );
    let rest = path.strip_prefix(&prefix)?;
    let (kind, name) = rest.split_once('/')?;
    let not_found = || {
        error(
            404,
            "NotFound",
            &format!("Resource '{name}' was not found."),
            None,
        )
    };
    Some(match kind {
        "networkInterfaces" => match nic_config(w, name) {
            Some((_, c)) => {
                let mut ip = json!({"primary": true, "privateIPAddress": "127.0.0.1",
                    "privateIPAllocationMethod": "Dynamic"});
                if let Some(pip) = public_name(&c) {
                    ip["publicIPAddress"] =
                        json!({"id": format!("{prefix}publicIPAddresses/{pip}")});
                }
                Reply::new(200).set_body_json(json!({
                    "name": name,
                    "properties": {"ipConfigurations": [{"name": "ip", "properties": ip}]}
                }))
            }
            None => not_found(),
        },
        "publicIPAddresses" => {
            let owned = w.vms.values().any(|v| {
                configs(v)
                    .iter()
                    .any(|c| public_name(c).as_deref() == Some(name))
            });
            // An address of the name's own (stable while other VMs come and go).
            let n = name
                .bytes()
                .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
            match owned {
                true => Reply::new(200).set_body_json(json!({
                    "name": name,
                    "properties": {
                        "ipAddress": format!("203.0.113.{}", n % 254 + 1),
                        "publicIPAllocationMethod": "Static",
                        "provisioningState": "Succeeded",
                    }
                })),
                false => not_found(),
            }
        }
        _ => not_found(),
    })
}

/// The VM-level network interface configurations of `v`.
fn configs(v: &Vm) -> Vec<Value> {
    v.body
        .get("properties")
        .and_then(|p| p.get("networkProfile"))
        .and_then(|n| n.get("networkInterfaceConfigurations"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The VM and configuration that made NIC `name`.
fn nic_config<'a>(w: &'a World, name: &str) -> Option<(&'a Vm, Value)> {
    w.vms.values().find_map(|v| {
        configs(v)
            .into_iter()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
            .map(|c| (v, c))
    })
}

/// The name of the public address a NIC configuration asks for, if any.
fn public_name(config: &Value) -> Option<String> {
    config
        .get("properties")?
        .get("ipConfigurations")?
        .as_array()?
        .iter()
        .find_map(|ip| {
            ip.get("properties")?
                .get("publicIPAddressConfiguration")?
                .get("name")?
                .as_str()
                .map(str::to_string)
        })
}
