//! What `rayscale up` makes before the head on Azure, as Ray's `ray up` bootstrap
//! (`bootstrap_azure`) makes it, on the ARM fake (`tests/fakes/azure/bootstrap.rs`): the
//! resource group, the security group and virtual network, the identity and its role
//! assignment, the SSH key. Checked against Ray's own bootstrap (`scripts/ray_azure_up.py`,
//! Ray's code with its deployment recorded): the same names, range, role assignment and
//! key; a second run makes nothing; Ray's `defaults.yaml` goes up and down unchanged.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_provider_azure::bootstrap::{self, Bootstrap};
use rayscale_tests::fakes::azure::{ArmFake, Timing};
use serde_json::{Value, json};

const SUB: &str = "sub-1";
const RG: &str = "ray-cluster";
const LOC: &str = "westus2";

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rayscale-az-boot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn quick() -> Timing {
    Timing {
        operation: Duration::from_millis(300),
        ..Timing::default()
    }
}

/// A cluster YAML as Ray's Azure defaults write it: no network, identity or key.
fn yaml(cluster: &str, provider_extra: &str, head_extra: &str) -> String {
    format!(
        "cluster_name: {cluster}\n\
         provider: {{type: azure, location: {LOC}, resource_group: {RG}, subscription_id: {SUB}{provider_extra}}}\n\
         auth: {{ssh_user: ubuntu}}\n\
         head_node_type: head\nmax_workers: 2\n\
         available_node_types:\n  \
         head: {{resources: {{CPU: 0}}, node_config: {{azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2{head_extra}}}}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, min_workers: 0, max_workers: 2, node_config: {{azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2}}}}}}\n"
    )
}

async fn run(fake: &ArmFake, text: &str, home: &Path) -> Result<Bootstrap, String> {
    let cfg = ClusterConfig::from_yaml_str(text, "t.yaml").unwrap();
    let arm = rayscale_provider_azure::client::build(Some(&fake.url())).unwrap();
    bootstrap::bootstrap(&arm, &cfg, None, Some(&home.join(".ssh")))
        .await
        .map_err(|e| e.to_string())
}

