//! The embedded default's head on this host (provider.type local_processes): the `ray`
//! binary, the local-process provider `up` and `down` use, and the head's temporary
//! directory, which names every process of this cluster's head.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::CloudInstanceProvider;

use crate::providers::ProviderEnv;

/// The provider type of the local-process provider.
pub const LOCAL: &str = "local_processes";

/// Finds the `ray` binary: the flag, else `$PATH`.
pub fn find_ray(flag: Option<&PathBuf>) -> Result<PathBuf> {
    if let Some(p) = flag {
        if p.is_file() {
            return Ok(p.clone());
        }
        bail!("ray binary {} not found", p.display());
    }
    crate::providers::find_ray_on_path()
}

/// The local-process provider for `up` and `down` on this host.
pub async fn local_provider(
    config: &ClusterConfig,
    gcs: &str,
    ray: &Path,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    if config.provider_type != LOCAL {
        bail!(
            "provider.type {:?}: `up` and `down` run a cluster on this host (provider.type \
             {LOCAL}); for a cluster elsewhere, start the head as the cloud does and use \
             `rayscale run`",
            config.provider_type
        );
    }
    crate::providers::build(
        config,
        &ProviderEnv {
            gcs_address: gcs.to_string(),
            ray_binary: Some(ray.to_path_buf()),
            head_ip: None,
        },
    )
    .await
}

/// The head's temporary directory (Ray's `--temp-dir`): it names every head process, so
/// `down` stops exactly this cluster's head. Short (Ray puts unix sockets under it), and
/// distinct for distinct names: a name reduced or cut to fit gets a hash of the whole.
pub fn head_temp_dir(config: &ClusterConfig) -> PathBuf {
    let name = &config.cluster_name;
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == *name && safe.len() <= 24 {
        return PathBuf::from(format!("/tmp/rayscale-{safe}-head"));
    }
    // FNV-1a: stable across builds and platforms.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let short: String = safe.chars().take(15).collect();
    PathBuf::from(format!("/tmp/rayscale-{short}-{:08x}-head", hash as u32))
}

/// Whether a command line names `dir` itself or something inside it (not a longer name
/// that starts the same, as `/tmp/rayscale-foo-head-head` for `/tmp/rayscale-foo-head`).
pub fn mentions_dir(cmdline: &str, dir: &str) -> bool {
    cmdline.match_indices(dir).any(|(i, _)| {
        matches!(
            cmdline[i + dir.len()..].chars().next(),
            None | Some('/' | '\0' | ' ' | '"' | '\'' | ',' | ':' | ';')
        )
    })
}

/// Processes (not this one) whose command line names the directory `needle`.
pub fn pids_mentioning(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| mentions_dir(&String::from_utf8_lossy(&c), needle))
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> ClusterConfig {
        let yaml = format!(
            "cluster_name: {name:?}\nprovider: {{type: local_processes}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        ClusterConfig::from_yaml_str(&yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_cluster_never_matches_another_clusters_head() {
        let foo = head_temp_dir(&config("foo")).display().to_string();
        let foo_head = head_temp_dir(&config("foo-head")).display().to_string();
        assert_eq!(foo, "/tmp/rayscale-foo-head");
        let cmd = format!("raylet\0--temp-dir={foo_head}\0--session-dir={foo_head}/session_1");
        assert!(!mentions_dir(&cmd, &foo), "{cmd}");
        assert!(mentions_dir(&cmd, &foo_head));
        assert!(mentions_dir(
            &format!("gcs_server --log-dir={foo}/session_x/logs"),
            &foo
        ));
        // Long or reduced names stay distinct.
        let a = head_temp_dir(&config("a-very-long-cluster-name-number-1"));
        let b = head_temp_dir(&config("a-very-long-cluster-name-number-2"));
        assert_ne!(a, b);
        assert_ne!(head_temp_dir(&config("x y")), head_temp_dir(&config("x_y")));
        assert!(a.display().to_string().len() <= 45);
    }
}
