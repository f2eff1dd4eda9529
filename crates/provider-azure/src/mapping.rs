//! Pure functions, no client, no async: a node type's `node_config` -> the body of
//! `virtualMachines.createOrUpdate` (Ray's names and tags, the VM's own NIC, public
//! address and OS disk that go with it, the boot script as `customData`); a VM as listed
//! -> core's `CloudInstance`.

use std::collections::BTreeMap;

use azure_mgmt_compute::package_2024_07_01::models;
use base64::Engine as _;
use rayscale_core::provider::{CloudInstance, CloudInstanceState, NodeKind, tags};
use serde_json::{Map, Value, json};

use crate::AzureError;
use crate::config::{AzureConfig, Image, Zones};

/// How a VM learns who it is: the instance metadata service (IMDS); cloud-init runs
/// `customData` once per VM, so the script installs itself to run at every boot (a
/// deallocated and restarted worker).
pub const METADATA: rayscale_core::provider::cloud::MetadataCommands<'static> =
    rayscale_core::provider::cloud::MetadataCommands {
        instance_id: INSTANCE_ID_COMMAND,
        private_ip: PRIVATE_IP_COMMAND,
        per_boot: true,
        notices: Some(rayscale_core::provider::boot::NoticeCloud::Azure),
        host_index: None,
    };

/// A shell command that prints `path` of IMDS (`instance/...`, as text), retried while
/// it comes up. `RAYSCALE_METADATA_URL` replaces the service's address (the boot
/// simulator's stand-in).
macro_rules! imds_command {
    ($path:literal) => {
        concat!(
            "curl -sf --retry 20 --retry-connrefused --retry-delay 1 -H 'Metadata: true' ",
            "\"${RAYSCALE_METADATA_URL:-http://169.254.169.254}/metadata/",
            $path,
            "?api-version=2021-02-01&format=text\""
        )
    };
}

/// The shell command that prints the VM's name (its cloud instance id, as in Ray).
pub const INSTANCE_ID_COMMAND: &str = imds_command!("instance/compute/name");

/// The shell command that prints the VM's private address (first NIC).
pub const PRIVATE_IP_COMMAND: &str =
    imds_command!("instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress");

/// Azure's longest Linux VM (and computer) name.
pub const MAX_NAME: usize = 64;

/// The network API version of VM-level NIC configurations (the VM makes its NIC).
pub const NETWORK_API_VERSION: &str = "2020-11-01";

/// Azure's limit on `customData`, decoded ("the maximum length of the binary array is
/// 65535 bytes", `OSProfile.customData`).
pub const MAX_CUSTOM_DATA: usize = 65535;

/// rayscale's VM name for the `index`-th node of `request_id`:
/// `ray-<cluster>-<kind>-<8 hex>`, the hex derived from the request and index (so a
/// replayed create is a PUT of the same VM), the cluster part shortened to keep the name
/// within 64 characters.
pub fn vm_name(cluster: &str, kind: NodeKind, request_id: &str, index: u64) -> String {
    rayscale_core::provider::cloud::node_name(cluster, kind, request_id, index, MAX_NAME, None)
}

/// Ray's tags for a node of `node_type` and `kind`.
pub fn ray_tags(
    cluster: &str,
    node_type: &str,
    kind: NodeKind,
    request_id: Option<&str>,
    launch_hash: &str,
) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    t.insert(tags::CLUSTER_NAME.to_string(), cluster.to_string());
    t.insert(tags::NODE_KIND.to_string(), kind.tag_value().to_string());
    t.insert(tags::USER_NODE_TYPE.to_string(), node_type.to_string());
    t.insert(
        tags::NODE_NAME.to_string(),
        format!("ray-{cluster}-{}", kind.tag_value()),
    );
    t.insert(
        tags::NODE_STATUS.to_string(),
        tags::STATUS_UNINITIALIZED.to_string(),
    );
    t.insert(tags::LAUNCH_CONFIG.to_string(), launch_hash.to_string());
    if let Some(r) = request_id {
        t.insert(tags::LAUNCH_REQUEST.to_string(), r.to_string());
    }
    t
}

