//! `provider.type` -> the provider, chosen at run time among those compiled in. Every
//! provider is an `Arc<dyn CloudInstanceProvider>`; the loop never knows which.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, bail};
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::CloudInstanceProvider;
use rayscale_core::provider::cloud::MetadataCommands;
use rayscale_provider_local::{LocalProcessConfig, LocalProcessProvider};

/// What building a provider may need besides the cluster config.
pub struct ProviderEnv {
    /// The GCS address (`host:port`) the nodes join.
    pub gcs_address: String,
    /// The `ray` binary (the local-process provider; found on `PATH` when `None`).
    pub ray_binary: Option<PathBuf>,
    /// The head's address as cloud workers reach it (`--head-ip`; else the GCS host).
    pub head_ip: Option<String>,
}

impl ProviderEnv {
    /// The GCS address's host (brackets of an IPv6 literal removed).
    pub fn gcs_host(&self) -> &str {
        self.gcs_address
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or(&self.gcs_address)
    }

    /// The head's address for cloud workers' boot scripts: `--head-ip`, else the GCS
    /// address's host unless it is a loopback address (which no cloud worker reaches).
    #[cfg_attr(
        not(any(feature = "aws", feature = "gcp", feature = "azure")),
        allow(dead_code)
    )]
    pub fn head_ip_for_workers(&self, provider_type: &str) -> Result<String> {
        if let Some(ip) = &self.head_ip {
            return Ok(ip.clone());
        }
        let host = self.gcs_host();
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback || host.is_empty() {
            bail!(
                "provider.type {provider_type:?}: workers must reach the head, and the GCS \
                 address {:?} is this host's loopback: pass --head-ip (the head's private IP)",
                self.gcs_address
            );
        }
        Ok(host.to_string())
    }
}

/// This machine's private address as the cloud's metadata service tells it (`run
/// --head-ip auto` on a head started by `ray up`).
pub async fn private_ip_from_metadata(provider_type: &str) -> Result<String> {
    let m = metadata_commands(provider_type)?;
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(m.private_ip)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("--head-ip auto: cannot run sh: {e}"))?;
    let ip = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || ip.parse::<std::net::IpAddr>().is_err() {
        bail!(
            "--head-ip auto: the {provider_type} metadata service gave no address ({}{}); pass --head-ip IP",
            out.status,
            if ip.is_empty() {
                String::new()
            } else {
                format!(", got {:?}", ip.chars().take(40).collect::<String>())
            }
        );
    }
    Ok(ip)
}

/// The metadata commands of `provider_type`.
pub fn metadata_commands(provider_type: &str) -> Result<MetadataCommands<'static>> {
    match provider_type {
        #[cfg(feature = "aws")]
        "aws" => Ok(rayscale_provider_aws::mapping::METADATA),
        #[cfg(feature = "gcp")]
        "gcp" => Ok(rayscale_provider_gcp::mapping::METADATA),
        #[cfg(feature = "azure")]
        "azure" => Ok(rayscale_provider_azure::mapping::METADATA),
        t if TYPES
            .iter()
            .any(|(n, s)| *n == t && matches!(s, Served::Feature(_, false))) =>
        {
            bail!("provider.type {t:?}: this rayscale was built without the {t} provider")
        }
        t => bail!(
            "provider.type {t:?}: rayscale renders boot scripts for cloud providers (aws, gcp, azure); \
             {t} starts Ray itself"
        ),
    }
}