/// What Ray's `bootstrap_azure` decides for `text`, with `HOME` = `home`.
fn rays(text: &str, home: &Path) -> Value {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let path = home.join("cluster.yaml");
    std::fs::write(&path, text).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ray_azure_up.py");
    let out = std::process::Command::new(&python)
        .env("HOME", home)
        .arg(&script)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Ray's bootstrap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

fn provider_of(b: &Bootstrap) -> Value {
    b.config.raw["provider"].clone()
}

fn arm_params(b: &Bootstrap, t: &str) -> Value {
    b.config.raw["available_node_types"][t]["node_config"]["azure_arm_parameters"].clone()
}

/// A Ray YAML without network, identity or key: `up` makes the group, the security
/// group, the network, the identity and its role, and Ray's key, with Ray's names; the
/// config carries their ids and the key; a second run makes nothing and sends no write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_makes_rays_group_network_identity_and_key_and_a_rerun_makes_nothing() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    fake.without_group();
    let home = scratch("fresh");
    let text = yaml("default", ", tags: {team: ml}", "");
    let b = run(&fake, &text, &home).await.unwrap();
    assert_eq!(
        b.made,
        [
            "resource group ray-cluster",
            "network security group ray-default-723d-nsg",
            "virtual network ray-default-723d-vnet (10.156.0.0/16)",
            "managed identity ray-default-723d-msi",
            "role assignment 53e3baa2-0bc8-beb1-2752-c2e3eae052b4 (Contributor on ray-cluster for ray-default-723d-msi)",
        ]
    );
    assert_eq!(
        fake.group(RG).unwrap(),
        json!({"location": LOC, "tags": {"team": "ml"}})
    );
    let gid = format!("/subscriptions/{SUB}/resourceGroups/{RG}");
    let p = provider_of(&b);
    assert_eq!(
        p["subnet"],
        format!(
            "{gid}/providers/Microsoft.Network/virtualNetworks/ray-default-723d-vnet/subnets/ray-default-723d-subnet"
        )
    );
    assert_eq!(
        p["nsg"],
        format!("{gid}/providers/Microsoft.Network/networkSecurityGroups/ray-default-723d-nsg")
    );
    let msi = format!(
        "{gid}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/ray-default-723d-msi"
    );
    assert_eq!(p["msi"], msi);
    // The network: Ray's range, one subnet over it behind the group, SSH let in.
    let vnets = fake.resources_of("Microsoft.Network/virtualNetworks");
    assert_eq!(vnets.len(), 1);
    assert_eq!(
        vnets[0]["properties"]["addressSpace"]["addressPrefixes"],
        json!(["10.156.0.0/16"])
    );
    let subnet = &vnets[0]["properties"]["subnets"][0];
    assert_eq!(subnet["properties"]["addressPrefix"], "10.156.0.0/16");
    assert_eq!(subnet["properties"]["networkSecurityGroup"]["id"], p["nsg"]);
    let nsgs = fake.resources_of("Microsoft.Network/networkSecurityGroups");
    let rule = &nsgs[0]["properties"]["securityRules"][0]["properties"];
    assert_eq!(
        (rule["destinationPortRange"].clone(), rule["access"].clone()),
        (json!("22"), json!("Allow"))
    );
    assert_eq!(nsgs[0]["tags"]["ray-cluster-name"], "default");
    // The role: Contributor on the group for the identity's principal.
    let ids = fake.resources_of("Microsoft.ManagedIdentity/userAssignedIdentities");
    let principal = ids[0]["properties"]["principalId"].clone();
    let roles = fake.resources_of("Microsoft.Authorization/roleAssignments");
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0]["name"], "53e3baa2-0bc8-beb1-2752-c2e3eae052b4");
    assert_eq!(roles[0]["properties"]["principalId"], principal);
    assert_eq!(
        roles[0]["properties"]["roleDefinitionId"],
        format!(
            "/subscriptions/{SUB}/providers/Microsoft.Authorization/roleDefinitions/b24988ac-6180-42a0-ab88-20f7382dd24c"
        )
    );
    assert_eq!(roles[0]["properties"]["scope"], gid);
    // The key: Ray's name, set on every type.
    let (name, private) = b.key.clone().unwrap();
    assert_eq!(name, "ray-autoscaler_azure_westus2_ray-cluster_ubuntu");
    assert_eq!(private, home.join(".ssh").join(&name));
    let public = std::fs::read_to_string(home.join(".ssh").join(format!("{name}.pub"))).unwrap();
    for t in ["head", "cpu"] {
        // The file's text as it is, as Ray sets it.
        assert_eq!(arm_params(&b, t)["publicKey"], public, "{t}");
        assert_eq!(arm_params(&b, t)["adminUsername"], "ubuntu", "{t}");
    }
    // The provider takes the config as it is.
    let a = rayscale_provider_azure::AzureConfig::from_cluster(&b.config, None).unwrap();
    assert_eq!(a.msi.as_deref(), Some(msi.as_str()));
    // Again: nothing made, nothing written, the same config.
    let writes = || {
        fake.calls()
            .bootstrap_writes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(writes(), 5, "one write per resource made");
    let again = run(&fake, &text, &home).await.unwrap();
    assert!(again.made.is_empty(), "{:?}", again.made);
    assert_eq!(again.config.raw, b.config.raw);
    assert_eq!(
        fake.resources_of("Microsoft.Authorization/roleAssignments")
            .len(),
        1
    );
    assert_eq!(writes(), 5, "a rerun writes nothing");
    // Offline (`down`, `get-head-ip`): the same ids and key without a call.
    let offline = bootstrap::offline(
        &ClusterConfig::from_yaml_str(&text, "t.yaml").unwrap(),
        None,
        Some(&home.join(".ssh")),
    )
    .unwrap();
    assert_eq!(offline.raw, b.config.raw);
    // On a machine without the key: a placeholder (nothing is launched from it).
    let elsewhere = bootstrap::offline(
        &ClusterConfig::from_yaml_str(&text, "t.yaml").unwrap(),
        None,
        Some(&home.join("elsewhere")),
    )
    .unwrap();
    assert_eq!(
        elsewhere.raw["available_node_types"]["cpu"]["node_config"]["azure_arm_parameters"]["publicKey"],
        bootstrap::NO_KEY
    );
    assert_eq!(
        elsewhere.raw["provider"]["subnet"],
        b.config.raw["provider"]["subnet"]
    );
    // The subscription from the environment goes into the head's config, as Ray's.
    let no_sub = text.replace(&format!(", subscription_id: {SUB}"), "");
    let cfg = ClusterConfig::from_yaml_str(&no_sub, "t.yaml").unwrap();
    let arm = rayscale_provider_azure::client::build(Some(&fake.url())).unwrap();
    let b = bootstrap::bootstrap(&arm, &cfg, Some(SUB), Some(&home.join(".ssh")))
        .await
        .unwrap();
    assert_eq!(b.config.raw["provider"]["subscription_id"], SUB);
    assert!(b.made.is_empty(), "{:?}", b.made);
    let _ = std::fs::remove_dir_all(&home);
}

