//! `provider.cloudwatch`: Ray's CloudWatch integration (Ray 2.60's `CloudwatchHelper`),
//! as far as rayscale acts on it.
//!
//! - **The agent** (`agent.config`, `agent.retryer`): `rayscale up` reads the agent's
//!   config file on the machine running it (a path relative to its working directory, as
//!   Ray opens it), puts `{cluster_name}` and `{region}` in, and stores it in Ray's SSM
//!   parameter `AmazonCloudWatch-ray_agent_config_<cluster>` ([`upload_agent_config`]).
//!   Every node, head and workers, then has the Unified CloudWatch Agent fetch that
//!   parameter and start at boot ([`boot_snippet`], in the background, so Ray's start
//!   never waits on it), retrying `retryer.max_attempts` times `retryer.delay_seconds`
//!   apart (Ray's defaults 120 and 30 s). Where Ray sends the same "configure from SSM"
//!   command to each node through SSM Run Command, the node asks for it itself: nothing
//!   runs per node on the head, and the SSM agent is not needed. A node without the agent
//!   installed logs one line saying so and goes on, as Ray's updater warns and goes on.
//!   `{instance_id}` is left for the agent, which puts each node's own id in a log
//!   stream's name (Ray puts the head's id in, for every node).
//! - **IAM**: with an agent config the head's default profile and role are Ray's
//!   `ray-autoscaler-cloudwatch-v1`, with Ray's extra policies
//!   (`CloudWatchAgentAdminPolicy`, `AmazonSSMManagedInstanceCore` and the account's
//!   `CloudwatchManagedPolicies`, made when missing); see [`crate::iam`].
//! - **Not acted on**: `dashboard` and `alarm` (CloudWatch dashboards and metric
//!   alarms, which Ray puts from its node updater). A config with them loads, and they are
//!   named in one warning per process.
//!
//! This module must not call EC2: it is the agent's config and its boot lines only.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use crate::AwsError;

/// Ray's profile and role when the cluster has an agent config
/// (`CLOUDWATCH_RAY_INSTANCE_PROFILE`, `CLOUDWATCH_RAY_IAM_ROLE`).
pub const PROFILE: &str = "ray-autoscaler-cloudwatch-v1";
/// See [`PROFILE`].
pub const ROLE: &str = "ray-autoscaler-cloudwatch-v1";
/// The customer-managed policy Ray makes for the agent's role.
pub const MANAGED_POLICY: &str = "CloudwatchManagedPolicies";
/// AWS's managed policies Ray adds to the role's for the agent.
pub const AGENT_POLICIES: [&str; 2] = [
    "arn:aws:iam::aws:policy/CloudWatchAgentAdminPolicy",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
];
/// SSM's limit on a parameter's value (the advanced tier, which Ray's
/// `Intelligent-Tiering` picks for a value over the standard 4 KB).
pub const MAX_PARAMETER: usize = 8 * 1024;

/// The `provider.cloudwatch` section, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cloudwatch {
    /// `agent.config`: the agent's config file, on the machine running `up`.
    pub agent_config: Option<String>,
    /// `agent.retryer.max_attempts` (Ray's default 120).
    pub max_attempts: u64,
    /// `agent.retryer.delay_seconds` (Ray's default 30).
    pub delay_seconds: u64,
    /// The sections given that rayscale does not act on (`dashboard`, `alarm`).
    pub not_acted_on: Vec<&'static str>,
}

/// Whether the warning about sections not acted on was logged in this process.
static WARNED: AtomicBool = AtomicBool::new(false);

fn err(path: &str, message: impl Into<String>) -> AwsError {
    AwsError::config(format!("provider.cloudwatch{path}"), message)
}

/// A section of `provider.cloudwatch` as a mapping (`null` is absent).
fn section<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, AwsError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(s)) => Ok(Some(s)),
        Some(v) => Err(err(
            &format!("{path}.{key}"),
            format!("must be a mapping, got {v}"),
        )),
    }
}

/// Checks that `m` has only `keys`.
fn only(m: &Map<String, Value>, keys: &[&str], path: &str) -> Result<(), AwsError> {
    match m.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(err(
            &format!("{path}.{k}"),
            format!("not a key of Ray's schema (known: {})", keys.join(", ")),
        )),
        None => Ok(()),
    }
}

