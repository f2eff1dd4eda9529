//! What the ARM fake answers of the network API (learn.microsoft.com/rest/api/
//! virtualnetwork): `Network Interfaces - Get` for the NICs a VM-level network
//! configuration made.

use serde_json::{Value, json};

use super::super::record::Reply;
use super::{World, error};

/// The answer to a network API `path`, or `None` when it is not one.
pub(super) fn answer(w: &World, path: &str) -> Option<Reply> {
    let nic_prefix = format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces/",
        w.sub, w.rg
    );
    let nic = path.strip_prefix(&nic_prefix)?;
    let owner = w.vms.values().find(|v| {
        v.body["properties"]["networkProfile"]["networkInterfaceConfigurations"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|n| n.get("name").and_then(Value::as_str) == Some(nic))
            })
    });
    Some(match owner {
        Some(_) => Reply::new(200).set_body_json(json!({
            "name": nic,
            "properties": {"ipConfigurations": [{"name": "ip", "properties": {
                "primary": true, "privateIPAddress": "127.0.0.1", "privateIPAllocationMethod": "Dynamic"}}]}
        })),
        None => error(404, "NotFound", &format!("Resource '{nic}' was not found."), None),
    })
}
