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