/// A string or null key: its non-empty value.
fn string(m: &Map<String, Value>, key: &str, path: &str) -> Result<Option<String>, AwsError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok((!s.trim().is_empty()).then(|| s.clone())),
        Some(v) => Err(err(
            &format!("{path}.{key}"),
            format!("must be a string, got {v}"),
        )),
    }
}

impl Cloudwatch {
    /// Reads `provider.cloudwatch` from the provider section; `None` without one.
    pub fn from_provider(provider: &Map<String, Value>) -> Result<Option<Self>, AwsError> {
        let cw = match provider.get("cloudwatch") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(m)) => m,
            Some(v) => return Err(err("", format!("must be a mapping, got {v}"))),
        };
        only(cw, &["agent", "dashboard", "alarm"], "")?;
        let mut out = Cloudwatch {
            agent_config: None,
            max_attempts: 120,
            delay_seconds: 30,
            not_acted_on: Vec::new(),
        };
        if let Some(agent) = section(cw, "agent", "")? {
            // Ray's schema lists the AMI-name tag here too; Ray reads its own constant.
            only(
                agent,
                &["config", "retryer", "CLOUDWATCH_AGENT_INSTALLED_AMI_TAG"],
                ".agent",
            )?;
            out.agent_config = string(agent, "config", ".agent")?;
            if let Some(r) = section(agent, "retryer", ".agent")? {
                only(r, &["max_attempts", "delay_seconds"], ".agent.retryer")?;
                let whole = |key: &str, min: u64| -> Result<Option<u64>, AwsError> {
                    match r.get(key) {
                        None | Some(Value::Null) => Ok(None),
                        Some(v) => v
                            .as_u64()
                            .filter(|n| *n >= min && *n <= 100_000)
                            .map(Some)
                            .ok_or_else(|| {
                                err(
                                    &format!(".agent.retryer.{key}"),
                                    format!("must be a whole number from {min} to 100000, got {v}"),
                                )
                            }),
                    }
                };
                out.max_attempts = whole("max_attempts", 1)?.unwrap_or(out.max_attempts);
                out.delay_seconds = whole("delay_seconds", 0)?.unwrap_or(out.delay_seconds);
            }
        }
        if let Some(d) = section(cw, "dashboard", "")? {
            only(d, &["name", "config"], ".dashboard")?;
            string(d, "name", ".dashboard")?;
            if string(d, "config", ".dashboard")?.is_some() {
                out.not_acted_on.push("dashboard");
            }
        }
        if let Some(a) = section(cw, "alarm", "")? {
            only(a, &["config"], ".alarm")?;
            if string(a, "config", ".alarm")?.is_some() {
                out.not_acted_on.push("alarm");
            }
        }
        if !out.not_acted_on.is_empty() && !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "provider.cloudwatch.{}: not acted on by rayscale (Ray's updater puts CloudWatch \
                 dashboards and metric alarms); put them with `aws cloudwatch put-dashboard` / \
                 `put-metric-alarm`",
                out.not_acted_on.join(", provider.cloudwatch.")
            );
        }
        Ok(Some(out))
    }

    /// Whether the nodes run the agent (Ray's `cloudwatch_config_exists(.., "agent")`).
    pub fn agent(&self) -> bool {
        self.agent_config.is_some()
    }
}

/// The cluster's `provider.cloudwatch` with an agent config, if it has one.
pub fn agent_of(provider: &Map<String, Value>) -> Result<Option<Cloudwatch>, AwsError> {
    Ok(Cloudwatch::from_provider(provider)?.filter(Cloudwatch::agent))
}

/// Ray's SSM parameter of a config kind (`agent`, `dashboard`, `alarm`) of `cluster`.
pub fn parameter_name(kind: &str, cluster: &str) -> String {
    format!("AmazonCloudWatch-ray_{kind}_config_{cluster}")
}

/// The policy document of [`MANAGED_POLICY`], as Ray writes it.
pub fn managed_policy_document() -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": ["ssm:SendCommand", "ssm:ListCommandInvocations", "iam:PassRole"],
            "Resource": "*",
        }],
    })
    .to_string()
}

