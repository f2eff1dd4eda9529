//! Ray's command-line overrides of the cluster YAML (`ray up --min-workers/--max-workers`,
//! `-n/--cluster-name` on `up`, `down`, `get-head-ip` and `get-worker-ips`), applied to
//! the document before anything reads it, as Ray's `create_or_update_cluster` applies
//! them; and the `ray up` flags that change nothing here (Ray's logging flags too),
//! accepted so that Ray's usual command lines run (a flag rayscale cannot honour is
//! refused, naming why).

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::Args;
use rayscale_core::config::{ClusterConfig, parse_yaml};
use serde_json::Value;

/// `-n/--cluster-name`, as on Ray's `up`, `down`, `get-head-ip` and `get-worker-ips`,
/// and Ray's logging flags, taken so that its command lines run.
#[derive(Args, Clone, Debug, Default)]
pub struct NameOverride {
    /// Override the YAML's cluster_name (as Ray's `-n`).
    #[arg(short = 'n', long, value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Ray's `--log-style`, `--log-color` and `-v`: taken, and change nothing (rayscale's
    /// output has one style; `RUST_LOG=debug` says more).
    #[arg(long, value_name = "STYLE", value_parser = ["auto", "record", "pretty"])]
    pub log_style: Option<String>,
    #[arg(long, value_name = "COLOR", value_parser = ["auto", "false", "true"], hide = true)]
    pub log_color: Option<String>,
    #[arg(short = 'v', long, action = clap::ArgAction::Count, hide = true)]
    pub verbose: u8,
}

/// `ray up`'s overrides and its flags that change nothing in rayscale.
#[derive(Args, Clone, Debug, Default)]
pub struct UpOverrides {
    #[command(flatten)]
    pub name: NameOverride,
    /// As `ray up --min-workers`: sets the top-level min_workers, which Ray drops (and
    /// rayscale too, saying so): give each node type its own.
    #[arg(long, value_name = "N")]
    pub min_workers: Option<u64>,
    /// As `ray up --max-workers`: overrides the top-level max_workers.
    #[arg(long, value_name = "N")]
    pub max_workers: Option<u64>,
    /// As `ray up --no-restart`: what `up` always does (a running head's Ray is never
    /// restarted; an edited config is pushed to it).
    #[arg(long)]
    pub no_restart: bool,
    /// `ray up --restart-only` is refused: `up` never restarts Ray on a running head.
    #[arg(long, hide = true)]
    pub restart_only: bool,
    /// As `ray up --no-config-cache`: rayscale keeps no config cache.
    #[arg(long)]
    pub no_config_cache: bool,
    /// As `ray up --redirect-command-output`: a node's commands run at its boot and log
    /// to its `/var/lib/rayscale/boot.log`, never to this terminal.
    #[arg(long)]
    pub redirect_command_output: bool,
    /// `ray up --use-login-shells/--use-normal-shells` are refused: a node's boot runs
    /// the YAML's commands itself, not over SSH.
    #[arg(long, hide = true)]
    pub use_login_shells: bool,
    #[arg(long, hide = true)]
    pub use_normal_shells: bool,
    /// `ray up --disable-usage-stats` is refused: it disables Ray's usage stats on the
    /// nodes Ray's updater starts, which rayscale's boot starts instead.
    #[arg(long, hide = true)]
    pub disable_usage_stats: bool,
}

impl NameOverride {
    /// The config at `path` with the override applied.
    pub fn load(&self, path: &Path) -> Result<ClusterConfig> {
        load_with(path, &self.changes(), true)
    }

    fn changes(&self) -> Vec<(&'static str, Value)> {
        self.cluster_name
            .iter()
            .map(|n| ("cluster_name", Value::String(n.clone())))
            .collect()
    }
}

impl UpOverrides {
    /// Refuses the flags rayscale cannot honour.
    pub fn check(&self) -> Result<()> {
        if self.restart_only {
            bail!(
                "--restart-only: rayscale up never restarts Ray on a running head (it pushes \
                 an edited config, as --no-restart); to restart it, `rayscale down` and \
                 `rayscale up` again"
            );
        }
        if self.use_login_shells || self.use_normal_shells {
            bail!(
                "--use-login-shells/--use-normal-shells: not taken (a node's boot runs the \
                 YAML's commands itself, not over SSH); drop the flag"
            );
        }
        if self.disable_usage_stats {
            bail!(
                "--disable-usage-stats: not taken (a node's boot, not Ray's updater, starts \
                 Ray); add --disable-usage-stats to the `ray start` lines of \
                 head_start_ray_commands and worker_start_ray_commands instead"
            );
        }
        Ok(())
    }