/// What cannot be read makes nothing; what cannot be made is said with the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_answers_make_nothing_and_refusals_name_the_way_out() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    fake.without_group();
    let home = scratch("refusals");
    let text = yaml("refused", "", "");
    // ARM unavailable: every try of the group's GET fails; nothing is made.
    fake.faults(|f| f.unavailable = 40);
    let e = run(&fake, &text, &home).await.unwrap_err();
    assert!(e.starts_with("resourceGroups.get: "), "{e}");
    assert!(fake.group(RG).is_none());
    fake.faults(|f| f.unavailable = 0);
    // Credentials that may not assign roles: the way out is provider.msi.
    fake.faults(|f| f.role_forbidden = true);
    let e = run(&fake, &text, &home).await.unwrap_err();
    assert!(
        e.starts_with("provider.msi: ") && e.contains("Owner or User Access Administrator"),
        "{e}"
    );
    fake.faults(|f| f.role_forbidden = false);
    // A network of the cluster's name without its subnet is said, not changed.
    let n = run(&fake, &text, &home).await.unwrap().names;
    let vnet = format!(
        "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/{}",
        n.vnet
    );
    fake.put_resource(
        &vnet,
        json!({"id": vnet, "name": n.vnet, "type": "Microsoft.Network/virtualNetworks",
            "location": LOC, "properties": {"provisioningState": "Succeeded",
            "addressSpace": {"addressPrefixes": ["10.1.0.0/16"]}, "subnets": []}}),
    );
    let e = run(&fake, &text, &home).await.unwrap_err();
    assert!(
        e.starts_with("provider.subnet: virtual network ray-refused-")
            && e.contains("without subnet"),
        "{e}"
    );
    // Tags go to ARM as strings; a nested one is refused.
    let e = run(&fake, &yaml("t", ", tags: {a: {b: 1}}", ""), &home)
        .await
        .unwrap_err();
    assert!(e.starts_with("provider.tags.a: must be a string"), "{e}");
    let _ = std::fs::remove_dir_all(&home);
}

