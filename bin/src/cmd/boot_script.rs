//! `rayscale boot-script`: the script a node of a type runs at boot, exactly as its cloud
//! gets it.

use std::path::PathBuf;

use anyhow::Result;
use rayscale_core::config::ClusterConfig;

use crate::providers::metadata_commands;

/// Arguments of `rayscale boot-script`.
#[derive(clap::Args)]
pub struct BootScriptArgs {
    /// The cluster config.
    config: PathBuf,
    /// The worker node type.
    node_type: String,
    /// The head's address the workers join (`RAY_HEAD_IP`).
    #[arg(long, default_value = "HEAD_IP")]
    head_ip: String,
}

/// `rayscale boot-script`: the script a node of the type runs at boot (the head's for
/// the head type), exactly as its cloud gets it.
pub fn boot_script(args: &BootScriptArgs) -> Result<String> {
    use rayscale_core::provider::boot;
    let text = std::fs::read_to_string(&args.config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let mut config = ClusterConfig::from_yaml_str(&text, &args.config.display().to_string())?;
    // A worker fetches the file mounts from its head's `rayscale run`, with the token that
    // head makes (shown here as a placeholder).
    config.mounts_source = Some(rayscale_core::config::mounts::MountsSource {
        port: rayscale_core::config::mounts::DEFAULT_PORT,
        token: "HEAD_TOKEN".into(),
    });
    let mut m = metadata_commands(&config.provider_type)?;
    #[cfg(feature = "gcp")]
    if config.provider_type == "gcp" {
        // A TPU type's `TPU-<type>-head` and hosts (no call: what the provider fills too).
        config = rayscale_provider_gcp::tpu::fill_resources(&config)?;
        m = rayscale_provider_gcp::mapping::metadata_for(&config, &args.node_type);
    }
    let script = if config.head_node_type.as_deref() == Some(args.node_type.as_str()) {
        boot::render_head(
            &config,
            &boot::HeadBootTarget {
                node_type: &args.node_type,
                instance_id_command: m.instance_id,
                private_ip_command: m.private_ip,
                per_boot: m.per_boot,
            },
        )?
    } else {
        boot::render_worker(
            &config,
            &boot::BootTarget {
                node_type: &args.node_type,
                head_ip: &args.head_ip,
                instance_id_command: m.instance_id,
                per_boot: m.per_boot,
                notices: m.notices,
                host_index_command: m.host_index,
            },
        )?
    };
    cloud_lines(&config, script)
}

/// The lines a cloud's provider adds to every node's boot script (AWS: the CloudWatch
/// agent of `provider.cloudwatch`).
fn cloud_lines(config: &ClusterConfig, script: String) -> Result<String> {
    #[cfg(feature = "aws")]
    if config.provider_type == "aws"
        && let Some(p) = config
            .raw
            .get("provider")
            .and_then(serde_json::Value::as_object)
        && let Some(cw) = rayscale_provider_aws::cloudwatch::agent_of(p)?
    {
        use rayscale_provider_aws::cloudwatch::{boot_snippet, with_snippet};
        return Ok(with_snippet(
            &script,
            &boot_snippet(&cw, &config.cluster_name),
        ));
    }
    let _ = config;
    Ok(script)
}