    /// What names this cluster again after `rayscale up` and `rayscale down`: `path`,
    /// then the overrides each command takes.
    pub fn again(&self, path: &Path) -> crate::launch::Again {
        let path = crate::ssh::quote(&path.display().to_string());
        let mut up = path.clone();
        if let Some(n) = self.min_workers {
            up.push_str(&format!(" --min-workers {n}"));
        }
        if let Some(n) = self.max_workers {
            up.push_str(&format!(" --max-workers {n}"));
        }
        let name = self
            .name
            .cluster_name
            .as_deref()
            .map(|n| format!(" -n {}", crate::ssh::quote(n)))
            .unwrap_or_default();
        crate::launch::Again {
            up: format!("{up}{name}"),
            down: format!("{path}{name}"),
        }
    }

    /// Every override, in Ray's order (min, max, name).
    pub fn changes(&self) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        if let Some(n) = self.min_workers {
            out.push(("min_workers", Value::from(n)));
        }
        if let Some(n) = self.max_workers {
            out.push(("max_workers", Value::from(n)));
        }
        out.extend(self.name.changes());
        out
    }
}

/// Reads the config at `path` and applies `changes` to its top level, each said (with
/// `say`: a command's first read, not a loop's rereads) as Ray says it when the YAML has
/// the key already.
pub fn load_with(
    path: &Path,
    changes: &[(&'static str, Value)],
    say: bool,
) -> Result<ClusterConfig> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {origin}"))?;
    Ok(apply(&text, &origin, changes, say)?)
}

/// The config of `text` with `changes` applied to its top level (said with `say`).
pub fn apply(
    text: &str,
    origin: &str,
    changes: &[(&'static str, Value)],
    say: bool,
) -> Result<ClusterConfig, rayscale_core::CoreError> {
    if changes.is_empty() {
        return ClusterConfig::from_yaml_str(text, origin);
    }
    let mut doc = parse_yaml(text, origin)?;
    if let Value::Object(map) = &mut doc {
        for (key, value) in changes {
            if let Some(old) = map.get(*key).filter(|_| say) {
                tracing::warn!(
                    "{origin}: `{key}` override given on the command line: using {value} (the \
                     YAML has {old})"
                );
            }
            map.insert((*key).to_string(), value.clone());
        }
    }
    ClusterConfig::from_value(&doc, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "cluster_name: a\nmax_workers: 2\nprovider: {type: local_processes}\n\
        head_node_type: h\navailable_node_types:\n  h: {resources: {}, node_config: {}}\n  \
        w: {resources: {CPU: 1}, node_config: {}}\n";

    #[test]
    fn overrides_replace_the_yamls_keys_and_refused_flags_say_why() {
        let up = UpOverrides {
            name: NameOverride {
                cluster_name: Some("b".into()),
                ..Default::default()
            },
            max_workers: Some(5),
            min_workers: Some(1),
            ..Default::default()
        };
        let c = apply(YAML, "c.yaml", &up.changes(), true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.cluster_name, "b");
        assert_eq!(c.max_workers, Some(5));
        // The top-level min_workers is dropped, as Ray drops it.
        assert!(c.node_types.iter().all(|t| t.min_workers == 0));
        assert_eq!(c.raw["cluster_name"], "b");
        // No override: the YAML as it is.
        let c = apply(YAML, "c.yaml", &[], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.cluster_name.as_str(), c.max_workers), ("a", Some(2)));
        assert!(up.check().is_ok());
        let again = up.again(Path::new("my dir/c.yaml"));
        assert_eq!(
            (again.up.as_str(), again.down.as_str()),
            (
                "'my dir/c.yaml' --min-workers 1 --max-workers 5 -n b",
                "'my dir/c.yaml' -n b"
            )
        );
        let e = UpOverrides {
            restart_only: true,
            ..Default::default()
        }
        .check()
        .map_err(|e| e.to_string())
        .err()
        .unwrap_or_default();
        assert!(e.contains("never restarts Ray on a running head"), "{e}");
        for refused in [
            UpOverrides {
                use_normal_shells: true,
                ..Default::default()
            },
            UpOverrides {
                disable_usage_stats: true,
                ..Default::default()
            },
        ] {
            let e = refused
                .check()
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default();
            assert!(e.contains(": not taken ("), "{e}");
        }
    }
}