/// Where each `provider.type` of Ray's cluster YAML is served in rayscale.
enum Served {
    /// Compiled into every build.
    Always,
    /// Behind a cargo feature; `true` when this build has it.
    Feature(&'static str, bool),
}

/// Ray's provider types (and rayscale's `local_processes`), with where each is served.
const TYPES: &[(&str, Served)] = &[
    (rayscale_provider_local::PROVIDER_TYPE, Served::Always),
    ("aws", Served::Feature("aws", cfg!(feature = "aws"))),
    ("gcp", Served::Feature("gcp", cfg!(feature = "gcp"))),
    ("azure", Served::Feature("azure", cfg!(feature = "azure"))),
    (
        "kuberay",
        Served::Feature("kuberay", cfg!(feature = "kuberay")),
    ),
    // Ray's v1 node providers, through the node-provider adapter and its Python bridge.
    (
        "external",
        Served::Feature("adapter", cfg!(feature = "adapter")),
    ),
    (
        "local",
        Served::Feature("adapter", cfg!(feature = "adapter")),
    ),
    (
        "fake_multinode",
        Served::Feature("adapter", cfg!(feature = "adapter")),
    ),
    (
        "vsphere",
        Served::Feature("adapter", cfg!(feature = "adapter")),
    ),
    (
        "aliyun",
        Served::Feature("adapter", cfg!(feature = "adapter")),
    ),
];

/// Builds the provider `config.provider.type` names. A type that is not compiled in, or
/// not known, is a one-line error saying what to do.
pub async fn build(
    config: &ClusterConfig,
    env: &ProviderEnv,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    let t = config.provider_type.as_str();
    match TYPES.iter().find(|(name, _)| *name == t) {
        Some((_, Served::Always)) => {}
        Some((_, Served::Feature(_, true))) => return build_featured(config, env).await,
        Some((_, Served::Feature(feature, false))) => bail!(
            "provider.type {t:?}: this rayscale was built without the {t} provider (rebuild \
             with `cargo build --release -p rayscale --features {feature}`); available in \
             this build: {}",
            available().join(", ")
        ),
        None => bail!(
            "provider.type {t:?} is unknown (known: {})",
            TYPES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ),
    }
    // What is left is `local_processes`.
    let ray = match &env.ray_binary {
        Some(p) => {
            if !p.is_file() {
                bail!("ray binary {} not found", p.display());
            }
            p.clone()
        }
        None => find_ray_on_path()?,
    };
    Ok(Arc::new(LocalProcessProvider::new(
        LocalProcessConfig::new(
            &config.cluster_name,
            &env.gcs_address,
            ray,
            config.node_types.clone(),
        ),
    )?))
}

/// The providers behind cargo features that this build has.
async fn build_featured(
    config: &ClusterConfig,
    env: &ProviderEnv,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    match config.provider_type.as_str() {
        #[cfg(feature = "aws")]
        "aws" => {
            let head_ip = env.head_ip_for_workers("aws")?;
            Ok(Arc::new(
                rayscale_provider_aws::AwsProvider::from_environment(config, Some(&head_ip))
                    .await?,
            ))
        }
        #[cfg(feature = "gcp")]
        "gcp" => {
            let head_ip = env.head_ip_for_workers("gcp")?;
            Ok(Arc::new(
                rayscale_provider_gcp::GcpProvider::from_environment(config, Some(&head_ip))
                    .await?,
            ))
        }
        #[cfg(feature = "azure")]
        "azure" => {
            let head_ip = env.head_ip_for_workers("azure")?;
            Ok(Arc::new(
                rayscale_provider_azure::AzureProvider::from_environment(config, Some(&head_ip))?,
            ))
        }
        #[cfg(feature = "adapter")]
        t if rayscale_node_provider_adapter::PROVIDER_TYPES.contains(&t) => {
            adapter(config, env).await
        }
        "kuberay" => bail!(
            "provider.type \"kuberay\": the RayCluster is the config; run `rayscale kuberay \
             --cluster-name NAME --cluster-namespace NS` as the head pod's sidecar"
        ),
        t => bail!("provider.type {t:?} is not compiled into this build"),
    }
}

/// A Ray v1 node provider through the adapter: Ray's own Python class in the bridge's
/// child process, started now so that a wrong interpreter or provider fails at start-up.
#[cfg(feature = "adapter")]
async fn adapter(
    config: &ClusterConfig,
    env: &ProviderEnv,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    use rayscale_node_provider_adapter as a;
    // Workers reach the head at --head-ip, else at the GCS host (on-premise hosts and
    // Ray's fake_multinode share the head's network).
    let head_ip = env
        .head_ip
        .clone()
        .unwrap_or_else(|| env.gcs_host().to_string());
    let bridge = Arc::new(a::PythonBridge::new(a::BridgeConfig::new(
        config,
        &env.gcs_address,
    )?));
    let pid = bridge.start().await?;
    tracing::info!(
        "provider {}: Ray's v1 provider runs in the python bridge (pid {pid})",
        config.provider_type
    );
    let cfg = a::AdapterConfig::new(config, &head_ip)?;
    Ok(Arc::new(a::NodeProviderAdapter::new(bridge, cfg, config)))
}

/// Fills in node types' resources the cluster YAML leaves out, as Ray's
/// `fillout_available_node_types_resources` does in Ray 2.60: on AWS from the cloud's
/// description of the instance types (the YAML's own keys win), on GCP a TPU type's
/// `TPU-<type>-head` (set over the YAML's, as Ray).
#[async_trait::async_trait]
pub trait ResourceFill: Send + Sync {
    /// `config` filled in, or why it cannot be (one line).
    async fn fill(&self, config: &ClusterConfig) -> Result<ClusterConfig, String>;
}

#[cfg(feature = "aws")]
#[async_trait::async_trait]
impl ResourceFill for rayscale_provider_aws::resources::InstanceTypes {
    async fn fill(&self, config: &ClusterConfig) -> Result<ClusterConfig, String> {
        rayscale_provider_aws::resources::InstanceTypes::fill(self, config)
            .await
            .map_err(|e| format!("filling in resources from EC2's instance types: {e}"))
    }
}

/// GCP's fill-in: Ray's `TPU-<type>-head` on TPU node types (no call).
#[cfg(feature = "gcp")]
struct GcpTpuFill;

#[cfg(feature = "gcp")]
#[async_trait::async_trait]
impl ResourceFill for GcpTpuFill {
    async fn fill(&self, config: &ClusterConfig) -> Result<ClusterConfig, String> {
        rayscale_provider_gcp::tpu::fill_resources(config)
            .map_err(|e| format!("filling in TPU resources: {e}"))
    }
}

/// The resource fill-in of `config`'s cloud, if Ray fills resources in on it (AWS, GCP).
pub async fn resource_fill(config: &ClusterConfig) -> Result<Option<Arc<dyn ResourceFill>>> {
    match config.provider_type.as_str() {
        #[cfg(feature = "gcp")]
        "gcp" => Ok(Some(Arc::new(GcpTpuFill))),
        #[cfg(feature = "aws")]
        "aws" => Ok(Some(Arc::new(
            rayscale_provider_aws::resources::InstanceTypes::from_environment(config).await?,
        ))),
        _ => Ok(None),
    }
}

/// `config` with its resources filled in where its cloud does that (see [`ResourceFill`]);
/// an error is the command's (what `up` does, as `ray up` fails).
pub async fn filled(config: ClusterConfig) -> Result<ClusterConfig> {
    match resource_fill(&config).await? {
        Some(f) => f.fill(&config).await.map_err(anyhow::Error::msg),
        None => Ok(config),
    }
}

/// How long `up` gives IAM to spread a profile or role it made: Ray's 15 s, or
/// `RAYSCALE_IAM_WAIT_S` (tests on an emulator, where nothing needs to spread).
#[cfg(feature = "aws")]
fn iam_wait() -> std::time::Duration {
    std::env::var("RAYSCALE_IAM_WAIT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(
            std::time::Duration::from_secs(15),
            std::time::Duration::from_secs_f64,
        )
}

/// `auth.ssh_user`, for what `up` prints (`absent` without one).
#[cfg(any(feature = "aws", feature = "gcp", feature = "azure"))]
fn ssh_user(config: &ClusterConfig, absent: &str) -> String {
    config
        .raw
        .get("auth")
        .and_then(|a| a.get("ssh_user"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(absent)
        .to_string()
}

/// What [`bootstrapped`] gives `up`.
pub struct Bootstrapped {
    /// The config with what the bootstrap set.
    pub config: ClusterConfig,
    /// Lines for the user (the key pair and instance profile taken).
    pub note: Option<String>,
    /// The private key of the cluster's key pair on this machine, when the nodes take one
    /// (`up` copies the file mounts to the head with it, as Ray's `auth.ssh_private_key`).
    pub ssh_key: Option<std::path::PathBuf>,
}

/// `config` after the parts of its cloud's `ray up` bootstrap rayscale does (AWS: subnets,
/// the cluster's security group and key pair for node types that name none, and the head's
/// instance profile when its type names none; GCP: the subnet, the project's SSH key and
/// the head's service account; Azure: the resource group, network, identity and role, and
/// the SSH key; made in the cloud when missing). With
/// lines for the user saying what was set.
pub async fn bootstrapped(config: ClusterConfig) -> Result<Bootstrapped> {
    match config.provider_type.as_str() {
        #[cfg(feature = "aws")]
        "aws" => {
            let region = config
                .raw
                .get("provider")
                .and_then(|p| p.get("region"))
                .and_then(serde_json::Value::as_str);
            let keys = rayscale_provider_aws::client::StaticKeys::of(&config)?;
            let client =
                rayscale_provider_aws::client::from_environment(region, keys.as_ref()).await?;
            let config = rayscale_provider_aws::bootstrap::bootstrap(&client, &config)
                .await
                .map_err(|e| anyhow::anyhow!("bootstrapping the cluster's network in EC2: {e}"))?;
            let region = client
                .config()
                .region()
                .map(|r| r.to_string())
                .unwrap_or_default();
            let ssh_dir =
                std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".ssh"));
            let (config, key) = rayscale_provider_aws::keypair::configure_key_pair(
                &client,
                &config,
                &region,
                ssh_dir.as_deref(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("the cluster's key pair in EC2: {e}"))?;
            let user = ssh_user(&config, "<ssh_user>");
            let ssh_key = key.as_ref().map(|(_, path)| path.clone());
            let mut notes: Vec<String> = key
                .map(|(name, path)| {
                    format!(
                        "the nodes take key pair {name} (as ray up's): ssh -i {} {user}@<node ip>",
                        path.display()
                    )
                })
                .into_iter()
                .collect();
            // As `ray up`: the head's instance profile, so its rayscale may call EC2.
            let iam = rayscale_provider_aws::client::iam_from_environment(
                (!region.is_empty()).then_some(region.as_str()),
                keys.as_ref(),
            )
            .await?;
            let (config, profile) =
                rayscale_provider_aws::iam::configure_iam_role(&iam, &config, iam_wait())
                    .await
                    .map_err(|e| anyhow::anyhow!("the head's IAM instance profile: {e}"))?;
            if let Some(arn) = profile {
                notes.push(format!(
                    "the head takes instance profile {arn} (as ray up's)"
                ));
            }
            if keys.is_some() {
                notes.push(
                    "provider.aws_credentials: this machine's calls take them; the head's copy of the config leaves them out (it travels in the head's user data), so the head's rayscale takes its instance profile"
                        .to_string(),
                );
            }
            // As `ray up`: `provider.cloudwatch`'s agent config in Ray's SSM parameter,
            // which every node's agent fetches at boot.
            if let Some(cw) = config
                .raw
                .get("provider")
                .and_then(serde_json::Value::as_object)
                .map(rayscale_provider_aws::cloudwatch::agent_of)
                .transpose()?
                .flatten()
            {
                let ssm = rayscale_provider_aws::client::ssm_from_environment(
                    (!region.is_empty()).then_some(region.as_str()),
                    keys.as_ref(),
                )
                .await?;
                let cwd = std::env::current_dir()?;
                if let Some(name) = rayscale_provider_aws::cloudwatch::upload_agent_config(
                    &ssm,
                    &cw,
                    &config.cluster_name,
                    &region,
                    &cwd,
                )
                .await
                .map_err(|e| anyhow::anyhow!("the CloudWatch agent's config: {e}"))?
                {
                    notes.push(format!(
                        "the nodes' CloudWatch agent takes its config from SSM parameter {name} (as ray up's)"
                    ));
                }
            }
            Ok(Bootstrapped {
                config,
                note: (!notes.is_empty()).then(|| notes.join("\n")),
                ssh_key,
            })
        }
        #[cfg(feature = "gcp")]
        "gcp" => {
            use rayscale_provider_gcp::bootstrap;
            let ssh_dir =
                std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".ssh"));
            let b = bootstrap::bootstrap(
                &config,
                &bootstrap::Endpoints::from_environment(),
                ssh_dir.as_deref(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("bootstrapping the cluster in GCP: {e}"))?;
            let user = ssh_user(&config, bootstrap::DEFAULT_SSH_USER);
            let mut notes = Vec::new();
            if let Some(s) = &b.subnet {
                notes.push(format!(
                    "node types without networkInterfaces take subnetwork {s} (as ray up's)"
                ));
            }
            if let Some((name, path)) = &b.key {
                notes.push(format!(
                    "the project's ssh-keys hold key {name} (as ray up's): ssh -i {} {user}@<node ip>",
                    path.display()
                ));
            }
            if let Some(email) = &b.service_account {
                notes.push(format!(
                    "the head runs as service account {email} (as ray up's)"
                ));
            }
            Ok(Bootstrapped {
                config: b.config,
                note: (!notes.is_empty()).then(|| notes.join("\n")),
                ssh_key: b.key.map(|(_, p)| p),
            })
        }
        #[cfg(feature = "azure")]
        "azure" => {
            use rayscale_provider_azure::{bootstrap, client, config::SUBSCRIPTION_ENV};
            let endpoint = std::env::var(client::ENDPOINT_ENV).ok();
            let arm = client::build(endpoint.as_deref())?;
            let ssh_dir =
                std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".ssh"));
            let b = bootstrap::bootstrap(
                &arm,
                &config,
                std::env::var(SUBSCRIPTION_ENV).ok().as_deref(),
                ssh_dir.as_deref(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("bootstrapping the cluster in Azure: {e}"))?;
            let user = ssh_user(&config, "ray");
            let mut notes: Vec<String> = b
                .made
                .iter()
                .map(|m| format!("made {m} (as ray up's)"))
                .collect();
            if let Some(s) = &b.subnet {
                notes.push(format!("the nodes join subnet {s}"));
            }
            if let Some(m) = &b.msi {
                notes.push(format!("the nodes carry identity {m}"));
            }
            if let Some((name, path)) = &b.key {
                notes.push(format!(
                    "the nodes take key {name} (as ray up's): ssh -i {} {user}@<node ip>",
                    path.display()
                ));
            }
            Ok(Bootstrapped {
                config: b.config,
                note: (!notes.is_empty()).then(|| notes.join("\n")),
                ssh_key: b.key.map(|(_, p)| p),
            })
        }
        _ => Ok(Bootstrapped {
            config,
            note: None,
            ssh_key: None,
        }),
    }
}