/// The zones of `zones` a launch may use: those not in `avoid` (zones that ran out or
/// took a VM back a short while ago). `None` when every listed zone is avoided.
pub fn open_zones(zones: &Zones, avoid: &[String]) -> Option<Zones> {
    match zones {
        Zones::Any => Some(Zones::Any),
        Zones::List(z) if z.is_empty() => Some(Zones::Any),
        Zones::List(z) => {
            let open: Vec<String> = z.iter().filter(|z| !avoid.contains(z)).cloned().collect();
            (!open.is_empty()).then_some(Zones::List(open))
        }
    }
}

/// The zone of VM `name` among `zones`: spread by the name's hash, so the VMs of one
/// request (and of one-at-a-time requests) land in different zones.
pub fn zone_for(zones: &Zones, name: &str) -> Option<String> {
    match zones {
        Zones::Any => None,
        Zones::List(z) if z.is_empty() => None,
        Zones::List(z) => {
            let h = name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let i = usize::try_from(h % z.len() as u64).unwrap_or(0);
            z.get(i).cloned()
        }
    }
}

/// One VM to create.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSpec<'a> {
    /// The node type.
    pub node_type: &'a str,
    /// Head or worker.
    pub kind: NodeKind,
    /// The VM name.
    pub name: &'a str,
    /// The launch request, for its tag.
    pub request_id: Option<&'a str>,
    /// rayscale's boot script, if any.
    pub boot_script: Option<&'a str>,
    /// Zones not to use (the launch's `avoid_zones`).
    pub avoid_zones: &'a [String],
}

/// The VM body for `spec`, as the REST API spells it (`VirtualMachine`, api-version
/// 2024-07-01): Ray's VM template's parameters mapped onto the VM itself, with a
/// VM-level NIC configuration (`networkApiVersion` 2020-11-01) so the NIC, its public
/// address and the OS disk are made with the VM and deleted with it (`deleteOption:
/// Delete`); Ray's tags over the user's; the boot script as `customData`.
pub fn vm_json(cfg: &AzureConfig, spec: &CreateSpec<'_>) -> Result<Value, AzureError> {
    let t = spec.node_type;
    let nc = cfg.node_types.get(t).ok_or_else(|| {
        AzureError::config(format!("available_node_types.{t}"), "unknown node type")
    })?;
    let path = format!("available_node_types.{t}.node_config.azure_arm_parameters");
    let name = spec.name;
    let image = match &nc.image {
        Image::Marketplace {
            publisher,
            offer,
            sku,
            version,
        } => json!({"publisher": publisher, "offer": offer, "sku": sku, "version": version}),
        Image::Id(id) => json!({"id": id}),
    };
    let mut os_disk = json!({
        "createOption": "FromImage",
        "deleteOption": "Delete",
        "managedDisk": {"storageAccountType": "Standard_LRS"},
    });
    if let Some(gb) = nc.os_disk_size_gb {
        os_disk["diskSizeGB"] = json!(gb);
    }
    let public_ip = nc.public_ip.unwrap_or(
        !cfg.use_internal_ips || (spec.kind == NodeKind::Head && cfg.use_external_head_ip),
    );
    let mut ip_config = json!({
        "name": format!("{name}-ip"),
        "properties": {"primary": true, "subnet": {"id": cfg.subnet}},
    });
    if public_ip {
        ip_config["properties"]["publicIPAddressConfiguration"] = json!({
            "name": format!("{name}-pip"),
            "sku": {"name": "Standard", "tier": "Regional"},
            "properties": {"deleteOption": "Delete", "publicIPAllocationMethod": "Static"},
        });
    }
    let mut nic = json!({
        "name": format!("{name}-nic"),
        "properties": {
            "primary": true,
            "deleteOption": "Delete",
            "enableAcceleratedNetworking": nc.accelerated_networking,
            "ipConfigurations": [ip_config],
        },
    });
    if let Some(nsg) = &cfg.nsg {
        nic["properties"]["networkSecurityGroup"] = json!({"id": nsg});
    }
    let user = &nc.admin_username;
    let mut os_profile = json!({
        "computerName": name,
        "adminUsername": user,
        "linuxConfiguration": {
            "disablePasswordAuthentication": true,
            "ssh": {"publicKeys": [{
                "path": format!("/home/{user}/.ssh/authorized_keys"),
                "keyData": nc.public_key,
            }]},
        },
    });
    if let Some(script) = spec.boot_script {
        if script.len() > MAX_CUSTOM_DATA {
            return Err(AzureError::config(
                path,
                format!(
                    "the boot script is {} bytes; Azure's customData takes at most {MAX_CUSTOM_DATA} \
                     (shorten setup_commands or move them into the image)",
                    script.len()
                ),
            ));
        }
        os_profile["customData"] =
            json!(base64::engine::general_purpose::STANDARD.encode(script.as_bytes()));
    }
    let mut properties = json!({
        "hardwareProfile": {"vmSize": nc.vm_size},
        "storageProfile": {"imageReference": image, "osDisk": os_disk},
        "osProfile": os_profile,
        "networkProfile": {
            "networkApiVersion": NETWORK_API_VERSION,
            "networkInterfaceConfigurations": [nic],
        },
    });
    if let Some(p) = &nc.priority {
        properties["priority"] = json!(p);
        if nc.is_spot() {
            properties["evictionPolicy"] = json!(
                nc.eviction_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into())
            );
            if let Some(m) = nc.max_price {
                properties["billingProfile"] = json!({"maxPrice": m});
            }
        }
    }
    let mut tag_map: Map<String, Value> = nc
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let hash = cfg.launch_hashes.get(t, spec.kind);
    for (k, v) in ray_tags(&cfg.cluster_name, t, spec.kind, spec.request_id, hash) {
        tag_map.insert(k, Value::String(v));
    }
    for (k, v) in cfg.launch_hashes.extra_tags(spec.kind) {
        tag_map.insert(k.to_string(), Value::String(v));
    }
    let mut body = json!({
        "location": cfg.location,
        "tags": tag_map,
        "properties": properties,
    });
    let zones = nc.zones.as_ref().unwrap_or(&cfg.zones);
    let open = open_zones(zones, spec.avoid_zones).ok_or_else(|| AzureError::Call {
        call: "virtualMachines.createOrUpdate",
        code: None,
        status: None,
        kind: crate::errors::Class::Capacity.kind(t, None),
        message: format!(
            "every zone of {t} is avoided for now ({}): not created",
            spec.avoid_zones.join(", ")
        ),
    })?;
    if let Some(z) = zone_for(&open, name) {
        body["zones"] = json!([z]);
    }
    if let Some(msi) = &cfg.msi {
        body["identity"] = json!({"type": "UserAssigned", "userAssignedIdentities": {msi: {}}});
    }
    Ok(body)
}

