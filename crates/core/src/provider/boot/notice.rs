//! The notice watcher a worker's boot script starts with `rayscale.preemption.enabled`:
//! a few lines of shell over `curl` that poll the cloud's notice endpoint every few
//! seconds and, on a notice, ask Ray to drain the node it runs on
//! (`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`)
//! after leaving the notice in the GCS KV for rayscale (see [`crate::preemption`]). The
//! reading of a notice (JSON, RFC 1123 dates) and the KV write are `notice.py`, run with
//! the Python that runs Ray, only when an endpoint answers: no new binary on the node.
//!
//! Endpoints (`RAYSCALE_METADATA_URL` replaces the metadata service's address, as for
//! the instance id):
//! - AWS (IMDSv2 token first): `/latest/meta-data/spot/instance-action` (`{"action",
//!   "time"}`, two minutes ahead), then `/latest/meta-data/events/recommendations/
//!   rebalance` (`{"noticeTime"}`), drained only with `on_rebalance: drain`;
//! - GCE: `/computeMetadata/v1/instance/preempted` (`TRUE`, about 30 s ahead), then
//!   `.../instance/maintenance-event` (`TERMINATE_ON_HOST_MAINTENANCE`, 60 s);
//! - Azure: Scheduled Events, `/metadata/scheduledevents` (`EventType: Preempt` or
//!   `Terminate` naming this VM, `NotBefore`).

use crate::config::preemption::{OnRebalance, PreemptionSettings};

/// Whose notice endpoints the watcher polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeCloud {
    /// EC2's instance metadata service.
    Aws,
    /// Compute Engine's metadata server.
    Gce,
    /// Azure's instance metadata service (Scheduled Events).
    Azure,
}

/// What a worker's watcher needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Watcher<'a> {
    /// The cloud.
    pub cloud: NoticeCloud,
    /// The settings.
    pub settings: PreemptionSettings,
    /// The KV key prefix of this cluster's notices (`notices/<cluster>/`).
    pub key_prefix: String,
    /// The GCS address as the worker's `ray start --address` names it (may use
    /// `$RAY_HEAD_IP`).
    pub gcs: &'a str,
}

/// The helper, embedded.
pub const NOTICE_PY: &str = include_str!("notice.py");

const PY_MARK: &str = "RAYSCALE_NOTICE_PY_EOF";

/// The GCS address a worker's start commands join (`--address=A` or `--address A`),
/// else `$RAY_HEAD_IP:6379`. Only a plain address (letters, digits, `.:-_${}`) is
/// taken; anything else falls back to the default.
pub fn worker_gcs_address(start: &[String]) -> String {
    for c in start.iter().filter(|c| c.contains("ray start")) {
        let words: Vec<&str> = c.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let v = if let Some(v) = w.strip_prefix("--address=") {
                Some(v)
            } else if *w == "--address" {
                words.get(i + 1).copied()
            } else {
                None
            };
            if let Some(v) = v.map(|v| v.trim_matches(['"', '\'', ';']))
                && !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".:-_${}".contains(c))
            {
                return v.to_string();
            }
        }
    }
    "$RAY_HEAD_IP:6379".to_string()
}

