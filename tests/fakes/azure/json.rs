//! What the ARM fake answers for a VM, its instance view and an operation status, in the
//! REST reference's JSON.

use serde_json::{Value, json};

use super::{Op, Timing, Vm, World};

pub(super) fn vm_json(w: &World, name: &str, v: &Vm) -> Value {
    let mut b = Value::Object(v.body.clone());
    b["id"] = json!(format!(
        "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachines/{name}",
        w.sub, w.rg
    ));
    b["name"] = json!(name);
    b["type"] = json!("Microsoft.Compute/virtualMachines");
    if !b.get("properties").is_some_and(Value::is_object) {
        b["properties"] = json!({});
    }
    // The NICs a VM-level configuration made (Azure names each by its configuration).
    let nics: Vec<Value> = b["properties"]["networkProfile"]["networkInterfaceConfigurations"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|n| n.get("name").and_then(Value::as_str))
                .map(|n| {
                    json!({"id": format!("/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces/{n}", w.sub, w.rg),
                        "properties": {"primary": true, "deleteOption": "Delete"}})
                })
                .collect()
        })
        .unwrap_or_default();
    if !nics.is_empty() && v.prov != "Creating" {
        b["properties"]["networkProfile"]["networkInterfaces"] = json!(nics);
    }
    b["properties"]["provisioningState"] = json!(v.prov);
    b["properties"]["vmId"] = json!(v.vm_id);
    // Secrets and custom data are not returned (the reference: "customData ... is not
    // returned").
    if let Some(o) = b["properties"]
        .get_mut("osProfile")
        .and_then(Value::as_object_mut)
    {
        o.remove("customData");
    }
    b
}

pub(super) fn instance_view(v: &Vm) -> Value {
    let mut statuses = vec![
        json!({"code": format!("ProvisioningState/{}", v.prov.to_ascii_lowercase()),
        "level": if v.prov == "Failed" { "Error" } else { "Info" }}),
    ];
    if let Some(p) = v.power {
        statuses.push(json!({"code": format!("PowerState/{p}"), "level": "Info"}));
    }
    json!({ "statuses": statuses })
}

pub(super) fn op_json(id: &str, op: &Op, t: &Timing) -> Value {
    let done = op.start.elapsed() >= t.operation;
    let mut o = json!({"name": id, "startTime": "2026-12-01T00:00:00.0000000+00:00",
        "status": if !done { "InProgress" } else if op.error.is_some() { "Failed" } else { "Succeeded" }});
    if done {
        o["endTime"] = json!("2026-12-01T00:00:01.0000000+00:00");
        if let Some((code, message)) = &op.error {
            o["error"] = json!({"code": code, "message": message});
        }
    }
    o
}
