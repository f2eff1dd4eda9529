use super::*;

const BASIC: &str = r#"
cluster_name: demo
max_workers: 10
provider: {type: local_processes}
head_node_type: head
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu4: {resources: {CPU: 4, memory: 16000000000}, min_workers: 1, node_config: {a: 1}, labels: {zone: a}}
  gpu: {resources: {CPU: 8, GPU: 1}, max_workers: 4, node_config: {}, idle_timeout_s: 30, priority: 1}
"#;

#[test]
fn loads_basic_config_in_order() {
    let c = ClusterConfig::from_yaml_str(BASIC, "basic").expect("valid");
    let names: Vec<_> = c.node_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["head", "cpu4", "gpu"]);
    assert_eq!(c.max_workers, Some(10));
    assert_eq!(c.node_types[0].max_workers, Some(0), "head defaults to 0");
    assert_eq!(c.node_types[1].max_workers, Some(10), "defaults to global");
    assert_eq!(c.node_types[2].max_workers, Some(4));
    assert_eq!(c.node_types[2].idle_timeout_s, Some(30.0));
    assert_eq!(c.node_types[2].priority, 1);
    assert_eq!(c.node_types[1].labels, vec![("zone".into(), "a".into())]);
    assert!(c.disable_launch_config_check);
    assert_eq!(c.idle_timeout_s(), 300.0);
}

fn err(text: &str) -> String {
    ClusterConfig::from_yaml_str(text, "t")
        .expect_err("must fail")
        .to_string()
}

#[test]
fn rejects_wrong_types_with_paths() {
    let bad = BASIC.replace("GPU: 1}", "GPU: one}");
    assert_eq!(
        err(&bad),
        "available_node_types.gpu.resources.GPU: expected an integer, got \"one\""
    );
    let bad = BASIC.replace("max_workers: 10", "max_workers: -1");
    assert!(err(&bad).starts_with("max_workers: must be at least 0"));
}

#[test]
fn rejects_unknown_keys_and_missing_required() {
    let bad = BASIC.replace("priority: 1}", "priority: 1, colour: red}");
    assert_eq!(
        err(&bad),
        "available_node_types.gpu.colour: unknown key (not allowed by Ray's cluster schema)"
    );
    let bad = BASIC.replace("cluster_name: demo\n", "");
    assert_eq!(err(&bad), "cluster_name: required key is missing");
    let bad = BASIC.replace("{resources: {CPU: 8, GPU: 1}, max_workers", "{max_workers");
    assert_eq!(
        err(&bad),
        "available_node_types.gpu.resources: required key is missing"
    );
}

#[test]
fn provider_accepts_extra_keys_and_fractional_resources_are_rejected() {
    let ok = BASIC.replace(
        "{type: local_processes}",
        "{type: aws, region: us-west-2, anything: [1]}",
    );
    assert!(ClusterConfig::from_yaml_str(&ok, "t").is_ok());
    let bad = BASIC.replace("CPU: 0}", "CPU: 0.5}");
    assert!(err(&bad).starts_with("available_node_types.head.resources.CPU: expected an integer"));
}

#[test]
fn ray_post_schema_checks() {
    let bad = BASIC.replace("head_node_type: head\n", "");
    assert_eq!(
        err(&bad),
        "head_node_type: required when available_node_types is set"
    );
    let bad = BASIC.replace("head_node_type: head", "head_node_type: nope");
    assert_eq!(
        err(&bad),
        "head_node_type: \"nope\" is not one of available_node_types"
    );
    let bad = BASIC.replace("max_workers: 10", "max_workers: 0");
    assert!(err(&bad).starts_with("max_workers: 0 is smaller than the sum of min_workers"));
}

#[test]
fn malformed_yaml_is_one_line() {
    let e = err("cluster_name: [unclosed\n  provider: x\n");
    assert!(!e.contains('\n'));
    assert!(e.starts_with("t: "));
}

