//! `up` and `down` for a cluster in a cloud: the launcher of `rayscale_core::launcher` on
//! the provider `provider.type` names (its head boots Ray's head and `rayscale run`).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use rayscale_core::config::ClusterConfig;
use rayscale_core::config::install::InstallSettings;
use rayscale_core::driver::NAMESPACE;
use rayscale_core::driver::lease::lease_prefix;
use rayscale_core::launcher::HeadConfig;
use rayscale_core::launcher::{self, LauncherSettings};
use rayscale_core::provider::boot::{self, boot_status_key, head_port};
use rayscale_core::provider::tags;
use rayscale_core::provider::{CloudInstance, CloudInstanceState};

use crate::gcs::one_shot_client;
use crate::ssh::Push;

/// How often the launcher looks at the cloud (`RAYSCALE_LAUNCHER_POLL_S`, for tests
/// on an emulator; 5 s by default).
fn settings() -> LauncherSettings {
    let mut s = LauncherSettings::default();
    if let Some(p) = std::env::var("RAYSCALE_LAUNCHER_POLL_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p > 0.0)
    {
        s.poll = Duration::from_secs_f64(p);
    }
    s
}

/// The head's [`tags::RAYSCALE_CONFIG`] while `up` pushes it a config: no digest is it.
const PUSHING: &str = "pushing";

/// `up --wait`: how long, and where the head's GCS is asked (default: its private
/// address).
pub struct Wait {
    /// At most this long (s).
    pub secs: u64,
    /// The GCS address to ask instead of the head's private one.
    pub gcs: Option<String>,
}

/// `rayscale up` for a cloud cluster: finds or launches the head; prints how to reach it;
/// with `wait`, waits for rayscale to run on it.
pub async fn up(
    config: &ClusterConfig,
    again: &Again,
    wait: Option<Wait>,
    yes: bool,
) -> Result<String> {
    // What goes to the head over SSH, checked before anything is made.
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let copies = crate::ssh::plan(config, home.as_deref().unwrap_or(std::path::Path::new("/")))?;
    // As `ray up`: the head gets the config with its resources filled in (on AWS).
    let filled = crate::providers::filled(config.clone()).await?;
    // As `ray up`: subnets, the cluster's security group and key pair where the YAML
    // names none.
    let boot = crate::providers::bootstrapped(filled).await?;
    if let Some(note) = &boot.note {
        println!("{note}");
    }
    let config = &boot.config;
    let copies = copies.map(|mut p| {
        // Without `auth.ssh_private_key`, the key of the key pair the nodes take.
        p.key = p.key.or_else(|| boot.ssh_key.clone());
        p
    });
    let provider = crate::providers::build_for_launcher(config).await?;
    let port = head_port(config)?;
    let request_id = format!(
        "up-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let settings = LauncherSettings {
        relaunch_outdated: yes,
        ..settings()
    };
    let r = launcher::up(provider.as_ref(), config, &request_id, &settings).await?;
    if r.outdated {
        println!(
            "the head {} runs as it was launched, from another node_config, auth or head type \
             than this YAML's (its launch hash or type differs); a running head keeps its boot: \
             rayscale up {up} -y relaunches it (terminates it and launches a new one, as ray up \
             -y does), or rayscale down {down}, then rayscale up {up}",
            r.head.cloud_instance_id,
            up = again.up,
            down = again.down,
        );
    }
    if let Some(old) = &r.relaunched {
        println!(
            "relaunched the head: {old} was outdated (another node_config, auth or head type \
             than this YAML's) and is terminated, as ray up -y does; {} is the new head",
            r.head.cloud_instance_id
        );
    }
    let ip = r.head.private_ip.as_deref().unwrap_or("?");
    // As `ray up` rewrites a running head's config: this YAML's, when the head's tag says
    // it runs another (a head this run launched booted with it).
    let text = boot::head_config_text(config)?;
    let digest = boot::head_config_digest(&text);
    let id = r.head.cloud_instance_id.clone();
    let state = HeadConfig::of(&r.head, &digest);
    let push = if r.launched {
        None
    } else if r.outdated {
        if state != HeadConfig::Same {
            println!(
                "the head {id} keeps its config too (rayscale up {} -y relaunches it)",
                again.up
            );
        }
        None
    } else {
        match state {
            HeadConfig::Same => None,
            HeadConfig::Unknown => {
                println!(
                    "the head {id} carries no {} tag (ray up, or an older rayscale, launched \
                     it): its cluster config is left as it is (ray up --no-restart rewrites \
                     it, as for a head of Ray's)",
                    tags::RAYSCALE_CONFIG
                );
                None
            }
            HeadConfig::Differs => Some(Push {
                text: &text,
                instance_id: &id,
            }),
        }
    };
    let session = match &push {
        None => copies,
        Some(_) => {
            let Some(mut plan) =
                crate::ssh::reach(config, home.as_deref().unwrap_or(std::path::Path::new("/")))?
            else {
                bail!(
                    "the head {id} runs another cluster config than this YAML's (its {} tag \
                     differs) and up cannot push this one without SSH: give auth.ssh_user (and \
                     auth.ssh_private_key) so that up reaches the head as ray up does, or \
                     rayscale down {}, then rayscale up {}",
                    tags::RAYSCALE_CONFIG,
                    again.down,
                    again.up
                );
            };
            plan.key = plan.key.or_else(|| boot.ssh_key.clone());
            Some(plan)
        }
    };
    // As `ray up`: the file mounts, before the head's setup (its boot waits for them), and
    // the config.
    if let Some(plan) = &session {
        let what = match (plan.copies.is_empty(), push.is_some()) {
            (true, _) => "push the cluster config",
            (false, false) => "copy the file mounts",
            (false, true) => "copy the file mounts and push the cluster config",
        };
        if !internal_ips(config) && r.head.public_ip.is_none() {
            println!(
                "the head {id} lists no public address: reaching it over its private one to \
                 {what} (set provider.use_internal_ips to mean it, or auth.ssh_proxy_command for \
                 a bastion)"
            );
        }
        let Some(host) = address(config, &r.head) else {
            bail!(
                "the head {id} has no address to {what} over SSH: rayscale up {} again once \
                 it has one, or rayscale down {}",
                again.up,
                again.down
            );
        };
        // Gone only when the cloud's list says so; a list that fails says nothing.
        let head_gone = async || -> Option<String> {
            let listed = provider.list().await.ok()?;
            match listed.iter().find(|i| i.cloud_instance_id == id) {
                None => Some(format!("{id} is no longer in the cloud's list")),
                Some(i) if i.state == CloudInstanceState::Stopping => {
                    Some(format!("{id} is stopping or terminated"))
                }
                Some(_) => None,
            }
        };
        if push.is_some() {
            // First a tag no config has: a push that stops half way (or a tag that fails
            // after it) leaves the head "changed" for the next `up`, which pushes again,
            // even when its YAML is the head's old one.
            provider
                .tag_head(&id, &[(tags::RAYSCALE_CONFIG, PUSHING.to_string())])
                .await
                .with_context(|| format!("tagging the head {id} before pushing its config"))?;
        }
        let n = crate::ssh::copy_to_head(
            plan,
            &host,
            crate::ssh::ssh_wait(),
            head_gone,
            push.as_ref(),
        )
        .await
        .with_context(|| format!("trying to {what} on the head {id} ({host})"))?;
        if !plan.copies.is_empty() {
            println!(
                "copied {n} file mounts to the head ({host}) as {}",
                plan.user
            );
        }
        if push.is_some() {
            provider
                .tag_head(&id, &[(tags::RAYSCALE_CONFIG, digest.clone())])
                .await
                .with_context(|| {
                    format!(
                        "the config is pushed, but tagging the head {id} with its digest failed \
                         (the next rayscale up pushes it again)"
                    )
                })?;
            println!(
                "pushed this YAML's cluster config to the head ({host}), as ray up does: its \
                 rayscale reads it at its next pass (~/rayscale.log on the head says so, or \
                 why it keeps the last one); setup commands do not run again"
            );
        }
    }
    let waited = match wait {
        Some(Wait { secs, gcs }) => {
            let gcs = gcs.unwrap_or_else(|| format!("{ip}:{port}"));
            println!(
                "cluster {}: head {} runs; waiting up to {secs} s for rayscale on it (the GCS at {gcs})",
                config.cluster_name, r.head.cloud_instance_id
            );
            Some(wait_for_rayscale(&config.cluster_name, &gcs, Duration::from_secs(secs)).await?)
        }
        None => None,
    };
    Ok(up_message(&UpReport {
        cluster: &config.cluster_name,
        id: &r.head.cloud_instance_id,
        node_type: &r.head.node_type,
        launched: r.launched,
        ip,
        port,
        again,
        install_given: config.install != InstallSettings::Nothing,
        waited,
    }))
}

/// What names this cluster again after `rayscale up` and `rayscale down`: the config's
/// path, and the command line's overrides (`-n`; `--max-workers` for `up`).
pub struct Again {
    pub up: String,
    pub down: String,
}

/// What `up` found or launched, for [`up_message`].
struct UpReport<'a> {
    cluster: &'a str,
    id: &'a str,
    node_type: &'a str,
    launched: bool,
    ip: &'a str,
    port: u16,
    again: &'a Again,
    /// `rayscale.install` gives a wheel (else the head runs rayscale only if it has it).
    install_given: bool,
    /// `--wait`: how long rayscale took to run on the head.
    waited: Option<Duration>,
}

