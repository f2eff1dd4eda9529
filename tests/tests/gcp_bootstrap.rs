//! What `rayscale up` makes before the head on GCP, as Ray's `ray up` bootstrap
//! (`bootstrap_gcp`) makes it, on the Compute Engine fake's project APIs
//! (`tests/fakes/gce/project.rs`): the head's service account and its roles, the project's
//! SSH key, the subnet. Checked both ways against Ray's own bootstrap run on the same fake
//! (`scripts/ray_gcp_up.py`), and that a second run, either's, makes nothing.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_gcp::bootstrap::{self, Bootstrap, Endpoints, ROLES};
use rayscale_provider_gcp::{GcpProvider, Polling};
use rayscale_tests::fakes::gce::{GceFake, Timing};
use serde_json::{Value, json};

const PROJECT: &str = "proj";
const ZONE: &str = "us-west1-a";
const EMAIL: &str = "ray-autoscaler-sa-v1@proj.iam.gserviceaccount.com";
const SUBNET: &str =
    "https://www.googleapis.com/compute/v1/projects/proj/regions/us-west1/subnetworks/default";

fn yaml(cluster: &str, head_extra: &str, auth_extra: &str) -> String {
    format!(
        "cluster_name: {cluster}\n\
         provider: {{type: gcp, region: us-west1, availability_zone: {ZONE}, project_id: {PROJECT}}}\n\
         auth: {{ssh_user: ubuntu{auth_extra}}}\n\
         head_node_type: head\nmax_workers: 2\n\
         available_node_types:\n  \
         head: {{resources: {{CPU: 0}}, node_config: {{machineType: n1-standard-2{head_extra}}}}}\n  \
         cpu: {{resources: {{CPU: 2}}, min_workers: 0, max_workers: 2, node_config: {{machineType: n1-standard-2}}}}\n"
    )
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rayscale-gcp-boot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn endpoints(fake: &GceFake) -> Endpoints {
    Endpoints {
        compute: fake.url(),
        iam: fake.url(),
        crm: fake.url(),
    }
}

async fn run(fake: &GceFake, text: &str, home: &Path) -> Result<Bootstrap, String> {
    let cfg = ClusterConfig::from_yaml_str(text, "t.yaml").unwrap();
    bootstrap::bootstrap(&cfg, &endpoints(fake), Some(&home.join(".ssh")))
        .await
        .map_err(|e| e.to_string())
}

/// What Ray's `bootstrap_gcp` sets for `text` on `fake`, with `HOME` = `home`.
fn rays(fake: &GceFake, text: &str, home: &Path) -> Value {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let path = home.join("cluster.yaml");
    std::fs::write(&path, text).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ray_gcp_up.py");
    let out = std::process::Command::new(&python)
        .env("HOME", home)
        .arg(&script)
        .args(["--endpoint", &fake.url(), "--config"])
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

/// The writes the fake answered: account creations, policy and metadata sets.
fn writes(fake: &GceFake) -> [u64; 3] {
    fake.project(|p| {
        [
            "serviceAccounts.create",
            "projects.setIamPolicy",
            "compute.projects.setCommonInstanceMetadata",
        ]
        .map(|c| p.calls.get(c).copied().unwrap_or(0))
    })
}

fn head_accounts(b: &Bootstrap) -> Value {
    b.config
        .head_node
        .get("serviceAccounts")
        .cloned()
        .unwrap_or(Value::Null)
}

fn interfaces(b: &Bootstrap, t: &str) -> Value {
    b.config.raw["available_node_types"][t]["node_config"]["networkInterfaces"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_makes_rays_account_key_and_subnet_and_a_rerun_changes_nothing() {
    rayscale_tests::install_crypto_provider();
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("fresh");
    let text = yaml("boot", "", "");
    let b = run(&fake, &text, &home).await.unwrap();
    // The account, with each of Ray's roles.
    assert_eq!(b.service_account.as_deref(), Some(EMAIL));
    assert_eq!(
        head_accounts(&b),
        json!([{"email": EMAIL, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}])
    );
    for role in ROLES {
        assert_eq!(
            fake.project(|p| p.members_of(role)),
            vec![format!("serviceAccount:{EMAIL}")],
            "{role}"
        );
    }
    // The key: its private half here, its line in the project's ssh-keys.
    let (name, private) = b.key.clone().unwrap();
    assert_eq!(name, "ray-autoscaler_gcp_us-west1_proj_ubuntu_0");
    assert_eq!(private, home.join(".ssh").join(&name));
    let public = std::fs::read_to_string(home.join(".ssh").join(format!("{name}.pub"))).unwrap();
    let key = public.split_whitespace().nth(1).unwrap();
    assert_eq!(
        fake.project(|p| p.ssh_keys()),
        format!("ubuntu:ssh-rsa {key} ubuntu")
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&private).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o077,
            0,
            "the private key is the user's alone: {mode:o}"
        );
    }
    // The subnet, for both types; the workers do not get the head's account.
    let nat = json!([{"subnetwork": SUBNET, "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}]);
    assert_eq!(interfaces(&b, "head"), nat);
    assert_eq!(interfaces(&b, "cpu"), nat);
    let before = writes(&fake);
    assert_eq!(before, [1, 1, 1]);
    // Again: the same, and nothing written.
    let again = run(&fake, &text, &home).await.unwrap();
    assert_eq!(writes(&fake), before);
    assert_eq!(again.key, b.key);
    assert_eq!(head_accounts(&again), head_accounts(&b));
    assert_eq!(interfaces(&again, "cpu"), nat);
    // The head launched from it runs as Ray's account; a worker runs as the default.
    let polling = Polling {
        initial: Duration::from_millis(100),
        maximum: Duration::from_millis(300),
        launch_wait: Duration::from_secs(10),
    };
    let client = rayscale_provider_gcp::client::build(Some(&fake.url()), &polling, None)
        .await
        .unwrap();
    let p = GcpProvider::new(client, &b.config, Some("10.0.0.2"), polling).unwrap();
    for (id, t) in [("r-head", "head"), ("r-cpu", "cpu")] {
        let req = LaunchRequest {
            request_id: id.into(),
            node_type: t.into(),
            count: 1,
            launch_config_hash: b.config.node_type(t).unwrap().launch_config_hash.clone(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        };
        if t == "head" {
            p.launch_head(&req).await.unwrap();
        } else {
            p.launch(&req).await.unwrap();
        }
    }
    let made: Vec<Value> = fake
        .instances()
        .keys()
        .map(|n| fake.instance(n).unwrap())
        .collect();
    assert_eq!(made.len(), 2);
    for i in &made {
        let head = i["labels"]["ray-node-type"] == "head";
        assert_eq!(
            i["serviceAccounts"].get(0).map(|a| a["email"].clone()),
            head.then(|| json!(EMAIL)),
            "{i}"
        );
        assert_eq!(i["networkInterfaces"][0]["subnetwork"], SUBNET, "{i}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_and_rayscale_each_find_what_the_other_made() {
    rayscale_tests::install_crypto_provider();
    // Ray first, then rayscale: rayscale takes Ray's account, key and subnet.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("ray-first");
    let text = yaml("both", "", "");
    let ray = rays(&fake, &text, &home);
    let made = writes(&fake);
    assert_eq!(
        made,
        [1, 1, 1],
        "Ray made the account, the bindings and the key"
    );
    let ours = run(&fake, &text, &home).await.unwrap();
    assert_eq!(writes(&fake), made, "rayscale made nothing more");
    assert_eq!(head_accounts(&ours), ray["head_node"]["serviceAccounts"]);
    assert_eq!(
        ours.key.as_ref().map(|(_, p)| p.display().to_string()),
        ray["ssh_private_key"].as_str().map(str::to_string)
    );
    for t in ["head", "cpu"] {
        assert_eq!(
            interfaces(&ours, t),
            ray["node_configs"][t]["networkInterfaces"],
            "{t}"
        );
    }
    same_launch_hashes(&ours, &ray);
    let _ = std::fs::remove_dir_all(&home);

    // rayscale first, then Ray: Ray takes rayscale's, and sets the same.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("rayscale-first");
    let ours = run(&fake, &text, &home).await.unwrap();
    let made = writes(&fake);
    let ray = rays(&fake, &text, &home);
    assert_eq!(writes(&fake), made, "Ray made nothing more");
    assert_eq!(head_accounts(&ours), ray["head_node"]["serviceAccounts"]);
    assert_eq!(
        ours.key.as_ref().map(|(_, p)| p.display().to_string()),
        ray["ssh_private_key"].as_str().map(str::to_string)
    );
    same_launch_hashes(&ours, &ray);
    let _ = std::fs::remove_dir_all(&home);
}

/// Ray's `ray-launch-config` labels, from the same node configs and auth after either
/// bootstrap: the head's (over its service account) and each type's.
fn same_launch_hashes(ours: &bootstrap::Bootstrap, ray: &Value) {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_are_read_again_and_what_is_given_is_not_made() {
    rayscale_tests::install_crypto_provider();
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("given");
    // Another writer gets in before each of our writes: both are read again and retried.
    fake.project(|p| {
        p.policy_conflicts = 1;
        p.metadata_conflicts = 1;
        p.metadata
            .push(json!({"key": "ssh-keys", "value": "alice:ssh-rsa BBBB alice"}));
        // A conditional grant of a role of Ray's (a version-3 policy) is left as it is.
        p.policy_format = 3;
        p.bindings.push(
            json!({"role": "roles/compute.admin", "members": ["user:x@example.com"],
            "condition": {"title": "weekdays", "expression": "request.time.getDayOfWeek() < 5"}}),
        );
    });
    let b = run(&fake, &yaml("race", "", ""), &home).await.unwrap();
    assert_eq!(writes(&fake), [1, 2, 2]);
    let keys = fake.project(|p| p.ssh_keys());
    assert!(
        keys.starts_with("alice:ssh-rsa BBBB alice\nubuntu:ssh-rsa "),
        "the other key is kept: {keys}"
    );
    assert!(b.service_account.is_some());
    let (format, conditional) = fake.project(|p| {
        (
            p.policy_format,
            p.bindings
                .iter()
                .filter(|b| b.get("condition").is_some())
                .cloned()
                .collect::<Vec<_>>(),
        )
    });
    assert_eq!(format, 3);
    assert_eq!(conditional.len(), 1);
    assert_eq!(conditional[0]["members"], json!(["user:x@example.com"]));

    // A head that names its account, a config with its key and interfaces: nothing made.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let own = ", serviceAccounts: [{email: mine@proj.iam.gserviceaccount.com, scopes: [https://www.googleapis.com/auth/cloud-platform]}], networkInterfaces: [{network: global/networks/x}]";
    let key = home.join("given.pem");
    std::fs::write(&key, "not read").unwrap();
    let text = yaml(
        "given",
        own,
        &format!(", ssh_private_key: {}", key.display()),
    )
    .replace(
        "machineType: n1-standard-2}}\n",
        "machineType: n1-standard-2, networkInterfaces: [{network: global/networks/x}]}}\n",
    );
    let b = run(&fake, &text, &home).await.unwrap();
    assert_eq!(writes(&fake), [0, 0, 0]);
    assert_eq!((b.service_account, b.key, b.subnet), (None, None, None));
    assert!(b.config.head_node.is_empty());
    assert_eq!(
        fake.project(|p| p.calls.get("compute.subnetworks.list").copied()),
        None,
        "every type names its network"
    );

    // A project Resource Manager does not show: a one-line error, nothing made.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    fake.project(|p| p.hidden = true);
    let e = run(&fake, &yaml("hidden", "", ""), &home)
        .await
        .unwrap_err();
    assert!(
        e.starts_with("provider.project_id: Cloud Resource Manager does not show project proj")
            && !e.contains('\n'),
        "{e}"
    );
    assert_eq!(writes(&fake), [0, 0, 0]);
    // OS Login on: instances take no ssh-keys line, so no key is made; with file mounts
    // to copy, up says it cannot.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    fake.project(|p| {
        p.metadata
            .push(json!({"key": "enable-oslogin", "value": "TRUE"}))
    });
    let b = run(&fake, &yaml("oslogin", "", ""), &home).await.unwrap();
    assert_eq!(b.key, None);
    assert_eq!(writes(&fake)[2], 0, "no metadata written");
    let with_mounts = format!(
        "{}file_mounts: {{'~/a': '{}'}}\n",
        yaml("oslogin", "", ""),
        home.display()
    );
    let e = run(&fake, &with_mounts, &home).await.unwrap_err();
    assert!(
        e.starts_with("auth.ssh_private_key: project proj has enable-oslogin=TRUE"),
        "{e}"
    );
    // A region without subnetworks names the key to set.
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    fake.project(|p| p.subnets = Some(Vec::new()));
    let e = run(&fake, &yaml("nosubnet", "", ""), &home)
        .await
        .unwrap_err();
    assert!(
        e.starts_with("provider.region: project proj has no subnetwork"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

/// Ray's own GCP `defaults.yaml` from the wheel, as a user runs it (only `project_id`,
/// which Ray leaves null, and the cluster name given): `rayscale up` bootstraps the
/// project and launches the head as `ray up` would, in a HOME of its own; `down` removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_gcp_defaults_yaml_goes_up_unchanged() {
    rayscale_tests::install_crypto_provider();
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("defaults");
    let ray = rayscale_tests::cluster_yamls::ray_autoscaler_dir().join("gcp/defaults.yaml");
    let text = std::fs::read_to_string(&ray).unwrap();
    assert!(
        text.contains("project_id: null"),
        "Ray's defaults changed: {text}"
    );
    let text = text
        .replace("project_id: null", &format!("project_id: {PROJECT}"))
        .replace("cluster_name: default", "cluster_name: raydefaults");
    let path = home.join("defaults.yaml");
    std::fs::write(&path, text).unwrap();
    let arg = path.display().to_string();
    let env = fake.cli_env(&home);
    let cli = |args: &[&str]| rayscale_tests::e2e::rayscale_with(&env, args);
    let (ok, out) = tokio::task::block_in_place(|| cli(&["up", &arg]));
    assert!(ok && out.contains("launched"), "{out}");
    for said in [
        "take subnetwork https://www.googleapis.com/compute/v1/projects/proj/regions/us-west1/subnetworks/default",
        "key ray-autoscaler_gcp_us-west1_proj_ubuntu_0",
        "service account ray-autoscaler-sa-v1@proj.iam.gserviceaccount.com",
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
    let heads: Vec<Value> = fake
        .instances()
        .keys()
        .map(|n| fake.instance(n).unwrap())
        .collect();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0]["serviceAccounts"][0]["email"], EMAIL);
    assert_eq!(heads[0]["networkInterfaces"][0]["subnetwork"], SUBNET);
    assert_eq!(heads[0]["labels"]["ray-user-node-type"], "ray_head_default");
    let (ok, out) = tokio::task::block_in_place(|| cli(&["down", &arg, "-y"]));
    assert!(ok, "{out}");
    let gone = rayscale_tests::wait_until(Duration::from_secs(20), || fake.instances().is_empty());
    assert!(gone, "{:?}", fake.instances());
    let _ = std::fs::remove_dir_all(&home);
}

/// Ray's `provider.gcp_credentials`, both kinds Ray takes: with a service account key
/// (made here with ssh-keygen, never a key kept in the repository) every call of `up` and
/// `down` carries a token signed for that account (a JWT whose issuer is its email), and
/// with an access token every call carries that token; neither reaches the head, whose
/// metadata holds the rest of the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rays_gcp_credentials_sign_every_call_and_never_reach_the_head() {
    use base64::Engine;
    rayscale_tests::install_crypto_provider();
    let home = scratch("gcpcreds");
    let key = home.join("sa");
    let made = std::process::Command::new("ssh-keygen")
        .args([
            "-q", "-t", "rsa", "-b", "2048", "-m", "PKCS8", "-N", "", "-f",
        ])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs");
    assert!(made.success());
    let pem = std::fs::read_to_string(&key).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8");
    let email = format!("ci-deployer@{PROJECT}.iam.gserviceaccount.com");
    let sa = serde_json::json!({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "k1",
        "private_key": pem, "client_email": email, "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token"
    })
    .to_string();
    let token = "ya29.rayscale-test-token";
    for (kind, secret) in [
        ("service_account", sa.as_str()),
        ("credentials_token", token),
    ] {
        let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
        let cluster = format!("creds{}", kind.len());
        let config = serde_json::json!({
            "cluster_name": cluster,
            "provider": {"type": "gcp", "region": "us-west1", "availability_zone": ZONE,
                          "project_id": PROJECT,
                          "gcp_credentials": {"type": kind, "credentials": secret}},
            "auth": {"ssh_user": "ubuntu"},
            "max_workers": 1,
            "head_node_type": "head",
            "available_node_types": {"head": {"resources": {"CPU": 0},
                "node_config": {"machineType": "n1-standard-2", "disks": [{"boot": true,
                    "initializeParams": {"sourceImage": "projects/p/global/images/i"}}]}}}
        });
        let path = home.join(format!("{kind}.yaml"));
        std::fs::write(&path, config.to_string()).unwrap();
        let arg = path.display().to_string();
        let env = fake.cli_env(&home);
        let cli = |args: &[&str]| rayscale_tests::e2e::rayscale_with(&env, args);
        let (ok, out) = tokio::task::block_in_place(|| cli(&["up", &arg]));
        assert!(ok && out.contains("launched"), "{kind}: {out}");
        let heads: Vec<Value> = fake
            .instances()
            .keys()
            .map(|n| fake.instance(n).unwrap())
            .collect();
        assert_eq!(heads.len(), 1, "{kind}: {heads:?}");
        let shown = heads[0].to_string();
        assert!(shown.contains(PROJECT), "the config travels: {shown}");
        for leak in ["PRIVATE KEY", "gcp_credentials", token] {
            assert!(!shown.contains(leak), "{kind}: {leak} in the head: {shown}");
        }
        let (ok, out) = tokio::task::block_in_place(|| cli(&["down", &arg, "-y"]));
        assert!(ok, "{kind}: {out}");
        let calls = fake.authorizations().await;
        assert!(calls.len() >= 5, "{kind}: {calls:?}");
        for (call, header) in &calls {
            let bearer = header
                .as_deref()
                .and_then(|h| h.strip_prefix("Bearer "))
                .unwrap_or_else(|| panic!("{kind}: {call} without a bearer token: {header:?}"));
            if kind == "credentials_token" {
                assert_eq!(bearer, token, "{call}");
                continue;
            }
            let claims = bearer
                .split('.')
                .nth(1)
                .and_then(|p| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(p)
                        .ok()
                })
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .unwrap_or_else(|| panic!("{call}: not a JWT: {bearer}"));
            assert_eq!(claims["iss"], email.as_str(), "{call}: {claims}");
        }
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// With a TPU worker type, Ray's bootstrap binds `roles/tpu.admin` too (the head makes
/// TPU nodes) and gives the TPU type a `networkConfig` on the subnet it picks: rayscale
/// binds the same roles and sets the same network as Ray's own bootstrap, each on a
/// fresh project.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tpu_type_gets_rays_tpu_role_and_network() {
    rayscale_tests::install_crypto_provider();
    let text = format!(
        "{}  tpu: {{resources: {{TPU: 4}}, min_workers: 0, max_workers: 1, \
         node_config: {{acceleratorType: v4-8, runtimeVersion: tpu-ubuntu2204-base}}}}\n",
        yaml("tpuboot", "", "")
    );
    let roles = |fake: &GceFake| {
        let member = format!("serviceAccount:{EMAIL}");
        let mut r: Vec<String> = fake.project(|p| {
            p.bindings
                .iter()
                .filter(|b| {
                    b["members"]
                        .as_array()
                        .is_some_and(|m| m.iter().any(|x| x == &json!(member)))
                })
                .filter_map(|b| b["role"].as_str().map(str::to_string))
                .collect()
        });
        r.sort();
        r
    };
    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("tpu-ray");
    let ray = rays(&fake, &text, &home);
    let rays_roles = roles(&fake);
    assert!(
        rays_roles.contains(&"roles/tpu.admin".to_string()),
        "{rays_roles:?}"
    );
    let _ = std::fs::remove_dir_all(&home);

    let fake = GceFake::start(PROJECT, ZONE, Timing::default()).await;
    let home = scratch("tpu-ours");
    let ours = run(&fake, &text, &home).await.unwrap();
    assert_eq!(roles(&fake), rays_roles);
    let tpu_net = &ours.config.raw["available_node_types"]["tpu"]["node_config"];
    assert_eq!(
        tpu_net["networkConfig"]["subnetwork"],
        ray["node_configs"]["tpu"]["networkConfig"]["subnetwork"]
    );
    assert_eq!(tpu_net["networkConfig"]["subnetwork"], SUBNET);
    // As Ray's bootstrap: every type gets both (each launch drops the other kind's), so
    // the node configs are Ray's (each run made its own key, so the hashes differ by the
    // key alone; `ray_and_rayscale_each_find_what_the_other_made` compares them).
    for t in ["head", "cpu", "tpu"] {
        assert_eq!(
            ours.config.raw["available_node_types"][t]["node_config"], ray["node_configs"][t],
            "{t}"
        );
    }
    for t in ["head", "cpu"] {
        assert_eq!(
            interfaces(&ours, t),
            ray["node_configs"][t]["networkInterfaces"],
            "{t}"
        );
    }
    // The bootstrapped config still loads, and its TPU node is made on that subnet.
    let g = rayscale_provider_gcp::GcpConfig::from_cluster(&ours.config).unwrap();
    let body = rayscale_provider_gcp::tpu::node_json(
        &g,
        &rayscale_provider_gcp::mapping::InsertSpec {
            node_type: "tpu",
            kind: rayscale_core::provider::NodeKind::Worker,
            name: "n",
            request_id: None,
            boot_script: None,
        },
    )
    .unwrap();
    assert_eq!(body["networkConfig"]["subnetwork"], SUBNET);
    assert_eq!(body["networkConfig"]["enableExternalIps"], true);
    assert!(body.get("networkInterfaces").is_none(), "{body}");
    // And an instance's, without the TPU field.
    let body = rayscale_provider_gcp::mapping::instance_json(
        &g,
        &rayscale_provider_gcp::mapping::InsertSpec {
            node_type: "cpu",
            kind: rayscale_core::provider::NodeKind::Worker,
            name: "c",
            request_id: None,
            boot_script: None,
        },
    )
    .unwrap();
    assert!(body.get("networkConfig").is_none(), "{body}");
    assert_eq!(body["networkInterfaces"], interfaces(&ours, "cpu"));
    let _ = std::fs::remove_dir_all(&home);
}