/// The user's own key pair, as Ray's bootstrap takes it: the public half's text goes
/// into every type's `publicKey` and `auth.ssh_public_key` leaves the config, so the head
/// (which has no such file) reads its copy; the launch hashes are Ray's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_key_pair_goes_into_the_types_and_off_the_heads_config_as_rays() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    let home = scratch("own-pair");
    let private = home.join("k");
    std::fs::write(&private, "private half\n").unwrap();
    std::fs::write(home.join("k.pub"), "ssh-rsa AAAAB3NzaC1yc2E own@laptop\n").unwrap();
    let text = yaml("own", "", "").replace(
        "ssh_user: ubuntu",
        &format!(
            "ssh_user: ubuntu, ssh_private_key: {}, ssh_public_key: ~/k.pub",
            private.display()
        ),
    );
    let ours = run(&fake, &text, &home).await.unwrap();
    assert!(ours.key.is_none(), "no key made");
    let auth = &ours.config.raw["auth"];
    assert!(auth.get("ssh_public_key").is_none(), "{auth}");
    assert_eq!(auth["ssh_private_key"], private.display().to_string());
    for t in ["head", "cpu"] {
        let p = arm_params(&ours, t);
        assert_eq!(
            p["publicKey"], "ssh-rsa AAAAB3NzaC1yc2E own@laptop\n",
            "{t}"
        );
        assert_eq!(p["adminUsername"], "ubuntu", "{t}");
    }
    let ray = rays(&text, &home);
    assert_eq!(
        ours.config.head_launch_hash().as_deref(),
        ray["head_launch_hash"].as_str()
    );
    for t in ["head", "cpu"] {
        assert_eq!(
            ours.config
                .node_type(t)
                .map(|n| n.launch_config_hash.as_str()),
            ray["launch_hashes"][t].as_str(),
            "{t}"
        );
    }
    // The head's view: its copy of the config, without the key files.
    std::fs::remove_file(home.join("k.pub")).unwrap();
    let head = ClusterConfig::from_value(&ours.config.raw, "").unwrap();
    rayscale_provider_azure::AzureConfig::from_cluster(&head, None).unwrap();
    // A public half that is not there: one line naming it.
    let e = run(&fake, &text, &home).await.unwrap_err();
    assert!(
        e.starts_with("auth.ssh_public_key: ") && e.contains("k.pub"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

/// Ray's bootstrap and rayscale's derive the same: Ray's deployment parameters (the
/// range, the cluster id, the identity's name and group, the role assignment's name),
/// the ids it writes into `provider`, and the key each finds where the other made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_and_rayscale_name_the_same_resources_and_key() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    for (cluster, extra, rayscale_first) in [
        ("default", "", true),
        ("c", ", unique_id: 1234, subnet_mask: 10.7.0.0/16", false),
        (
            "shared",
            ", msi_name: team-id, msi_resource_group: team-rg",
            true,
        ),
    ] {
        let home = scratch(cluster);
        let text = yaml(cluster, extra, "");
        if extra.contains("team-id") {
            // Someone else's identity: it must exist.
            fake.add_group("team-rg");
            let e = run(&fake, &text, &home).await.unwrap_err();
            assert!(
                e.starts_with("provider.msi_name: identity team-id not found"),
                "{e}"
            );
            fake.seed_identity("team-rg", "team-id");
        }
        let (ray, ours) = if rayscale_first {
            let ours = run(&fake, &text, &home).await.unwrap();
            (rays(&text, &home), ours)
        } else {
            let ray = rays(&text, &home);
            (ray, run(&fake, &text, &home).await.unwrap())
        };
        let params = &ray["parameters"];
        let n = &ours.names;
        assert_eq!(params["subnet"], n.subnet_mask.as_str(), "{cluster}");
        assert_eq!(params["clusterId"], n.cluster_id.as_str(), "{cluster}");
        assert_eq!(params["msiName"], n.msi_name.as_str(), "{cluster}");
        assert_eq!(
            params["msiResourceGroup"],
            n.msi_group.as_str(),
            "{cluster}"
        );
        assert_eq!(params["createMsi"], !n.shared_msi, "{cluster}");
        assert_eq!(
            params["roleAssignmentGuid"],
            n.role_assignment.as_str(),
            "{cluster}"
        );
        for k in ["subnet", "nsg", "msi"] {
            assert_eq!(ray["provider"][k], provider_of(&ours)[k], "{cluster}: {k}");
        }
        let (_, private) = ours.key.clone().unwrap();
        assert_eq!(
            ray["ssh_private_key"],
            private.display().to_string(),
            "{cluster}"
        );
        // Ray's `ray-launch-config` tags: the same node configs and auth after both
        // bootstraps (so `ray up` and `rayscale up` each find the other's head current).
        assert_eq!(
            ours.config.head_launch_hash().as_deref(),
            ray["head_launch_hash"].as_str(),
            "{cluster}"
        );
        for (t, nc) in ray["node_configs"].as_object().unwrap() {
            let p = arm_params(&ours, t);
            assert_eq!(
                ours.config
                    .node_type(t)
                    .map(|n| n.launch_config_hash.as_str()),
                ray["launch_hashes"][t].as_str(),
                "{cluster}: {t}"
            );
            assert_eq!(
                nc["azure_arm_parameters"]["publicKey"], p["publicKey"],
                "{cluster}: {t}"
            );
            assert_eq!(
                nc["azure_arm_parameters"]["adminUsername"], p["adminUsername"],
                "{cluster}: {t}"
            );
        }
        let _ = std::fs::remove_dir_all(&home);
    }
}