/// Checks [`vm_json`] against the client's `VirtualMachine` model (a value of the wrong
/// type is an error naming its path), returning the JSON to send (the model itself
/// drops user-assigned identities, so the JSON goes on the wire).
pub fn vm_body(cfg: &AzureConfig, spec: &CreateSpec<'_>) -> Result<Value, AzureError> {
    let json = vm_json(cfg, spec)?;
    let text = json.to_string();
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize::<_, models::VirtualMachine>(de).map_err(|e| {
        AzureError::config(
            format!(
                "available_node_types.{}.node_config.azure_arm_parameters ({})",
                spec.node_type,
                e.path()
            ),
            crate::errors::one_line(&e.inner().to_string()),
        )
    })?;
    Ok(json)
}

/// A VM's power, from its instance view (`PowerState/<x>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// `starting`.
    Starting,
    /// `running`.
    Running,
    /// `stopping` or `stopped` (powered off, still allocated and billed).
    Stopped,
    /// `deallocating`.
    Deallocating,
    /// `deallocated`: a cached node (or an evicted Spot VM with `Deallocate`).
    Deallocated,
    /// No power state given (a VM being made, or failed).
    Unknown,
}

/// The power in instance view `statuses` codes.
pub fn power_of<'a>(codes: impl IntoIterator<Item = &'a str>) -> Power {
    for c in codes {
        if let Some(p) = c.strip_prefix("PowerState/") {
            return match p.to_ascii_lowercase().as_str() {
                "starting" => Power::Starting,
                "running" => Power::Running,
                "stopping" | "stopped" => Power::Stopped,
                "deallocating" => Power::Deallocating,
                "deallocated" => Power::Deallocated,
                _ => Power::Unknown,
            };
        }
    }
    Power::Unknown
}