/// What `up` prints: the head instance, and whether rayscale runs on it only when
/// `--wait` saw it run (without, how to check).
fn up_message(u: &UpReport<'_>) -> String {
    let logs = "/var/lib/rayscale/boot.log and ~/rayscale.log";
    let rayscale = match u.waited {
        Some(took) => format!(
            "rayscale runs on the head ({:.0} s after it did); logs there: {logs}.",
            took.as_secs_f64()
        ),
        None => format!(
            "Its boot starts Ray's head, then rayscale; not checked here: `rayscale up {} \
             --wait` waits for rayscale on the head, or says why its boot did not start it (logs \
             there: {logs}).{}",
            u.again.up,
            if u.install_given {
                ""
            } else {
                "\nrayscale.install is not set: the head runs rayscale only if its image has \
                 it (on the PATH, or RAYSCALE_BIN); else its boot stops after Ray's head \
                 (docs/src/platforms/aws.md, rayscale.install)."
            }
        ),
    };
    format!(
        "cluster {name}: head instance {id} ({t}) {how}, private address {ip}\n\
         {rayscale}\n\
         From inside its network: ray status --address {ip}:{port}; \
         ray job submit --address http://{ip}:8265 -- python job.py\n\
         Stop it: rayscale down {down}",
        name = u.cluster,
        id = u.id,
        t = u.node_type,
        ip = u.ip,
        port = u.port,
        how = if u.launched {
            "launched and running"
        } else {
            "already running"
        },
        down = u.again.down,
    )
}

