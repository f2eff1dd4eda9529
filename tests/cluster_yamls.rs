//! The cluster YAMLs each cloud's provider launches every node type of on its fake, so that
//! the contract check (`tests/contract/check.py`) judges the requests real configs make:
//! Ray's own YAMLs for the cloud as the Ray wheel ships them (`ray/autoscaler/<cloud>/*.yaml`,
//! found through `RAYSCALE_PYTHON`), and rayscale's spot/preemptible and GPU variants
//! (`tests/fixtures/contract/<cloud>-*.yaml`, written here, not Ray's text), and, when
//! `RAYSCALE_RAY_EXAMPLES` names a directory, the YAMLs in its `<cloud>/` (Ray's
//! published examples, `python/ray/autoscaler/<cloud>/example-*.yaml` of Ray's
//! repository, which the wheel does not ship and this repository does not copy: a
//! measurement run on a machine that has them).

use std::path::PathBuf;

use serde_json::Value;

/// The `ray/autoscaler` directory of the Ray wheel `RAYSCALE_PYTHON` imports.
pub fn ray_autoscaler_dir() -> PathBuf {
    let py = std::env::var("RAYSCALE_PYTHON").expect(
        "RAYSCALE_PYTHON must name a Python with ray==2.60.0 (scripts/setup-python.sh prints one)",
    );
    let out = std::process::Command::new(&py)
        .args([
            "-c",
            "import os, ray.autoscaler; print(os.path.dirname(ray.autoscaler.__file__))",
        ])
        .output()
        .expect("run the Ray python");
    assert!(out.status.success(), "{py} cannot import ray");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `(origin, parsed YAML)` of every cluster YAML for `cloud` ("aws", "gcp", "azure"):
/// Ray's first, then the variants, then `RAYSCALE_RAY_EXAMPLES`'s (see the module docs).
/// Panics when a set is empty.
pub fn for_cloud(cloud: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut read = |dir: PathBuf, keep: &dyn Fn(&str) -> bool| {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "yaml")
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(keep)
            })
            .collect();
        paths.sort();
        let n = paths.len();
        for p in paths {
            let origin = p.display().to_string();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{origin}: {e}"));
            let v = rayscale_core::config::parse_yaml(&text, &origin)
                .unwrap_or_else(|e| panic!("{origin}: {e}"));
            out.push((origin, v));
        }
        assert!(n > 0, "no {cloud} YAML in {}", dir.display());
    };
    read(ray_autoscaler_dir().join(cloud), &|_| true);
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/contract");
    read(fixtures, &|n| n.starts_with(&format!("{cloud}-")));
    if let Some(dir) = std::env::var_os("RAYSCALE_RAY_EXAMPLES") {
        read(PathBuf::from(dir).join(cloud), &|_| true);
    }
    out
}

/// The head type and the worker types of a cluster YAML, in its order.
pub fn node_types(v: &Value) -> Vec<(String, bool)> {
    let head = v["head_node_type"].as_str().unwrap_or_default().to_string();
    v["available_node_types"]
        .as_object()
        .map(|m| {
            m.keys()
                .map(|k| (k.clone(), *k == head))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
}

/// Launches one node of every type of `cfg` (the types of its YAML, or Ray's defaults'
/// when it has none) on `provider` (the head through `launch_head`); panics naming
/// `origin` and the type on an error or a shortfall. Returns how many types were launched.
pub async fn launch_every_node_type(
    provider: &dyn rayscale_core::provider::CloudInstanceProvider,
    cfg: &rayscale_core::config::ClusterConfig,
    origin: &str,
) -> usize {
    // The head as the config has it (Ray's default head type when the YAML names none).
    let types: Vec<(String, bool)> = node_types(&cfg.raw)
        .into_iter()
        .map(|(t, _)| {
            let head = cfg.head_node_type.as_deref() == Some(t.as_str());
            (t, head)
        })
        .collect();
    assert!(!types.is_empty(), "{origin}: no node type to launch");
    for (i, (t, is_head)) in types.iter().enumerate() {
        let r = rayscale_core::provider::LaunchRequest {
            request_id: format!("lr-{}-{i}", cfg.cluster_name),
            node_type: t.clone(),
            count: 1,
            launch_config_hash: cfg
                .node_type(t)
                .map(|n| n.launch_config_hash.clone())
                .unwrap_or_default(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        };
        let out = if *is_head {
            provider.launch_head(&r).await
        } else {
            provider.launch(&r).await
        };
        let out = out.unwrap_or_else(|e| panic!("{origin}: {t}: {e}"));
        assert!(
            out.shortfall.is_none(),
            "{origin}: {t}: {:?}",
            out.shortfall
        );
    }
    types.len()
}