/// What the provider reads of a listed VM.
#[derive(Debug, Clone, PartialEq)]
pub struct Vm {
    /// The VM's name (the cloud instance id).
    pub name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// `properties.provisioningState` (`Creating`, `Updating`, `Succeeded`, `Failed`,
    /// `Deleting`, ...).
    pub provisioning_state: String,
    /// Its `vmId` (a new VM of an old name has a new one).
    pub vm_id: String,
    /// The resource id of its primary NIC (made with it), once Azure has made it.
    pub nic_id: Option<String>,
    /// Its zone (`zones[0]`), when pinned to one.
    pub zone: Option<String>,
}

impl Vm {
    /// From the client's model.
    pub fn from_model(vm: &models::VirtualMachine) -> Option<Vm> {
        let tags = match &vm.resource.tags {
            Some(Value::Object(m)) => m
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
            _ => BTreeMap::new(),
        };
        let props = vm.properties.as_ref();
        Some(Vm {
            name: vm.resource.name.clone()?,
            tags,
            provisioning_state: props
                .and_then(|p| p.provisioning_state.clone())
                .unwrap_or_default(),
            vm_id: props.and_then(|p| p.vm_id.clone()).unwrap_or_default(),
            nic_id: props
                .and_then(|p| p.network_profile.as_ref())
                .and_then(|n| {
                    n.network_interfaces
                        .iter()
                        .find(|i| i.properties.as_ref().and_then(|p| p.primary) == Some(true))
                        .or(n.network_interfaces.first())
                })
                .and_then(|i| i.sub_resource.id.clone()),
            zone: vm.zones.first().cloned(),
        })
    }

    /// Whether this VM belongs to `cluster` (Ray's cluster tag).
    pub fn in_cluster(&self, cluster: &str) -> bool {
        self.tags.get(tags::CLUSTER_NAME).map(String::as_str) == Some(cluster)
    }

    /// Whether its create failed: Azure keeps such a VM, `Failed`, until it is deleted.
    pub fn failed(&self, power: Power) -> bool {
        self.provisioning_state.eq_ignore_ascii_case("Failed") && power != Power::Running
    }
}