/// Puts the cluster's values in every string of `v`, as Ray's
/// `_replace_all_config_variables` does; an empty value is left out, as Ray's.
pub fn replace_vars(v: &mut Value, instance_id: Option<&str>, cluster: &str, region: &str) {
    match v {
        Value::String(s) => {
            for (var, value) in [
                ("{instance_id}", instance_id.unwrap_or("")),
                ("{cluster_name}", cluster),
                ("{region}", region),
            ] {
                if !value.is_empty() {
                    *s = s.replace(var, value);
                }
            }
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|x| replace_vars(x, instance_id, cluster, region)),
        Value::Object(m) => m
            .values_mut()
            .for_each(|x| replace_vars(x, instance_id, cluster, region)),
        _ => {}
    }
}

/// The agent config to store: the file at `path` (relative to `cwd`), a JSON mapping,
/// with the cluster's values put in.
pub fn agent_config(
    path: &str,
    cwd: &Path,
    cluster: &str,
    region: &str,
) -> Result<String, AwsError> {
    let at = ".agent.config";
    let file = cwd.join(path);
    let text =
        std::fs::read_to_string(&file).map_err(|e| err(at, format!("{}: {e}", file.display())))?;
    let mut v: Value = serde_json::from_str(&text)
        .map_err(|e| err(at, format!("{}: not JSON: {e}", file.display())))?;
    if !v.is_object() {
        return Err(err(
            at,
            format!(
                "{}: must be a JSON object (the agent's config)",
                file.display()
            ),
        ));
    }
    replace_vars(&mut v, None, cluster, region);
    let out = v.to_string();
    if out.len() > MAX_PARAMETER {
        return Err(err(
            at,
            format!(
                "{}: {} bytes; an SSM parameter holds at most {MAX_PARAMETER}",
                file.display(),
                out.len()
            ),
        ));
    }
    Ok(out)
}

/// Stores the agent config of `cw` (see [`agent_config`]) in Ray's parameter, as Ray's
/// `_put_ssm_param` does (a `String`, overwritten, `Intelligent-Tiering`). Returns the
/// parameter's name.
pub async fn upload_agent_config(
    ssm: &aws_sdk_ssm::Client,
    cw: &Cloudwatch,
    cluster: &str,
    region: &str,
    cwd: &Path,
) -> Result<Option<String>, AwsError> {
    let Some(path) = &cw.agent_config else {
        return Ok(None);
    };
    let value = agent_config(path, cwd, cluster, region)?;
    let name = parameter_name("agent", cluster);
    ssm.put_parameter()
        .name(&name)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .value(value)
        .overwrite(true)
        .tier(aws_sdk_ssm::types::ParameterTier::IntelligentTiering)
        .send()
        .await
        .map_err(|e| crate::client::sdk_error("PutParameter", e, "", None))?;
    Ok(Some(name))
}

/// The lines a node's boot script runs for the agent: in the background, find the
/// agent's control script, have it fetch Ray's parameter and start, retrying.
pub fn boot_snippet(cw: &Cloudwatch, cluster: &str) -> String {
    let param = parameter_name("agent", cluster);
    let quoted = format!("'{}'", param.replace('\'', r"'\''"));
    format!(
        "# provider.cloudwatch.agent: the CloudWatch agent takes Ray's SSM parameter of the cluster.\n\
         ( ctl=$(command -v amazon-cloudwatch-agent-ctl || echo /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl)\n  \
           if [ ! -x \"$ctl\" ]; then echo \"rayscale: provider.cloudwatch.agent: the Unified CloudWatch Agent is not installed on this node; use an AMI with it (Ray's logs and metrics are not sent)\" >&2; exit 0; fi\n  \
           n=1\n  \
           until \"$ctl\" -a fetch-config -m ec2 -s -c ssm:{quoted}; do\n    \
             if [ \"$n\" -ge {max} ]; then echo \"rayscale: provider.cloudwatch.agent: the agent did not start after {max} attempts\" >&2; exit 1; fi\n    \
             n=$((n + 1)); sleep {delay}\n  \
           done ) </dev/null &\n",
        max = cw.max_attempts,
        delay = cw.delay_seconds,
    )
}