/// Waits until `rayscale run` holds a live lease in the head's GCS at `gcs` (Ray's head
/// up, rayscale installed and started: the newest lease key's value changes, as its
/// holder renews it), or the head's boot reported why it did not start it (a failed
/// install: [`boot_status_key`]); either ends the wait, as does `timeout`. A lease key
/// left by a rayscale that stopped does not change, and does not count.
async fn wait_for_rayscale(cluster: &str, gcs: &str, timeout: Duration) -> Result<Duration> {
    let started = std::time::Instant::now();
    let poll = settings().poll;
    let mut last: String;
    let mut seen: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        match boot_state(cluster, gcs).await {
            Ok(Boot { lease, failed }) => {
                if let Some((key, value)) = lease {
                    let renewed = seen.as_ref().is_some_and(|(k, v)| *k != key || *v != value);
                    if renewed && !released(&value) {
                        return Ok(started.elapsed());
                    }
                    seen = Some((key, value));
                }
                if let Some(why) = failed {
                    bail!(
                        "rayscale is not running on the head of {cluster}: its boot says \"{why}\" \
                         (the head's /var/lib/rayscale/boot.log has the whole output; see \
                         rayscale.install in docs/src/platforms/aws.md)"
                    );
                }
                last = if seen.is_some() {
                    "a lease key, not renewed yet".into()
                } else {
                    "Ray's head answers; rayscale has not started yet".into()
                };
            }
            Err(e) => last = format!("{e:#}"),
        }
        if started.elapsed() >= timeout {
            bail!(
                "rayscale did not start on the head of {cluster} within {} s (last: {last}); \
                 its boot goes on: follow /var/lib/rayscale/boot.log and ~/rayscale.log there",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(poll).await;
    }
}

/// What the head's GCS says: the newest lease key and its value, and the boot's reason
/// rayscale does not run.
struct Boot {
    lease: Option<(Vec<u8>, Vec<u8>)>,
    failed: Option<String>,
}

/// Whether a lease value says its holder gave it up.
fn released(value: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v.get("released").and_then(serde_json::Value::as_bool))
        .unwrap_or(false)
}

async fn boot_state(cluster: &str, gcs: &str) -> Result<Boot> {
    let c = one_shot_client(gcs)?;
    let mut leases = c
        .kv_keys(NAMESPACE, lease_prefix(cluster).as_bytes())
        .await?;
    // Epochs are zero-padded: the newest key sorts last.
    leases.sort();
    let lease = match leases.pop() {
        Some(key) => c.kv_get(NAMESPACE, &key).await?.map(|v| (key, v)),
        None => None,
    };
    let failed = c
        .kv_get(NAMESPACE, boot_status_key(cluster).as_bytes())
        .await?
        .map(|v| String::from_utf8_lossy(&v).chars().take(500).collect());
    Ok(Boot { lease, failed })
}