/// The VM as core sees it (with its `power`); `None` for a VM without Ray's kind tag, or
/// one not live (deallocated, failed).
pub fn cloud_instance(vm: &Vm, power: Power) -> Option<CloudInstance> {
    let kind = match vm.tags.get(tags::NODE_KIND).map(String::as_str) {
        Some(tags::NODE_KIND_HEAD) => NodeKind::Head,
        Some(tags::NODE_KIND_WORKER) => NodeKind::Worker,
        _ => return None,
    };
    let ps = vm.provisioning_state.to_ascii_lowercase();
    let state = match (ps.as_str(), power) {
        (_, Power::Deallocating | Power::Deallocated) => return None,
        _ if vm.failed(power) => return None,
        // Going; one never seen running (a failed create being deleted) was no node.
        ("deleting", Power::Unknown) => return None,
        ("deleting", _) => CloudInstanceState::Stopping,
        (_, Power::Stopped) => CloudInstanceState::Stopping,
        // Running, whatever its last update did (`Succeeded`, `Updating`, or `Failed`
        // after an update: the VM still runs).
        (p, Power::Running) if p != "creating" => CloudInstanceState::Running,
        _ => CloudInstanceState::Pending,
    };
    Some(CloudInstance {
        cloud_instance_id: vm.name.clone(),
        node_type: vm
            .tags
            .get(tags::USER_NODE_TYPE)
            .cloned()
            .unwrap_or_default(),
        kind,
        request_id: vm.tags.get(tags::LAUNCH_REQUEST).cloned(),
        state,
        private_ip: None,
        // Read from the network API for nothing yet (the head's private address alone).
        public_ip: None,
        launch_config_hash: vm.tags.get(tags::LAUNCH_CONFIG).cloned(),
        labels: vm.tags.clone(),
        zone: vm.zone.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayscale_core::config::ClusterConfig;

    fn cfg(extra_provider: &str, worker_params: &str) -> AzureConfig {
        let yaml = format!(
            "cluster_name: Demo_1\nprovider: {{type: azure, location: westus2, resource_group: rg, subscription_id: sub, \
             subnet: /subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s{extra_provider}}}\n\
             head_node_type: head\navailable_node_types:\n  head: {{resources: {{}}, node_config: {{azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: p, imageOffer: o, imageSku: s, publicKey: KEY}}}}}}\n  \
             w: {{resources: {{CPU: 2}}, node_config: {{tags: {{team: ml, ray-node-type: spoofed}}, azure_arm_parameters: {{vmSize: Standard_D4s_v3, imageId: /img, publicKey: KEY{worker_params}}}}}}}\n"
        );
        let c = ClusterConfig::from_yaml_str(&yaml, "t.yaml").expect("loads");
        AzureConfig::from_cluster(&c, None).expect("azure config")
    }

    #[test]
    fn names_are_ray_shaped_stable_and_short() {
        let a = vm_name("Demo_1", NodeKind::Worker, "req-1", 0);
        assert!(a.starts_with("ray-demo-1-worker-"), "{a}");
        assert_eq!(a, vm_name("Demo_1", NodeKind::Worker, "req-1", 0));
        assert_ne!(a, vm_name("Demo_1", NodeKind::Worker, "req-1", 1));
        let long = vm_name(&"x".repeat(200), NodeKind::Head, "r", 0);
        assert!(long.len() <= MAX_NAME, "{long}");
        assert!(long.starts_with("ray-xxx") && long.contains("-head-"));
    }

    #[test]
    fn the_body_carries_ray_tags_the_vm_level_nic_and_custom_data() {
        let c = cfg(
            ", nsg: /nsg/1, msi: /msi/1",
            ", priority: Spot, billingProfile: {maxPrice: -1}, availability_zone: '2'",
        );
        let spec = CreateSpec {
            node_type: "w",
            kind: NodeKind::Worker,
            name: "ray-demo-1-worker-0a1b2c3d",
            request_id: Some("req-1"),
            boot_script: Some("#!/bin/bash\necho hi\n"),
            avoid_zones: &[],
        };
        let b = vm_body(&c, &spec).expect("a valid VM");
        assert_eq!(b["location"], "westus2");
        assert_eq!(b["zones"], json!(["2"]));
        assert_eq!(b["tags"][tags::CLUSTER_NAME], "Demo_1");
        assert_eq!(b["tags"][tags::NODE_KIND], "worker", "Ray's tags win");
        assert_eq!(b["tags"]["team"], "ml");
        assert_eq!(b["tags"][tags::LAUNCH_REQUEST], "req-1");
        assert_eq!(b["identity"]["userAssignedIdentities"]["/msi/1"], json!({}));
        let p = &b["properties"];
        assert_eq!(p["priority"], "Spot");
        assert_eq!(p["evictionPolicy"], "Delete");
        assert_eq!(p["billingProfile"]["maxPrice"], json!(-1.0));
        assert_eq!(p["storageProfile"]["imageReference"]["id"], "/img");
        assert_eq!(p["storageProfile"]["osDisk"]["deleteOption"], "Delete");
        let nic = &p["networkProfile"]["networkInterfaceConfigurations"][0];
        assert_eq!(
            p["networkProfile"]["networkApiVersion"],
            NETWORK_API_VERSION
        );
        assert_eq!(nic["properties"]["deleteOption"], "Delete");
        assert_eq!(nic["properties"]["networkSecurityGroup"]["id"], "/nsg/1");
        let ip = &nic["properties"]["ipConfigurations"][0]["properties"];
        assert!(
            ip["subnet"]["id"]
                .as_str()
                .is_some_and(|s| s.ends_with("/subnets/s"))
        );
        assert_eq!(
            ip["publicIPAddressConfiguration"]["properties"]["deleteOption"],
            "Delete"
        );
        let data = base64::engine::general_purpose::STANDARD
            .decode(p["osProfile"]["customData"].as_str().expect("customData"))
            .expect("base64");
        assert_eq!(data, b"#!/bin/bash\necho hi\n");
        // Without `auth`, Ray's default user (`ubuntu`) administers the VM, as in Ray.
        assert_eq!(p["osProfile"]["adminUsername"], "ubuntu");
        // Internal addresses only: no public address.
        let c = cfg(", use_internal_ips: true", "");
        let b = vm_body(
            &c,
            &CreateSpec {
                boot_script: None,
                ..spec
            },
        )
        .expect("valid");
        let ip = &b["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
            ["ipConfigurations"][0]["properties"];
        assert!(ip.get("publicIPAddressConfiguration").is_none());
        assert!(b.get("zones").is_none());
        assert!(b["properties"]["osProfile"].get("customData").is_none());
    }

    #[test]
    fn zones_spread_by_name() {
        let z = Zones::List(vec!["1".into(), "2".into(), "3".into()]);
        let seen: std::collections::BTreeSet<String> = (0..30)
            .filter_map(|i| zone_for(&z, &vm_name("c", NodeKind::Worker, "r", i)))
            .collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(zone_for(&Zones::Any, "x"), None);
    }

    #[test]
    fn avoided_zones_are_skipped_and_none_left_is_the_type_out() {
        let c = cfg(", availability_zone: '1,2'", "");
        let avoid = ["1".to_string()];
        for i in 0..10 {
            let name = vm_name("c", NodeKind::Worker, "r", i);
            let spec = CreateSpec {
                node_type: "w",
                kind: NodeKind::Worker,
                name: &name,
                request_id: Some("r"),
                boot_script: None,
                avoid_zones: &avoid,
            };
            assert_eq!(
                vm_json(&c, &spec).expect("zone 2 is open")["zones"],
                json!(["2"])
            );
        }
        let both = ["1".to_string(), "2".to_string()];
        let e = vm_json(
            &c,
            &CreateSpec {
                node_type: "w",
                kind: NodeKind::Worker,
                name: "n",
                request_id: None,
                boot_script: None,
                avoid_zones: &both,
            },
        )
        .expect_err("no zone left");
        assert!(
            matches!(
                e.kind(),
                rayscale_core::provider::ProviderErrorKind::Capacity { zone: None, .. }
            ),
            "{e}"
        );
        assert_eq!(
            open_zones(&Zones::Any, &both),
            Some(Zones::Any),
            "no zone pinned: Azure picks"
        );
    }

    #[test]
    fn states_from_provisioning_and_power() {
        let mut vm = Vm {
            name: "n".into(),
            tags: ray_tags("c", "w", NodeKind::Worker, Some("r"), "h"),
            provisioning_state: "Creating".into(),
            vm_id: "id".into(),
            nic_id: None,
            zone: None,
        };
        let st = |vm: &Vm, p| cloud_instance(vm, p).map(|c| c.state);
        assert_eq!(st(&vm, Power::Unknown), Some(CloudInstanceState::Pending));
        vm.provisioning_state = "Succeeded".into();
        assert_eq!(st(&vm, Power::Running), Some(CloudInstanceState::Running));
        assert_eq!(st(&vm, Power::Starting), Some(CloudInstanceState::Pending));
        assert_eq!(st(&vm, Power::Stopped), Some(CloudInstanceState::Stopping));
        assert_eq!(st(&vm, Power::Deallocated), None);
        vm.provisioning_state = "Failed".into();
        assert_eq!(st(&vm, Power::Unknown), None, "a failed create is not live");
        assert_eq!(st(&vm, Power::Running), Some(CloudInstanceState::Running));
        vm.provisioning_state = "Deleting".into();
        assert_eq!(st(&vm, Power::Running), Some(CloudInstanceState::Stopping));
        assert_eq!(
            st(&vm, Power::Unknown),
            None,
            "a failed create being deleted"
        );
        assert_eq!(
            power_of(["ProvisioningState/succeeded", "PowerState/deallocated"]),
            Power::Deallocated
        );
        let c = cloud_instance(
            &Vm {
                provisioning_state: "Succeeded".into(),
                ..vm
            },
            Power::Running,
        )
        .expect("ours");
        assert_eq!(c.request_id.as_deref(), Some("r"));
        assert_eq!(c.node_type, "w");
    }
}
