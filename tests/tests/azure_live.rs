//! Azure end to end on one machine, the way a user runs it (`rayscale_tests::e2e::
//! up_scale_down`): `rayscale up` with a Ray Azure cluster YAML (with the keys Ray's
//! bootstrap writes: the subnet, the SSH key) against the stateful ARM compute fake
//! creates the head VM; the boot simulator, playing Azure's data plane, runs each
//! running VM's `customData` as cloud-init would; a real Ray cluster scales up for a
//! workload and down when idle (the workers deleted); `rayscale down` deletes the head.

use std::sync::Arc;

use rayscale_tests::boot_sim::Notice;
use rayscale_tests::boot_sim::{AzurePlane, DataPlane};
use rayscale_tests::e2e::{Cloud, SpotCloud, preempt_and_replace, up_scale_down};
use rayscale_tests::fakes::azure::{ArmFake, Timing};
use rayscale_tests::mounts::{KeyCloud, up_copies_file_mounts_with_the_clusters_key};

const SUB: &str = "0000-sub";
const RG: &str = "ray-rg";

struct Azure(Arc<ArmFake>);

impl Cloud for Azure {
    fn env(&self) -> Vec<(String, String)> {
        vec![("RAYSCALE_AZURE_ENDPOINT".to_string(), self.0.url())]
    }
    fn provider(&self) -> String {
        format!(
            "{{type: azure, location: westus2, resource_group: {RG}, subscription_id: {SUB}, cache_stopped_nodes: false, \
             subnet: /subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/s}}"
        )
    }
    fn node_configs(&self) -> (String, String) {
        let p = |size: &str, extra: &str| {
            format!(
                "{{azure_arm_parameters: {{vmSize: {size}, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2, publicKey: ssh-rsa AAAA{extra}}}}}"
            )
        };
        (
            p("Standard_D2s_v3", ""),
            p("Standard_D2s_v3", ", priority: Spot"),
        )
    }
    fn plane(&self, cluster: &str) -> Arc<dyn DataPlane> {
        Arc::new(AzurePlane::new(self.0.clone(), cluster).with_heads())
    }
    fn instances(&self) -> Vec<String> {
        self.0.vms().into_keys().collect()
    }
    fn running(&self) -> Vec<String> {
        self.0
            .vms()
            .into_iter()
            .filter(|(_, (_, power))| power == "running")
            .map(|(n, _)| n)
            .collect()
    }
    fn creates(&self) -> u64 {
        self.0.calls().creates_of("Standard_D2s_v3")
    }
}

#[test]
fn rayscale_up_runs_a_ray_azure_cluster_on_the_fake_and_down_removes_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = Arc::new(rt.block_on(ArmFake::start(SUB, RG, "westus2", Timing::default())));
    up_scale_down("azure", &Azure(fake));
}

/// The same cluster with two zones.
struct ZonalAzure(Azure);

impl Cloud for ZonalAzure {
    fn env(&self) -> Vec<(String, String)> {
        self.0.env()
    }
    fn provider(&self) -> String {
        self.0.provider().replacen(
            "{type: azure,",
            "{type: azure, availability_zone: '1,2',",
            1,
        )
    }
    fn node_configs(&self) -> (String, String) {
        self.0.node_configs()
    }
    fn plane(&self, cluster: &str) -> Arc<dyn DataPlane> {
        self.0.plane(cluster)
    }
    fn instances(&self) -> Vec<String> {
        self.0.instances()
    }
    fn running(&self) -> Vec<String> {
        self.0.running()
    }
    fn creates(&self) -> u64 {
        self.0.creates()
    }
}

impl SpotCloud for ZonalAzure {
    fn spot_configs(&self) -> (String, String) {
        let (_, spot) = self.0.node_configs();
        let od = spot.replace(", priority: Spot", "");
        (spot, od)
    }
    fn notice(&self) -> Notice {
        Notice::AzurePreempt
    }
    fn placement(&self, id: &str) -> (String, Option<String>) {
        let v = self.0.0.vm(id).unwrap_or_default();
        (
            v["tags"]["ray-user-node-type"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            v["zones"][0].as_str().map(str::to_string),
        )
    }
}

/// A Spot eviction in one zone: the replacement is a Spot VM in the other zone.
#[test]
fn a_preempted_spot_worker_is_replaced_in_the_other_zone_before_it_dies() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = Arc::new(rt.block_on(ArmFake::start(SUB, RG, "westus2", Timing::default())));
    preempt_and_replace("azure", &ZonalAzure(Azure(fake)));
}

/// Ray's Azure YAML as Ray's defaults write it: no subnet, no identity, no key. `up`'s
/// bootstrap makes the network, the identity and Ray's key (in a HOME of the test's own).
struct KeyAzure(Azure, std::path::PathBuf);

impl Cloud for KeyAzure {
    fn env(&self) -> Vec<(String, String)> {
        self.0.env()
    }
    fn cli_env(&self) -> Vec<(String, String)> {
        let mut env = self.0.env();
        env.push(("HOME".into(), self.1.display().to_string()));
        env
    }
    fn provider(&self) -> String {
        format!(
            "{{type: azure, location: westus2, resource_group: {RG}, subscription_id: {SUB}, cache_stopped_nodes: false}}"
        )
    }
    fn node_configs(&self) -> (String, String) {
        let p = "{azure_arm_parameters: {vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2}}";
        (p.to_string(), p.to_string())
    }
    fn plane(&self, cluster: &str) -> Arc<dyn DataPlane> {
        self.0.plane(cluster)
    }
    fn instances(&self) -> Vec<String> {
        self.0.instances()
    }
    fn running(&self) -> Vec<String> {
        self.0.running()
    }
    fn creates(&self) -> u64 {
        self.0.creates()
    }
}

impl KeyCloud for KeyAzure {
    /// Azure's provisioning agent: the head VM's `osProfile` SSH keys for `user` go into
    /// the user's `authorized_keys`.
    fn let_in(
        &self,
        authorized_keys: std::path::PathBuf,
        user: String,
        timeout: std::time::Duration,
    ) -> std::thread::JoinHandle<()> {
        let fake = self.0.0.clone();
        let path = format!("/home/{user}/.ssh/authorized_keys");
        rayscale_tests::mounts::let_in_when_shown(authorized_keys, timeout, move || {
            fake.vms()
                .keys()
                .filter_map(|n| fake.vm(n))
                .filter(|v| v["tags"]["ray-node-type"] == "head")
                .flat_map(|v| {
                    v["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|k| k["path"] == path.as_str())
                .filter_map(|k| k["keyData"].as_str().map(str::to_string))
                .collect()
        })
    }
}

/// `rayscale up` with `file_mounts` and neither SSH key in `auth`: the bootstrap makes
/// Ray's key (the fake's agent lets it in) and `up` copies the mounts with it.
#[test]
fn up_makes_rays_key_and_copies_the_file_mounts_with_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = Arc::new(rt.block_on(ArmFake::start(SUB, RG, "westus2", Timing::default())));
    let home = std::env::temp_dir().join(format!("rayscale-azk-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("home");
    up_copies_file_mounts_with_the_clusters_key("azk", &KeyAzure(Azure(fake), home.clone()));
    let _ = std::fs::remove_dir_all(&home);
}