/// `rayscale down --workers-only [--keep-min-workers]` for a cloud cluster: the workers
/// (or all but each type's `min_workers`) go, the head stays.
pub async fn down_workers(config: &ClusterConfig, keep_min_workers: bool) -> Result<String> {
    let provider = crate::providers::build_for_launcher(config).await?;
    let r =
        launcher::down_workers(provider.as_ref(), config, keep_min_workers, &settings()).await?;
    Ok(format!(
        "cluster {}: {} workers terminated, the head left running{}",
        config.cluster_name,
        r.workers.len(),
        if keep_min_workers {
            " with each node type's min_workers"
        } else {
            ""
        }
    ))
}

/// The addresses of a cloud cluster's running head (`head`) or workers, one per line, as
/// `ray get-head-ip` / `ray get-worker-ips` print them: public, or private with
/// `provider.use_internal_ips`.
pub async fn ips(config: &ClusterConfig, head: bool) -> Result<String> {
    let provider = crate::providers::build_for_launcher_with(config, !head).await?;
    let all = provider.list().await?;
    let ips: Vec<String> = all
        .iter()
        .filter(|i| i.is_head() == head && i.state == CloudInstanceState::Running)
        .filter_map(|i| address(config, i))
        .collect();
    if head && ips.is_empty() {
        bail!(
            "cluster {} has no running head with an address: start one with `rayscale up`",
            config.cluster_name
        );
    }
    Ok(ips.join("\n"))
}

/// How this machine reaches `instance`, as Ray's `get_head_node_ip`/`get_worker_node_ips`
/// and its SSH do: the public address unless `provider.use_internal_ips` (the private
/// one where the cloud lists no public one).
fn address(config: &ClusterConfig, instance: &CloudInstance) -> Option<String> {
    if internal_ips(config) {
        instance.private_ip.clone()
    } else {
        instance
            .public_ip
            .clone()
            .or_else(|| instance.private_ip.clone())
    }
}

/// `provider.use_internal_ips`.
fn internal_ips(config: &ClusterConfig) -> bool {
    config
        .raw
        .get("provider")
        .and_then(|p| p.get("use_internal_ips"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// `rayscale down` for a cloud cluster: the head, then every worker.
pub async fn down(config: &ClusterConfig) -> Result<String> {
    let provider = crate::providers::build_for_launcher(config).await?;
    let r = launcher::down(provider.as_ref(), &settings()).await?;
    Ok(format!(
        "cluster {} is down ({} workers, {})",
        config.cluster_name,
        r.workers.len(),
        match r.heads.as_slice() {
            [] => "no head was running".to_string(),
            hs => format!("head {}", hs.join(", ")),
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(waited: Option<Duration>, install_given: bool) -> String {
        report_again(waited, install_given, "c.yaml", "c.yaml")
    }

    fn report_again(waited: Option<Duration>, install_given: bool, up: &str, down: &str) -> String {
        up_message(&UpReport {
            cluster: "c",
            id: "i-1",
            node_type: "head",
            launched: true,
            ip: "10.0.0.5",
            port: 6379,
            again: &Again {
                up: up.into(),
                down: down.into(),
            },
            install_given,
            waited,
        })
    }

    #[test]
    fn without_wait_up_says_how_to_check_not_that_rayscale_runs() {
        let m = report(None, true);
        assert!(
            m.starts_with("cluster c: head instance i-1 (head) launched and running, private address 10.0.0.5\n"),
            "{m}"
        );
        assert!(
            m.contains("not checked here: `rayscale up c.yaml --wait`")
                && m.contains("/var/lib/rayscale/boot.log"),
            "{m}"
        );
        assert!(
            !m.contains("rayscale runs")
                && !m.contains("rayscale starts")
                && !m.contains("rayscale.install is not set"),
            "{m}"
        );
        assert!(m.ends_with("Stop it: rayscale down c.yaml"), "{m}");
        // The command line's overrides are said again, each to the command that takes it.
        let m = report_again(None, true, "c.yaml --max-workers 5 -n b", "c.yaml -n b");
        assert!(
            m.contains("`rayscale up c.yaml --max-workers 5 -n b --wait`")
                && m.ends_with("Stop it: rayscale down c.yaml -n b"),
            "{m}"
        );
        // No wheel given: the head runs rayscale only if it has it.
        let m = report(None, false);
        assert!(
            m.contains(
                "rayscale.install is not set: the head runs rayscale only if its image has it"
            ),
            "{m}"
        );
        // `--wait` saw it run.
        let m = report(Some(Duration::from_secs(42)), false);
        assert!(
            m.contains("rayscale runs on the head (42 s after it did)")
                && !m.contains("not checked")
                && !m.contains("rayscale.install is not set"),
            "{m}"
        );
    }
}
