//! GCP end to end on one machine, the way a user runs it (`rayscale_tests::e2e::
//! up_scale_down`): `rayscale up` with a Ray GCP cluster YAML against the stateful
//! Compute Engine fake inserts the head instance; the boot simulator, playing Compute
//! Engine's data plane, runs each running instance's `startup-script`; a real Ray
//! cluster scales up for a workload and down when idle; `rayscale down` deletes the head.

use std::sync::Arc;

use rayscale_tests::boot_sim::Notice;
use rayscale_tests::boot_sim::{DataPlane, GcePlane};
use rayscale_tests::e2e::{
    Cloud, SpotCloud, autostop_stops_workers_then_head, preempt_and_replace, up_scale_down,
    up_scale_down_from_the_wheel,
};
use rayscale_tests::fakes::gce::{GceFake, Timing};
use rayscale_tests::mounts::{KeyCloud, up_copies_file_mounts_with_the_clusters_key};

/// The fake, and the HOME `rayscale up`/`down` run with (where `up` keeps the project
/// SSH key it makes), removed with it.
struct Gce(Arc<GceFake>, std::path::PathBuf);

impl Gce {
    fn new(fake: Arc<GceFake>) -> Gce {
        let port = fake.url().rsplit(':').next().unwrap_or("0").to_string();
        let home =
            std::env::temp_dir().join(format!("rayscale-gcp-home-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("scratch HOME");
        Gce(fake, home)
    }
}

impl Drop for Gce {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// The Compute Engine fake in one zone, with the runtime that serves it.
fn fake() -> (tokio::runtime::Runtime, Arc<GceFake>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = Arc::new(rt.block_on(GceFake::start("proj", "us-west1-a", Timing::default())));
    (rt, fake)
}

impl Gce {
    fn with_status(&self, statuses: &[&str]) -> Vec<String> {
        self.0
            .instances()
            .into_iter()
            .filter(|(_, s)| statuses.is_empty() || statuses.contains(&s.as_str()))
            .map(|(n, _)| n)
            .collect()
    }
}

impl Cloud for Gce {
    fn env(&self) -> Vec<(String, String)> {
        vec![("RAYSCALE_GCP_ENDPOINT".to_string(), self.0.url())]
    }
    fn cli_env(&self) -> Vec<(String, String)> {
        self.0.cli_env(&self.1)
    }
    fn provider(&self) -> String {
        "{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: proj}".into()
    }
    fn node_configs(&self) -> (String, String) {
        (
            "{machineType: n1-standard-2}".into(),
            "{machineType: n1-standard-2, scheduling: [{preemptible: true}]}".into(),
        )
    }
    fn plane(&self, cluster: &str) -> Arc<dyn DataPlane> {
        Arc::new(GcePlane::new(self.0.clone(), cluster).with_heads())
    }
    fn instances(&self) -> Vec<String> {
        self.with_status(&[])
    }
    fn running(&self) -> Vec<String> {
        self.with_status(&["RUNNING"])
    }
    fn creates(&self) -> u64 {
        self.0
            .calls()
            .insert
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[test]
fn rayscale_up_runs_a_ray_gcp_cluster_on_the_fake_and_down_removes_it() {
    let (_rt, fake) = fake();
    up_scale_down("gcp", &Gce::new(fake));
}

/// A head without `rayscale` installs the wheel (`scripts/build-wheel.sh`, from a local
/// directory) in its boot and autoscales as above; a version the directory lacks ends
/// `rayscale up --wait` with pip's reason.
#[test]
fn a_head_without_rayscale_installs_the_wheel_and_autoscales() {
    let (_rt, fake) = fake();
    up_scale_down_from_the_wheel("gcpw", &Gce::new(fake));
}

/// Autostop: with nothing to do, the worker goes and then the head deletes itself.
#[test]
fn autostop_stops_the_worker_then_the_head_deletes_itself() {
    let (_rt, fake) = fake();
    autostop_stops_workers_then_head("gcp", &Gce::new(fake));
}

impl SpotCloud for Gce {
    fn spot_configs(&self) -> (String, String) {
        (
            "{machineType: n1-standard-2, scheduling: {provisioningModel: SPOT}}".into(),
            "{machineType: n1-standard-2}".into(),
        )
    }
    fn notice(&self) -> Notice {
        Notice::GcePreempted
    }
    fn placement(&self, id: &str) -> (String, Option<String>) {
        let i = self.0.instance(id).unwrap_or_default();
        (
            i["labels"]["ray-user-node-type"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            i["zone"]
                .as_str()
                .and_then(|z| z.rsplit('/').next())
                .map(str::to_string),
        )
    }
}

/// The cluster's one zone took the spot node back: the replacement is on-demand.
#[test]
fn a_preempted_spot_worker_is_replaced_on_demand_before_it_dies() {
    let (_rt, fake) = fake();
    preempt_and_replace("gcp", &Gce::new(fake));
}

impl KeyCloud for Gce {
    /// GCE's guest agent: the project's `ssh-keys` lines of `user` (`<user>:<key>`) go
    /// into the user's `authorized_keys`.
    fn let_in(
        &self,
        authorized_keys: std::path::PathBuf,
        user: String,
        timeout: std::time::Duration,
    ) -> std::thread::JoinHandle<()> {
        let fake = self.0.clone();
        let prefix = format!("{user}:");
        rayscale_tests::mounts::let_in_when_shown(authorized_keys, timeout, move || {
            fake.project(|p| p.ssh_keys())
                .lines()
                .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
                .collect()
        })
    }
}

/// `rayscale up` with `file_mounts` and no `auth.ssh_private_key`: `up` makes Ray's
/// project key (the fake's guest agent lets it in) and copies the mounts with it.
#[test]
fn up_makes_rays_project_key_and_copies_the_file_mounts_with_it() {
    let (_rt, fake) = fake();
    up_copies_file_mounts_with_the_clusters_key("gcpk", &Gce::new(fake));
}

/// A cluster of the worker type `workers` up (its head launched by `rayscale up`), and a
/// one-bundle placement group needing `head_resource` placed: the stage, the head's id
/// and the one TPU node the demand made.
fn one_tpu_node_for(
    cloud: &Gce,
    name: &str,
    workers: &str,
    head_resource: &str,
) -> (rayscale_tests::e2e::Stage, String, Vec<String>) {
    let stage = rayscale_tests::e2e::Stage::new(name, "e2e", cloud, "", workers);
    let diag = || stage.diag();
    let head_id = stage.up_head(cloud, diag);
    let w = rayscale_tests::e2e::start_workload(
        &stage.python,
        &stage.gcs,
        &["spread", "1", head_resource],
    );
    let (ok, out) = rayscale_tests::e2e::finish(w, std::time::Duration::from_secs(240));
    assert!(
        ok && out.contains("spread 1 distinct nodes"),
        "workload: {out}\n{}",
        diag()
    );
    let tpus: Vec<String> = cloud.0.tpu(|t| t.nodes()).into_keys().collect();
    assert_eq!(tpus.len(), 1, "{tpus:?}");
    (stage, head_id, tpus)
}

/// A TPU demand end to end: a placement group needing Ray's `TPU-v4-8-head` (which only
/// the TPU type has, filled in as Ray fills it) makes the head's rayscale create a TPU
/// VM through the TPU API; the boot simulator runs the node's startup-script (the VM's
/// own name differs from the TPU node's, which the script reads from `instance-id`); the
/// node joins with its TPU name and resources, the bundle is placed, and idle, the node
/// is deleted through the TPU API.
#[test]
fn a_tpu_demand_makes_a_tpu_vm_that_joins_and_goes_when_idle() {
    let (_rt, fake) = fake();
    let cloud = Gce::new(fake.clone());
    let (stage, head_id, tpus) = one_tpu_node_for(
        &cloud,
        "gcptpu",
        "  tpu: {resources: {CPU: 1, TPU: 4}, max_workers: 2, \
         node_config: {acceleratorType: v4-8, runtimeVersion: tpu-ubuntu2204-base}}\n",
        "TPU-v4-8-head",
    );
    let diag = || stage.diag();
    assert!(
        tpus[0].starts_with(&format!("ray-{}-worker-", stage.cluster)) && tpus[0].ends_with("-tpu"),
        "{tpus:?}"
    );
    // (Cloud TPU's own VM behind the node is not a worker of rayscale's.)
    let instances: Vec<String> = cloud
        .instances()
        .into_iter()
        .filter(|n| !n.starts_with("t1v-n-"))
        .collect();
    assert_eq!(instances, [head_id], "no Compute Engine worker");
    let joined = rayscale_tests::ray_head::alive_workers_at(&stage.gcs);
    assert_eq!(
        joined,
        tpus,
        "the TPU VM joined with its TPU node's name\n{}",
        diag()
    );
    let gone = rayscale_tests::wait_until(std::time::Duration::from_secs(120), || {
        fake.tpu(|t| t.nodes()).is_empty()
    });
    assert!(
        gone,
        "TPU nodes left: {:?}\n{}",
        fake.tpu(|t| t.nodes()),
        diag()
    );
    assert!(fake.tpu(|t| t.calls.get("nodes.delete").copied().unwrap_or(0)) >= 1);
    let (ok, out) =
        rayscale_tests::e2e::rayscale_with(&cloud.cli_env(), &["down", &stage.config_arg]);
    assert!(ok, "{out}");
    let booted = stage.sim.ever_booted();
    stage.clean(&booted);
}

/// A multi-host slice end to end (Ray's `example-tpu-pod.yaml` shape: a `v4-16`, two
/// hosts): a placement group needing `TPU-v4-16-head` makes one TPU node; both of its
/// hosts run the startup-script and join under the node's name, only worker 0 with the
/// head resource; `max_workers: 1` counts the slice once; idle, both hosts are drained
/// and the node is deleted once, with no second slice made.
#[test]
fn a_multi_host_tpu_slice_joins_as_one_unit_and_goes_whole() {
    let (_rt, fake) = fake();
    let cloud = Gce::new(fake.clone());
    let (stage, _head_id, tpus) = one_tpu_node_for(
        &cloud,
        "gcppod",
        "  pod: {resources: {CPU: 1, TPU: 4}, max_workers: 1, \
         node_config: {acceleratorType: v4-16, runtimeVersion: tpu-vm-v4-base}}\n",
        "TPU-v4-16-head",
    );
    let diag = || stage.diag();
    // Both hosts join (the second may still be starting when the bundle is placed).
    let mut hosts = Vec::new();
    let both = rayscale_tests::wait_until(std::time::Duration::from_secs(120), || {
        hosts = rayscale_tests::ray_head::workers_at(&stage.gcs)
            .into_iter()
            .filter(|w| w.status != rayscale_tests::ray_head::pb::NodeStatus::Dead)
            .collect();
        hosts.len() == 2
    });
    assert!(both, "hosts: {hosts:?}\n{}", diag());
    assert!(
        hosts.iter().all(|h| h.instance_id == tpus[0]),
        "every host joins under the TPU node's name: {hosts:?}"
    );
    let heads = hosts
        .iter()
        .filter(|h| h.total.get("TPU-v4-16-head") == Some(&1.0))
        .count();
    assert_eq!(heads, 1, "only worker 0 has the head resource: {hosts:?}");
    assert!(
        hosts.iter().all(|h| h.total.get("TPU") == Some(&4.0)),
        "{hosts:?}"
    );
    let gone = rayscale_tests::wait_until(std::time::Duration::from_secs(180), || {
        fake.tpu(|t| t.nodes()).is_empty()
    });
    assert!(
        gone,
        "TPU nodes left: {:?}\n{}",
        fake.tpu(|t| t.nodes()),
        diag()
    );
    assert_eq!(
        fake.tpu(|t| t.created.len()),
        1,
        "one slice, never a second for its other host"
    );
    let booted = stage.sim.ever_booted();
    assert!(
        booted.contains(&tpus[0]) && booted.contains(&format!("{}@w1", tpus[0])),
        "both hosts booted: {booted:?}"
    );
    let (ok, out) =
        rayscale_tests::e2e::rayscale_with(&cloud.cli_env(), &["down", &stage.config_arg]);
    assert!(ok, "{out}");
    stage.clean(&booted);
}