/// `config` filled in where its cloud does that, else as it is, with a warning (for
/// commands that read a cluster without changing it: `snapshot`, `explain`).
pub async fn filled_or_as_is(config: ClusterConfig) -> ClusterConfig {
    match filled(config.clone()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("{e:#}; using the resources the YAML gives");
            config
        }
    }
}

/// The provider of a cloud cluster for the launcher (`up`, `down`) on this machine: it
/// launches the head and removes the cluster; the head's own rayscale launches workers.
pub async fn build_for_launcher(config: &ClusterConfig) -> Result<Arc<dyn CloudInstanceProvider>> {
    build_for_launcher_with(config, false).await
}

/// [`build_for_launcher`], whose list also gives running workers' addresses where the
/// cloud needs extra calls for them (Azure), with `worker_addresses` (`get-worker-ips`).
pub async fn build_for_launcher_with(
    config: &ClusterConfig,
    worker_addresses: bool,
) -> Result<Arc<dyn CloudInstanceProvider>> {
    #[cfg(not(feature = "azure"))]
    let _ = worker_addresses;
    let t = config.provider_type.as_str();
    match TYPES.iter().find(|(name, _)| *name == t) {
        #[cfg(feature = "aws")]
        Some((_, Served::Feature(_, true))) if t == "aws" => Ok(Arc::new(
            rayscale_provider_aws::AwsProvider::from_environment(config, None).await?,
        )),
        #[cfg(feature = "gcp")]
        Some((_, Served::Feature(_, true))) if t == "gcp" => Ok(Arc::new(
            rayscale_provider_gcp::GcpProvider::from_environment(config, None).await?,
        )),
        #[cfg(feature = "azure")]
        Some((_, Served::Feature(_, true))) if t == "azure" => Ok(Arc::new({
            // A Ray YAML names what `up`'s bootstrap made only by its names.
            let config = rayscale_provider_azure::bootstrap::offline(
                config,
                std::env::var(rayscale_provider_azure::config::SUBSCRIPTION_ENV)
                    .ok()
                    .as_deref(),
                std::env::var_os("HOME")
                    .map(|h| std::path::PathBuf::from(h).join(".ssh"))
                    .as_deref(),
            )?;
            let p = rayscale_provider_azure::AzureProvider::from_environment(&config, None)?;
            if worker_addresses {
                p.with_worker_addresses()
            } else {
                p
            }
        })),
        Some((_, Served::Feature(_, true) | Served::Always)) => bail!(
            "provider.type {t:?}: rayscale does not launch its head; start the head as it \
             documents and run `rayscale run` there"
        ),
        // Not built in or unknown: the same one-line errors as `run`.
        _ => {
            build(
                config,
                &ProviderEnv {
                    gcs_address: String::new(),
                    ray_binary: None,
                    head_ip: None,
                },
            )
            .await
        }
    }
}