#[test]
fn launch_config_hash_is_rays_hash_launch_conf() {
    // Ray 2.60's `hash_launch_conf(node_config, auth)` of the same values, from the wheel:
    // sort_keys, default separators, ensure_ascii (DEL and non-BMP too), repr(float).
    let v = serde_json::json!({"x": [1, 2.5], "InstanceType": "m5.large",
        "n": "\u{e9}\u{7f}\u{1f600}", "f": 1e-7, "big": 1e16});
    assert_eq!(
        launch_config_hash(&v, &serde_json::json!({"ssh_user": "ubuntu"})),
        "08gtut3f9kvk1eptt0sef2i974oj2v37b8gubsspdfiilk7sdqsg"
    );
    assert_eq!(
        launch_config_hash(&serde_json::json!({}), &serde_json::json!({})),
        "rrhmljjn5ofde4a5tppv07hivtqv8s9k3asakpvrfrvbn4rpdvig"
    );
}

#[test]
fn the_launch_hash_takes_the_keys_text_and_keeps_an_unreadable_keys_path() {
    let dir = std::env::temp_dir().join(format!("rayscale-hash-auth-{}", std::process::id()));
    std::fs::create_dir_all(dir.join(".ssh")).expect("scratch dir");
    std::fs::write(dir.join(".ssh/k.pem"), "line one\r\nline two\n").expect("key file");
    let auth = serde_json::json!({"ssh_user": "u", "ssh_private_key": "~/.ssh/k.pem",
        "ssh_public_key": "~/.ssh/absent.pub"});
    let got = launch_hash_auth(Some(&auth), Some(&dir));
    assert_eq!(
        got,
        serde_json::json!({"ssh_user": "u", "ssh_private_key": "line one\nline two\n",
            "ssh_public_key": "~/.ssh/absent.pub"})
    );
    assert_eq!(launch_hash_auth(None, Some(&dir)), serde_json::json!({}));
    // The hash follows the key's text, not its path.
    std::fs::copy(dir.join(".ssh/k.pem"), dir.join("other.pem")).expect("key copy");
    let moved = serde_json::json!({"ssh_user": "u", "ssh_private_key": format!("{}/other.pem", dir.display()),
        "ssh_public_key": "~/.ssh/absent.pub"});
    let nc = serde_json::json!({"InstanceType": "m5.large"});
    assert_eq!(
        launch_config_hash(&nc, &got),
        launch_config_hash(&nc, &launch_hash_auth(Some(&moved), Some(&dir)))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_priority_past_64_bits_is_refused_and_one_within_is_exact() {
    let with = |p: &str| BASIC.replace("priority: 1}", &format!("priority: {p}}}"));
    for huge in ["9223372036854775808", "1.0e19"] {
        let e = err(&with(huge));
        assert!(
            e.starts_with("available_node_types.gpu.priority: ") && e.contains("64-bit"),
            "{huge}: {e}"
        );
    }
    // Past 64 bits unsigned, the YAML reader refuses it first, naming it too.
    let e = err(&with("18446744073709551616"));
    assert!(
        e.contains("available_node_types.gpu.priority: ") && !e.contains('\n'),
        "{e}"
    );
    for (p, want) in [
        ("9223372036854775807", i64::MAX),
        ("-9223372036854775808", i64::MIN),
        ("9007199254740993", 9_007_199_254_740_993),
    ] {
        let c = ClusterConfig::from_yaml_str(&with(p), "t").expect("valid");
        assert_eq!(c.node_types[2].priority, want, "{p}");
    }
}

#[test]
fn a_huge_or_impossible_min_workers_is_refused_at_load_in_one_line() {
    // A typo that would make the loop keep two billion nodes (and run out of memory).
    let huge = BASIC
        .replace("min_workers: 1,", "min_workers: 2000000000,")
        .replace("max_workers: 10\n", "");
    let e = err(&huge);
    assert!(
        e.starts_with("t.available_node_types.cpu4.min_workers: 2000000000 is more than")
            || e.starts_with("available_node_types.cpu4.min_workers: 2000000000 is more than"),
        "{e}"
    );
    assert!(!e.contains('\n'));
    // More than the type's own max.
    let bad = BASIC.replace(
        "max_workers: 4, node_config",
        "min_workers: 5, max_workers: 4, node_config",
    );
    assert_eq!(
        err(&bad),
        "available_node_types.gpu.min_workers: 5 is more than the type's max_workers (4)"
    );
}

#[test]
fn keys_rayscale_does_not_act_on_are_said_at_start() {
    let text = |provider: &str, extra: &str| {
        format!(
            "cluster_name: c\nprovider: {{type: {provider}}}\nhead_node_type: head\n\
             available_node_types:\n  head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n{extra}"
        )
    };
    let c = ClusterConfig::from_yaml_str(
        &text(
            "local_processes",
            "file_mounts: {/code: ./code}\nrsync_exclude: []\nfile_mounts_sync_continuously: false\ncluster_synced_files: [/data]\n",
        ),
        "c.yaml",
    )
    .expect("loads");
    let said = c.keys_not_acted_on();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("file_mounts: not acted on"), "{said:?}");
    assert!(
        said[1].starts_with("cluster_synced_files: not acted on"),
        "{said:?}"
    );
    let v1 =
        ClusterConfig::from_yaml_str(&text("local", "file_mounts: {/code: ./code}\n"), "c.yaml")
            .expect("loads");
    assert!(v1.keys_not_acted_on().is_empty());
    let none =
        ClusterConfig::from_yaml_str(&text("aws", "file_mounts: {}\n"), "c.yaml").expect("loads");
    assert!(none.keys_not_acted_on().is_empty());
    // On a booted cloud `up` copies the mounts to the head and the head serves them, and
    // again when they change: nothing is said.
    let aws = ClusterConfig::from_yaml_str(
        &text(
            "aws",
            "file_mounts: {/code: ./code}\nfile_mounts_sync_continuously: true\ncluster_synced_files: [/data]\nrsync_exclude: ['*.pyc']\n",
        ),
        "c.yaml",
    )
    .expect("loads");
    assert_eq!(aws.keys_not_acted_on(), Vec::<String>::new());
}

#[test]
fn a_missing_head_node_type_is_rays_default_for_the_cloud() {
    let cloud = |provider: &str, head: &str| {
        BASIC
            .replace("{type: local_processes}", provider)
            .replace("head_node_type: head\n", "")
            .replace("  head: {", &format!("  {head}: {{"))
    };
    let aws = ClusterConfig::from_yaml_str(
        &cloud("{type: aws, region: us-west-2}", "ray.head.default"),
        "t",
    )
    .expect("Ray's AWS default head type");
    assert_eq!(aws.head_node_type.as_deref(), Some("ray.head.default"));
    assert_eq!(
        aws.node_type("ray.head.default")
            .and_then(|t| t.max_workers),
        Some(0)
    );
    let gcp = ClusterConfig::from_yaml_str(
        &cloud(
            "{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: p}",
            "ray_head_default",
        ),
        "t",
    )
    .expect("Ray's GCP default head type");
    assert_eq!(gcp.head_node_type.as_deref(), Some("ray_head_default"));
    // The default is not among the types: said, naming what to set.
    let e = err(&cloud(
        "{type: azure, location: westus2, resource_group: rg}",
        "head",
    ));
    assert!(
        e.starts_with("head_node_type: not set, so Ray's default for azure, \"ray.head.default\""),
        "{e}"
    );
    // A provider without Ray defaults keeps Ray's required-key error.
    assert_eq!(
        err(&BASIC.replace("head_node_type: head\n", "")),
        "head_node_type: required when available_node_types is set"
    );
}

#[test]
fn rays_empty_legacy_fields_are_dropped_and_others_refused() {
    let ok = format!("{BASIC}head_node: {{}}\nworker_nodes: {{}}\n");
    assert!(ClusterConfig::from_yaml_str(&ok, "t").is_ok());
    // A top-level min_workers too (Ray pops it before its schema check).
    let ok = format!("{BASIC}min_workers: 3\n");
    let c = ClusterConfig::from_yaml_str(&ok, "t").expect("loads");
    assert_eq!(c.node_types[1].min_workers, 1, "each type's own, unchanged");
    let bad = format!("{BASIC}head_node: {{InstanceType: m5.large}}\n");
    assert!(
        err(&bad).starts_with("head_node: a Ray 1.x field Ray 2.x no longer reads"),
        "{}",
        err(&bad)
    );
}
