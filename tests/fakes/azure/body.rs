//! The ARM fake's check of a VM create body, as Compute answers a bad one: the first
//! problem, as (`target`, message), for a 400 `InvalidParameter`.

use base64::Engine as _;
use serde_json::Value;

/// Checks a create body as Compute would: the first problem, as (target, message).
pub(super) fn check_body(b: &Value, location: &str) -> Result<(), (String, String)> {
    let bad = |t: &str, m: &str| Err((t.to_string(), m.to_string()));
    match b.get("location").and_then(Value::as_str) {
        Some(l) if l.eq_ignore_ascii_case(location) => {}
        Some(l) => {
            return bad(
                "location",
                &format!(
                    "The resource group is in '{location}'; this fake serves only it, not '{l}'."
                ),
            );
        }
        None => {
            return bad(
                "location",
                "The location property is required for this definition.",
            );
        }
    }
    let p = b.get("properties").cloned().unwrap_or(Value::Null);
    if p.get("hardwareProfile")
        .and_then(|h| h.get("vmSize"))
        .and_then(Value::as_str)
        .is_none()
    {
        return bad(
            "hardwareProfile.vmSize",
            "The value of parameter vmSize is invalid.",
        );
    }
    let image = p
        .get("storageProfile")
        .and_then(|s| s.get("imageReference"));
    let has_image = image.is_some_and(|i| {
        i.get("id").is_some()
            || ["publisher", "offer", "sku"]
                .iter()
                .all(|k| i.get(*k).and_then(Value::as_str).is_some())
    });
    if !has_image {
        return bad(
            "imageReference",
            "The image reference is required (publisher, offer, sku, version, or id).",
        );
    }
    let os = p.get("osProfile").cloned().unwrap_or(Value::Null);
    if os.get("adminUsername").and_then(Value::as_str).is_none() {
        return bad(
            "osProfile.adminUsername",
            "Required parameter 'adminUsername' is missing (null).",
        );
    }
    let keys = os
        .get("linuxConfiguration")
        .and_then(|l| l.get("ssh"))
        .and_then(|s| s.get("publicKeys"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if keys == 0 && os.get("adminPassword").is_none() {
        return bad(
            "linuxConfiguration.ssh.publicKeys",
            "Authentication using either SSH or by user name and password must be enabled in Linux profile.",
        );
    }
    if let Some(cd) = os.get("customData") {
        let decoded = cd
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
        match decoded {
            None => {
                return bad(
                    "customData",
                    "Custom data in OSProfile must be in Base64 encoding.",
                );
            }
            Some(d) if d.len() > 65535 => {
                return bad(
                    "customData",
                    "Custom data in OSProfile must be at most 65535 bytes.",
                );
            }
            Some(_) => {}
        }
    }
    let net = p.get("networkProfile").cloned().unwrap_or(Value::Null);
    let configs = net
        .get("networkInterfaceConfigurations")
        .and_then(Value::as_array);
    let nics = net.get("networkInterfaces").and_then(Value::as_array);
    match (configs, nics) {
        (Some(c), _) if !c.is_empty() => {
            if net
                .get("networkApiVersion")
                .and_then(Value::as_str)
                .is_none()
            {
                return bad(
                    "networkProfile.networkApiVersion",
                    "networkApiVersion must be specified when networkInterfaceConfigurations are given.",
                );
            }
            for n in c {
                let ipc = n
                    .get("properties")
                    .and_then(|p| p.get("ipConfigurations"))
                    .and_then(Value::as_array);
                let ok = ipc.is_some_and(|ips| {
                    !ips.is_empty()
                        && ips.iter().all(|ip| {
                            ip.get("properties")
                                .and_then(|p| p.get("subnet"))
                                .and_then(|s| s.get("id"))
                                .and_then(Value::as_str)
                                .is_some_and(|id| id.contains("/subnets/"))
                        })
                });
                if !ok {
                    return bad(
                        "networkInterfaceConfigurations.ipConfigurations",
                        "Each network interface configuration needs ipConfigurations on a subnet.",
                    );
                }
            }
        }
        (_, Some(n)) if !n.is_empty() => {}
        _ => {
            return bad(
                "networkProfile",
                "At least one network interface is required.",
            );
        }
    }
    Ok(())
}