/// `script` with `snippet` run first: after the line that sends the boot script's output
/// to its log (`exec >>...`), so the agent's lines go there too, else after its `#!`
/// line.
pub fn with_snippet(script: &str, snippet: &str) -> String {
    let mut at = 0;
    for line in script.split_inclusive('\n') {
        if at == 0 && line.starts_with("#!") {
            at = line.len();
        }
        if line.starts_with("exec >>") {
            at = script.find(line).map_or(at, |i| i + line.len());
            break;
        }
    }
    let (head, rest) = script.split_at(at.min(script.len()));
    let sep = if head.is_empty() || head.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!("{head}{sep}{snippet}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<Option<Cloudwatch>, AwsError> {
        let provider = json!({"type": "aws", "cloudwatch": v});
        Cloudwatch::from_provider(provider.as_object().expect("a mapping"))
    }

    #[test]
    fn rays_example_section_reads_with_its_defaults() {
        let cw = read(json!({
            "agent": {"config": "cloudwatch/agent.json",
                      "retryer": {"max_attempts": 5, "delay_seconds": 2}},
            "dashboard": {"name": "d", "config": "cloudwatch/dash.json"},
            "alarm": {"config": "cloudwatch/alarm.json"},
        }))
        .expect("read")
        .expect("present");
        assert_eq!(cw.agent_config.as_deref(), Some("cloudwatch/agent.json"));
        assert_eq!((cw.max_attempts, cw.delay_seconds), (5, 2));
        assert_eq!(cw.not_acted_on, ["dashboard", "alarm"]);
        let bare = read(json!({"agent": {"config": "a.json"}}))
            .expect("read")
            .expect("present");
        assert_eq!((bare.max_attempts, bare.delay_seconds), (120, 30));
        assert!(bare.not_acted_on.is_empty());
        // No agent config: Ray's names and policies stay the defaults.
        let none = read(json!({"agent": {"config": null}}))
            .expect("read")
            .expect("present");
        assert!(!none.agent());
        assert_eq!(read(Value::Null).expect("read"), None);
    }

    #[test]
    fn a_wrong_section_is_named() {
        for (v, path) in [
            (json!("x"), "provider.cloudwatch:"),
            (json!({"agnet": {}}), "provider.cloudwatch.agnet:"),
            (
                json!({"agent": {"config": 3}}),
                "provider.cloudwatch.agent.config:",
            ),
            (
                json!({"agent": {"retryer": {"max_attempts": 0}}}),
                "provider.cloudwatch.agent.retryer.max_attempts:",
            ),
            (
                json!({"agent": {"retryer": {"delay_seconds": -1}}}),
                "provider.cloudwatch.agent.retryer.delay_seconds:",
            ),
            (json!({"alarm": []}), "provider.cloudwatch.alarm:"),
        ] {
            let e = read(v).expect_err("refused").to_string();
            assert!(e.starts_with(path), "{e}");
        }
    }

    #[test]
    fn variables_are_put_in_as_rays_are() {
        let mut v = json!({"logs": {"logs_collected": {"files": {"collect_list": [
            {"log_group_name": "{cluster_name}-ray_logs_out", "log_stream_name": "{instance_id}"}]}}},
            "metrics": {"namespace": "{cluster_name}-ray-{region}", "n": 3}});
        replace_vars(&mut v, None, "c1", "us-west-2");
        assert_eq!(
            v["logs"]["logs_collected"]["files"]["collect_list"][0],
            json!({"log_group_name": "c1-ray_logs_out", "log_stream_name": "{instance_id}"})
        );
        assert_eq!(
            v["metrics"],
            json!({"namespace": "c1-ray-us-west-2", "n": 3})
        );
        replace_vars(&mut v, Some("i-1"), "", "");
        assert_eq!(
            v["logs"]["logs_collected"]["files"]["collect_list"][0]["log_stream_name"],
            "i-1"
        );
    }

    #[test]
    fn the_agent_file_is_checked_and_filled_in() {
        let dir = std::env::temp_dir().join(format!("rayscale-cw-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("cw")).expect("dir");
        std::fs::write(
            dir.join("cw/agent.json"),
            r#"{"agent": {"region": "{region}"}, "logs": {"x": "{cluster_name}"}}"#,
        )
        .expect("write");
        let out = agent_config("cw/agent.json", &dir, "c", "r").expect("read");
        assert_eq!(out, r#"{"agent":{"region":"r"},"logs":{"x":"c"}}"#);
        let e = agent_config("cw/none.json", &dir, "c", "r")
            .expect_err("missing")
            .to_string();
        assert!(e.starts_with("provider.cloudwatch.agent.config: "), "{e}");
        std::fs::write(dir.join("cw/bad.json"), "[1]").expect("write");
        assert!(agent_config("cw/bad.json", &dir, "c", "r").is_err());
        std::fs::write(
            dir.join("cw/big.json"),
            format!(r#"{{"x": "{}"}}"#, "a".repeat(MAX_PARAMETER)),
        )
        .expect("write");
        let e = agent_config("cw/big.json", &dir, "c", "r")
            .expect_err("too big")
            .to_string();
        assert!(e.contains("at most 8192"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The snippet under bash as a boot script runs it (`set -euo pipefail`, its output
    /// sent to a log first): a control script that fails twice is retried and then given
    /// Ray's parameter; one that never works is given up on after the attempts; none
    /// installed is one line; and one that hangs never holds the boot (the script ends
    /// within `timeout`'s bound while the agent's step is still running).
    #[test]
    fn the_boot_lines_retry_the_agent_and_never_hold_the_boot() {
        let dir = std::env::temp_dir().join(format!("rayscale-cw-sh-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let run = |ctl: Option<&str>, attempts: u64| {
            let cw = Cloudwatch {
                agent_config: Some("a.json".into()),
                max_attempts: attempts,
                delay_seconds: 0,
                not_acted_on: Vec::new(),
            };
            let bin = dir.join("bin");
            let _ = std::fs::remove_dir_all(&bin);
            std::fs::create_dir_all(&bin).expect("bin");
            if let Some(body) = ctl {
                let p = bin.join("amazon-cloudwatch-agent-ctl");
                std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("ctl");
                std::process::Command::new("chmod")
                    .arg("+x")
                    .arg(&p)
                    .status()
                    .expect("chmod");
            }
            let _ = std::fs::remove_file(dir.join("calls"));
            let _ = std::fs::remove_file(dir.join("boot.log"));
            let script = with_snippet(
                "#!/bin/bash\nset -euo pipefail\nexec >>\"$BOOT_LOG\" 2>&1\necho booted\n",
                &boot_snippet(&cw, "c'x"),
            );
            let status = std::process::Command::new("timeout")
                .args(["2", "bash", "-c", &script])
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("LOG", dir.join("calls"))
                .env("BOOT_LOG", dir.join("boot.log"))
                .status()
                .expect("bash");
            status.success()
        };
        // The background step's end: its last line, or the calls it made.
        let settled = |want: &dyn Fn(&str, &str) -> bool| {
            for _ in 0..100 {
                let log = std::fs::read_to_string(dir.join("boot.log")).unwrap_or_default();
                let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
                if want(&log, &calls) {
                    return (log, calls);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            panic!("the agent's step did not end as expected");
        };
        assert!(run(
            Some(r#"echo "$*" >> "$LOG"; [ "$(wc -l < "$LOG")" -ge 3 ]"#),
            3
        ));
        let (log, calls) = settled(&|_, c| c.lines().count() == 3);
        assert!(log.starts_with("booted\n"), "{log}");
        assert_eq!(
            calls.lines().last(),
            Some("-a fetch-config -m ec2 -s -c ssm:AmazonCloudWatch-ray_agent_config_c'x")
        );
        assert!(run(Some(r#"echo "$*" >> "$LOG"; exit 1"#), 3));
        let (_, calls) = settled(&|l, _| l.contains("did not start after 3 attempts"));
        assert_eq!(calls.lines().count(), 3, "{calls}");
        assert!(run(None, 3));
        settled(&|l, _| l.contains("not installed on this node"));
        // A control script that hangs: the boot goes on (a foreground step would be
        // killed by `timeout` and fail).
        assert!(run(Some(r#"echo "$*" >> "$LOG"; sleep 4"#), 1));
        settled(&|_, c| c.lines().count() == 1);
        // In a boot script, after the line that sends its output to the log.
        let boot = "#!/bin/bash\nset -e\nexec >>log 2>&1\nray start\n";
        assert_eq!(
            with_snippet(boot, "S\n"),
            "#!/bin/bash\nset -e\nexec >>log 2>&1\nS\nray start\n"
        );
        assert_eq!(with_snippet("echo", "S\n"), "S\necho");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
