//! Azure end to end on one machine, the way a user runs it (`rayscale_tests::e2e::
//! up_scale_down`): `rayscale up` with a Ray Azure cluster YAML (with the keys Ray's
//! bootstrap writes: the subnet, the SSH key) against the stateful ARM compute fake
//! creates the head VM; the boot simulator, playing Azure's data plane, runs each
//! running VM's `customData` as cloud-init would; a real Ray cluster scales up for a
//! workload and down when idle (the workers deleted); `rayscale down` deletes the head.

use std::sync::Arc;

use rayscale_tests::boot_sim::{AzurePlane, DataPlane};
use rayscale_tests::e2e::{Cloud, up_scale_down};
use rayscale_tests::fakes::azure::{ArmFake, Timing};

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