/// The watcher script (run as the user that runs Ray, with the boot environment).
pub fn render(w: &Watcher<'_>) -> String {
    let (default_url, poll) = match w.cloud {
        NoticeCloud::Aws => (
            "http://169.254.169.254",
            concat!(
                "notice() {\n",
                "  local t h b\n",
                "  t=\"$(curl -sf --max-time 2 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \"$M/latest/api/token\")\" || t=\n",
                "  h=\"X-aws-ec2-metadata-token: $t\"\n",
                "  if b=\"$(curl -sf --max-time 2 -H \"$h\" \"$M/latest/meta-data/spot/instance-action\")\"; then\n",
                "    printf '%s' \"$b\" | \"$PY\" \"$NP\" parse aws-action; return\n",
                "  fi\n",
                "  if b=\"$(curl -sf --max-time 2 -H \"$h\" \"$M/latest/meta-data/events/recommendations/rebalance\")\"; then\n",
                "    printf '%s' \"$b\" | \"$PY\" \"$NP\" parse aws-rebalance; return\n",
                "  fi\n",
                "  return 1\n",
                "}\n",
            ),
        ),
        NoticeCloud::Gce => (
            "http://metadata.google.internal",
            concat!(
                "notice() {\n",
                "  local b\n",
                "  b=\"$(curl -sf --max-time 2 -H 'Metadata-Flavor: Google' \"$M/computeMetadata/v1/instance/preempted\")\" || b=\n",
                "  if [ \"$b\" = TRUE ]; then printf '%s' \"$b\" | \"$PY\" \"$NP\" parse gce-preempted; return; fi\n",
                "  b=\"$(curl -sf --max-time 2 -H 'Metadata-Flavor: Google' \"$M/computeMetadata/v1/instance/maintenance-event\")\" || b=\n",
                "  case \"$b\" in TERMINATE*) printf '%s' \"$b\" | \"$PY\" \"$NP\" parse gce-maintenance; return;; esac\n",
                "  return 1\n",
                "}\n",
            ),
        ),
        NoticeCloud::Azure => (
            "http://169.254.169.254",
            concat!(
                "notice() {\n",
                "  local b\n",
                "  b=\"$(curl -sf --max-time 2 -H 'Metadata: true' \"$M/metadata/scheduledevents?api-version=2020-07-01\")\" || return 1\n",
                "  case \"$b\" in *Preempt*|*Terminate*) printf '%s' \"$b\" | \"$PY\" \"$NP\" parse azure \"$RAY_CLOUD_INSTANCE_ID\";; *) return 1;; esac\n",
                "}\n",
            ),
        ),
    };
    let mut s = String::new();
    s.push_str("# rayscale notice watcher (rayscale.preemption): drains this node's Ray on a\n");
    s.push_str("# preemption notice, with the cloud's deadline.\n");
    s.push_str(&format!(
        "M=\"${{RAYSCALE_METADATA_URL:-{default_url}}}\"\n"
    ));
    s.push_str(&format!("POLL={}\n", w.settings.notice_poll_s));
    s.push_str(&format!("GCS=\"{}\"\n", w.gcs));
    s.push_str(&format!(
        "KEY={}\"$RAY_CLOUD_INSTANCE_ID\"\n",
        super::quote(&w.key_prefix)
    ));
    s.push_str(&format!(
        "ON_REBALANCE={}\n",
        match w.settings.on_rebalance {
            OnRebalance::Ignore => "ignore",
            OnRebalance::Drain => "drain",
        }
    ));
    // The Python that runs Ray: the `ray` script's interpreter, else python3.
    s.push_str(concat!(
        "PY=\"$(sed -n '1s/^#! *//p' \"$(command -v ray)\" 2>/dev/null | cut -d' ' -f1)\"\n",
        "case \"$PY\" in */python*) ;; *) PY=\"$(command -v python3 || command -v python)\";; esac\n",
        // The helper goes into a fresh 0700 directory of an unpredictable name (mktemp):
        // a fixed path in a shared /tmp could be made beforehand by another local user,
        // whose file this script would then run.
        "ND=\"$(mktemp -d \"${TMPDIR:-/tmp}/rayscale-notice.XXXXXXXXXX\")\" || { echo 'rayscale: cannot make a private directory for the notice helper' >&2; exit 1; }\n",
        "NP=\"$ND/notice.py\"\n",
    ));
    s.push_str(&format!(
        "cat >\"$NP\" <<'{PY_MARK}'\n{NOTICE_PY}{PY_MARK}\n"
    ));
    s.push_str(poll);
    s.push_str(concat!(
        "said=\n",
        "while sleep \"$POLL\"; do\n",
        "  n=\"$(notice)\" || continue\n",
        "  [ -n \"$n\" ] || continue\n",
        "  read -r source deadline msg <<<\"$n\"\n",
        "  if [ \"$source\" = aws-rebalance ] && [ \"$ON_REBALANCE\" = ignore ]; then\n",
        "    # Said and left for rayscale to count, once; nothing is drained.\n",
        "    [ -n \"$said\" ] || { echo \"rayscale: $msg (on_rebalance: ignore)\"; \"$PY\" \"$NP\" record \"$GCS\" \"$KEY\" \"$n\" >/dev/null || true; said=1; }\n",
        "    continue\n",
        "  fi\n",
        "  echo \"rayscale: notice: $msg\"\n",
        "  node=\"$(\"$PY\" \"$NP\" record \"$GCS\" \"$KEY\" \"$n\")\" || { echo 'rayscale: cannot record the notice (retried)'; continue; }\n",
        "  left=\n",
        "  if [ \"$deadline\" -gt 0 ]; then left=$(( deadline - $(date +%s) )); [ \"$left\" -ge 0 ] || left=0; fi\n",
        "  if ray drain-node --address \"$GCS\" --node-id \"$node\" --reason DRAIN_NODE_REASON_PREEMPTION \\\n",
        "      --reason-message \"$msg\" ${left:+--deadline-remaining-seconds \"$left\"}; then\n",
        "    echo \"rayscale: node $node draining (${left:-no} s left)\"; exit 0\n",
        "  fi\n",
        "  echo 'rayscale: the drain was not accepted (retried)'\n",
        "done\n",
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Runs the embedded helper's `parse` on `body`: its line, or `None` (exit 1).
    fn parse(kind: &str, me: &str, body: &str) -> Option<String> {
        let dir = std::env::temp_dir().join(format!("rayscale-notice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let py = dir.join("notice.py");
        std::fs::write(&py, NOTICE_PY).expect("write");
        let python = std::env::var("RAYSCALE_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut child = Command::new(python)
            .arg(&py)
            .args(["parse", kind, me])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(body.as_bytes())
            .expect("body");
        let out = child.wait_with_output().expect("done");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    #[test]
    fn each_clouds_notice_format_is_read() {
        // AWS: the deadline is the notice's time.
        assert_eq!(
            parse(
                "aws-action",
                "",
                r#"{"action": "terminate", "time": "2026-12-02T12:03:10Z"}"#
            )
            .as_deref(),
            Some(
                "aws-spot-interruption 1796212990 AWS spot interruption: terminate at 2026-12-02T12:03:10Z"
            )
        );
        assert_eq!(
            parse(
                "aws-rebalance",
                "",
                r#"{"noticeTime": "2026-12-02T12:00:00Z"}"#
            )
            .as_deref(),
            Some("aws-rebalance 0 AWS rebalance recommendation at 2026-12-02T12:00:00Z")
        );
        // GCE: TRUE, with about 30 s; FALSE is no notice.
        let g = parse("gce-preempted", "", "TRUE").expect("a notice");
        let mut w = g.splitn(3, ' ');
        assert_eq!(w.next(), Some("gce-preempted"));
        let deadline: i64 = w.next().and_then(|d| d.parse().ok()).expect("a deadline");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        assert!(
            (now + 25..=now + 35).contains(&deadline),
            "{deadline} vs {now}"
        );
        assert_eq!(parse("gce-preempted", "", "FALSE"), None);
        assert!(parse("gce-maintenance", "", "TERMINATE_ON_HOST_MAINTENANCE").is_some());
        assert_eq!(
            parse("gce-maintenance", "", "MIGRATE_ON_HOST_MAINTENANCE"),
            None
        );
        // Azure: a Preempt event naming this VM; others' and other kinds are not.
        let doc = r#"{"DocumentIncarnation": 2, "Events": [
            {"EventId": "A", "EventType": "Freeze", "Resources": ["vm1"]},
            {"EventId": "B", "EventType": "Preempt", "ResourceType": "VirtualMachine",
             "Resources": ["vm1"], "EventStatus": "Scheduled",
             "NotBefore": "Wed, 02 Dec 2026 12:03:10 GMT", "DurationInSeconds": -1,
             "EventSource": "Platform"}]}"#;
        assert_eq!(
            parse("azure", "vm1", doc).as_deref(),
            Some(
                "azure-preempt 1796212990 Azure Preempt event B, not before Wed, 02 Dec 2026 12:03:10 GMT"
            )
        );
        assert_eq!(parse("azure", "vm2", doc), None, "another VM's event");
        assert_eq!(parse("azure", "vm1", r#"{"Events": []}"#), None);
        // Garbage is no notice (and no crash).
        assert_eq!(parse("aws-action", "", "<html>"), None);
        assert_eq!(
            parse(
                "azure",
                "vm1",
                r#"{"Events": [{"EventType": "Preempt", "NotBefore": "soon"}]}"#
            ),
            None
        );
    }

    #[test]
    fn every_clouds_watcher_is_valid_bash() {
        for cloud in [NoticeCloud::Aws, NoticeCloud::Gce, NoticeCloud::Azure] {
            let w = render(&Watcher {
                cloud,
                settings: PreemptionSettings::default(),
                key_prefix: "notices/c/".into(),
                gcs: "$RAY_HEAD_IP:6379",
            });
            let out = Command::new("bash")
                .args(["-n", "-c", &w])
                .output()
                .expect("bash");
            assert!(
                out.status.success(),
                "{cloud:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(w.contains(NOTICE_PY));
        }
    }

    #[test]
    fn the_helper_is_written_into_a_fresh_private_directory_not_a_fixed_tmp_path() {
        let w = render(&Watcher {
            cloud: NoticeCloud::Aws,
            settings: PreemptionSettings::default(),
            key_prefix: "notices/c/".into(),
            gcs: "$RAY_HEAD_IP:6379",
        });
        // The script up to the helper written (what runs before the polling loop).
        let end = w.find("notice() {").expect("the poll function");
        let tmp = std::env::temp_dir().join(format!("rayscale-np-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("tmp");
        // Another local user made the old fixed path beforehand (a link elsewhere).
        let planted = tmp.join("rayscale-notice-i-1.py");
        std::fs::write(&planted, "planted").expect("plant");
        let run = || {
            let out = Command::new("bash")
                .args(["-c", &format!("{}\necho \"$NP\"", &w[..end])])
                .env("TMPDIR", &tmp)
                .env("RAY_CLOUD_INSTANCE_ID", "i-1")
                .output()
                .expect("bash");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        };
        let (a, b) = (run(), run());
        assert_ne!(a, b, "a fresh directory each time");
        for p in [&a, &b] {
            use std::os::unix::fs::PermissionsExt;
            let dir = p.parent().expect("dir");
            assert!(dir.starts_with(&tmp) && *p != planted, "{p:?}");
            let mode = std::fs::metadata(dir).expect("dir").permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{dir:?}");
            assert_eq!(std::fs::read_to_string(p).expect("helper"), NOTICE_PY);
        }
        assert_eq!(
            std::fs::read_to_string(&planted).expect("planted"),
            "planted"
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn the_gcs_address_is_the_workers_own() {
        let s = |c: &str| vec![c.to_string()];
        assert_eq!(
            worker_gcs_address(&s(
                "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6380 --x"
            )),
            "$RAY_HEAD_IP:6380"
        );
        assert_eq!(
            worker_gcs_address(&s("ray start --address 10.0.0.1:7000")),
            "10.0.0.1:7000"
        );
        assert_eq!(
            worker_gcs_address(&s("ray start --address=\"$(cat f)\"")),
            "$RAY_HEAD_IP:6379"
        );
        assert_eq!(worker_gcs_address(&[]), "$RAY_HEAD_IP:6379");
    }
}