/// The provider types this build serves.
pub fn available() -> Vec<&'static str> {
    TYPES
        .iter()
        .filter(|(_, s)| matches!(s, Served::Always | Served::Feature(_, true)))
        .map(|(n, _)| *n)
        .collect()
}

/// `ray` on `PATH`.
pub fn find_ray_on_path() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let cand = dir.join("ray");
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "ray binary not found on PATH: install Ray 2.60 (scripts/setup-python.sh) or pass --ray PATH"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(t: &str) -> ClusterConfig {
        let yaml = format!(
            "cluster_name: c\nprovider: {{type: {t}}}\nhead_node_type: h\n\
             available_node_types:\n  h: {{resources: {{}}, node_config: {{}}}}\n"
        );
        match ClusterConfig::from_yaml_str(&yaml, "t.yaml") {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    fn env() -> ProviderEnv {
        ProviderEnv {
            gcs_address: "127.0.0.1:1".into(),
            ray_binary: Some("/bin/sh".into()),
            head_ip: None,
        }
    }

    #[test]
    fn workers_join_a_head_address_they_can_reach() {
        let mut e = env();
        let err = e
            .head_ip_for_workers("aws")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--head-ip") && !err.contains('\n'), "{err}");
        e.gcs_address = "10.0.3.4:6379".into();
        assert_eq!(
            e.head_ip_for_workers("aws").ok().as_deref(),
            Some("10.0.3.4")
        );
        e.head_ip = Some("127.0.0.1".into());
        assert_eq!(
            e.head_ip_for_workers("aws").ok().as_deref(),
            Some("127.0.0.1")
        );
    }

    #[tokio::test]
    async fn chosen_at_run_time_with_one_line_errors() {
        let p = build(&config("local_processes"), &env())
            .await
            .map_err(|e| e.to_string());
        assert_eq!(
            p.map(|p| p.provider_type().to_string()).as_deref(),
            Ok("local_processes")
        );
        // Built with the aws feature, the head's empty node_config is refused (no
        // InstanceType; before any client is made); without it, the error says how to
        // build it in.
        let with_head_ip = ProviderEnv {
            head_ip: Some("10.0.0.1".into()),
            ..env()
        };
        let e = build(&config("aws"), &with_head_ip)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let want = if cfg!(feature = "aws") {
            "available_node_types.h.node_config.InstanceType"
        } else {
            "--features aws"
        };
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
        let e = build(&config("gcp"), &with_head_ip)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let want = if cfg!(feature = "gcp") {
            "provider.project_id: is required"
        } else {
            "--features gcp"
        };
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
        let e = build(&config("external"), &env())
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let want = if cfg!(feature = "adapter") {
            "provider.module: is required"
        } else {
            "--features adapter"
        };
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
    }
}
