//! Every `defaults.yaml` shipped in the Ray 2.60 wheel must load as a cluster config.
//! The wheel is found through `RAYSCALE_PYTHON` (set by scripts/test.sh); without it the
//! test fails loudly rather than skipping.

use std::path::PathBuf;

use rayscale_core::config::{ClusterConfig, parse_yaml};

fn find_defaults(dir: &PathBuf, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            find_defaults(&p, out);
        } else if p.file_name().is_some_and(|n| n == "defaults.yaml") {
            out.push(p);
        }
    }
}

#[test]
fn every_ray_defaults_yaml_loads() {
    let mut files = Vec::new();
    find_defaults(
        &rayscale_tests::cluster_yamls::ray_autoscaler_dir(),
        &mut files,
    );
    assert!(files.len() >= 5, "found only {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read defaults.yaml");
        let mut v = parse_yaml(&text, &f.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Ray merges a defaults.yaml under the user's config, which names the provider;
        // `local/defaults.yaml` alone has none, so supply the user's part here.
        if let Some(obj) = v.as_object_mut()
            && !obj.contains_key("provider")
        {
            obj.insert("provider".into(), serde_json::json!({"type": "local"}));
        }
        let c =
            ClusterConfig::from_value(&v, "").unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!c.provider_type.is_empty(), "{}", f.display());
    }
}

/// What rayscale fills into a cloud YAML that leaves a key out (`max_workers`, `auth`,
/// `head_node_type`, `available_node_types`) is what the wheel's `defaults.yaml` of that
/// cloud holds, value for value: Ray's `prepare_config` takes it from there.
#[test]
fn the_filled_in_defaults_are_the_wheels() {
    use rayscale_core::config::ray_defaults;
    let dir = rayscale_tests::cluster_yamls::ray_autoscaler_dir();
    for cloud in ["aws", "gcp", "azure"] {
        let f = dir.join(cloud).join("defaults.yaml");
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let ray = parse_yaml(&text, &f.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
        let ours = ray_defaults::top_level(cloud);
        assert_eq!(ours.len(), 3, "{cloud}");
        for (key, value) in ours {
            assert_eq!(ray.get(key), Some(&value), "{cloud}: {key}");
        }
        assert_eq!(
            ray.get("head_node_type").and_then(|v| v.as_str()),
            ray_defaults::head_type(cloud),
            "{cloud}"
        );
        // A YAML with only its name and provider loads as Ray loads it.
        let yaml = format!("cluster_name: m\nprovider: {{type: {cloud}}}\n");
        let c = ClusterConfig::from_yaml_str(&yaml, "m.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.max_workers, Some(2), "{cloud}");
        assert_eq!(c.node_types.len(), 2, "{cloud}");
        assert_eq!(c.head_node_type.as_deref(), ray_defaults::head_type(cloud));
        assert_eq!(c.raw["auth"]["ssh_user"], "ubuntu", "{cloud}");
    }
}