/// Entra ID's delay for a new principal is waited out; an identity made again (a new
/// principal) gets Ray's assignment made again; a given subnet and identity are used as
/// they are (nothing made); one `auth` key without the other is Ray's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_principal_is_waited_for_and_given_resources_are_used_as_they_are() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    let home = scratch("spread");
    fake.faults(|f| f.principal_spread = 1);
    let text = yaml("spread", "", "");
    let b = run(&fake, &text, &home).await.unwrap();
    assert!(
        b.made.iter().any(|m| m.starts_with("role assignment ")),
        "{:?}",
        b.made
    );
    assert_eq!(
        fake.resources_of("Microsoft.Authorization/roleAssignments")
            .len(),
        1
    );
    // The identity deleted and made again by someone: a new principal.
    fake.remove_resource(b.msi.as_deref().unwrap());
    let again = run(&fake, &text, &home).await.unwrap();
    assert!(
        again
            .made
            .iter()
            .any(|m| m.starts_with("managed identity ")),
        "{:?}",
        again.made
    );
    let principal = fake.resources_of("Microsoft.ManagedIdentity/userAssignedIdentities")[0]
        ["properties"]["principalId"]
        .clone();
    let roles = fake.resources_of("Microsoft.Authorization/roleAssignments");
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0]["properties"]["principalId"], principal);
    // Given ids: nothing made.
    let given = format!(
        ", subnet: /subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/s, \
         msi: /subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/mine"
    );
    let own_keys =
        yaml("given", &given, "").replace("2204-gen2}", "2204-gen2, publicKey: ssh-rsa AAAA}");
    let b = run(&fake, &own_keys, &home).await.unwrap();
    assert!(b.made.is_empty(), "{:?}", b.made);
    assert!(b.key.is_none() && b.subnet.is_none() && b.msi.is_none());
    assert_eq!(
        fake.resources_of("Microsoft.Network/virtualNetworks").len(),
        1
    );
    let e = run(
        &fake,
        &yaml("half", "", "").replace(
            "ssh_user: ubuntu",
            "ssh_user: ubuntu, ssh_private_key: ~/k.pem",
        ),
        &home,
    )
    .await
    .unwrap_err();
    assert!(
        e.starts_with("auth.ssh_public_key: is required with auth.ssh_private_key"),
        "{e}"
    );
    // The other half alone, as Ray's Azure config refuses it too.
    let e = run(
        &fake,
        &yaml("other-half", "", "").replace(
            "ssh_user: ubuntu",
            "ssh_user: ubuntu, ssh_public_key: ~/k.pub",
        ),
        &home,
    )
    .await
    .unwrap_err();
    assert!(
        e.starts_with("auth.ssh_private_key: is required with auth.ssh_public_key"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

/// Ray's own Azure `defaults.yaml` from the wheel, as a user runs it (the subscription
/// from `AZURE_SUBSCRIPTION_ID`, the cluster name given): `rayscale up` makes the group,
/// network, identity and key and launches the head with them; `down` removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_azure_defaults_yaml_goes_up_unchanged() {
    let fake = ArmFake::start(SUB, RG, LOC, quick()).await;
    fake.without_group();
    let home = scratch("defaults");
    let ray = rayscale_tests::cluster_yamls::ray_autoscaler_dir().join("azure/defaults.yaml");
    let text = std::fs::read_to_string(&ray)
        .unwrap()
        .replace("cluster_name: default", "cluster_name: raydefaults");
    let path = home.join("defaults.yaml");
    std::fs::write(&path, text).unwrap();
    let arg = path.display().to_string();
    let env: Vec<(String, String)> = [
        ("RAYSCALE_AZURE_ENDPOINT", fake.url()),
        ("AZURE_SUBSCRIPTION_ID", SUB.to_string()),
        ("HOME", home.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let cli = |args: &[&str]| rayscale_tests::e2e::rayscale_with(&env, args);
    let (ok, out) = tokio::task::block_in_place(|| cli(&["up", &arg]));
    assert!(ok && out.contains("launched"), "{out}");
    for said in [
        "made resource group ray-cluster (as ray up's)",
        "made virtual network ray-raydefaults-723d-vnet (10.156.0.0/16)",
        "made managed identity ray-raydefaults-723d-msi",
        "key ray-autoscaler_azure_westus2_ray-cluster_ubuntu",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    // Run again, `up` finds the head as launched from this YAML (the hash its bootstrap
    // tagged is the one the YAML has after the same bootstrap): nothing said stale.
    let (ok, again) = tokio::task::block_in_place(|| cli(&["up", &arg]));
    assert!(
        ok && again.contains("already running") && !again.contains("from another node_config"),
        "{again}"
    );
    let vms = fake.vms();
    assert_eq!(vms.len(), 1, "{vms:?}");
    let head = fake.vm(vms.keys().next().unwrap()).unwrap();
    assert_eq!(head["tags"]["ray-user-node-type"], "ray.head.default");
    let ids = head["identity"]["userAssignedIdentities"]
        .as_object()
        .unwrap();
    assert!(
        ids.keys().any(|k| k.ends_with("/ray-raydefaults-723d-msi")),
        "{head}"
    );
    let nic =
        &head["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"];
    assert!(
        nic["ipConfigurations"][0]["properties"]["subnet"]["id"]
            .as_str()
            .is_some_and(|s| s.ends_with(
                "/virtualNetworks/ray-raydefaults-723d-vnet/subnets/ray-raydefaults-723d-subnet"
            )),
        "{nic}"
    );
    let keys = &head["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0];
    assert_eq!(keys["path"], "/home/ubuntu/.ssh/authorized_keys");
    let public = std::fs::read_to_string(
        home.join(".ssh/ray-autoscaler_azure_westus2_ray-cluster_ubuntu.pub"),
    )
    .unwrap();
    assert_eq!(keys["keyData"], public.trim());
    // `get-head-ip` and `down` read the same YAML, without the ids up wrote.
    let (ok, out) = tokio::task::block_in_place(|| cli(&["down", &arg, "-y"]));
    assert!(ok, "{out}");
    let gone = rayscale_tests::wait_until(Duration::from_secs(20), || fake.vms().is_empty());
    assert!(gone, "{:?}", fake.vms());
    // `down` leaves what the group holds besides the cluster's VMs, as `ray down`.
    assert_eq!(
        fake.resources_of("Microsoft.Network/virtualNetworks").len(),
        1
    );
    let _ = std::fs::remove_dir_all(&home);
}
