//! Ray's autoscaler event file: `<logs dir>/events/event_AUTOSCALER.log`, one JSON
//! `Event` per line as Ray's event logger writes it. Ray's log monitor publishes the file
//! to every job's console ("(autoscaler +2s) Adding 3 node(s) of type cpu4.") and its
//! dashboard's event module lists it. The lines themselves are worded by
//! `rayscale_core::telemetry::events`.
//!
//! The file is rotated as Ray rotates its logs (`RotatingFileHandler`): past
//! `RAY_ROTATION_MAX_BYTES` (Ray's default, 512 MiB) it becomes `.1` (the older ones
//! `.2` ... up to `RAY_ROTATION_BACKUP_COUNT`, default 5, the oldest removed) and a new
//! file is started.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use rayscale_core::driver::{IterationView, Observer};
use rayscale_core::expander::SeededRng;
use rayscale_core::telemetry::events::{Event, Said, Severity, infeasible_events, scaling_events};

/// Ray's `LOGGING_ROTATE_BYTES` and `LOGGING_ROTATE_BACKUP_COUNT`.
const ROTATE_BYTES: u64 = 512 * 1024 * 1024;
const ROTATE_BACKUPS: u32 = 5;

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

struct Inner {
    file: std::fs::File,
    /// Bytes in the current file.
    size: u64,
    rng: SeededRng,
    said: Said,
    /// The explanation's reasons in force (key -> line).
    why: std::collections::BTreeMap<String, String>,
    /// What was said of autostop's current quiet period.
    autostop: rayscale_core::reconciler::AutostopSaid,
}

/// Appends the loop's events to Ray's event file.
pub struct EventLog {
    path: PathBuf,
    hostname: String,
    pid: u32,
    max_bytes: u64,
    backups: u32,
    inner: Mutex<Inner>,
}

impl EventLog {
    /// Opens (creating) `<logs_dir>/events/event_AUTOSCALER.log` for appending; `seed`
    /// seeds the event ids.
    pub fn open(logs_dir: &Path, hostname: &str, seed: u64) -> Result<Self> {
        let dir = logs_dir.join("events");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join("event_AUTOSCALER.log");
        let file = Self::append(&path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(EventLog {
            path,
            hostname: hostname.to_string(),
            pid: std::process::id(),
            max_bytes: env_num("RAY_ROTATION_MAX_BYTES", ROTATE_BYTES),
            backups: env_num("RAY_ROTATION_BACKUP_COUNT", ROTATE_BACKUPS),
            inner: Mutex::new(Inner {
                file,
                size,
                rng: SeededRng::new(seed),
                said: Said::default(),
                why: Default::default(),
                autostop: Default::default(),
            }),
        })
    }

    fn append(path: &Path) -> Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))
    }

    /// Moves the file to `.1` (and older ones one up, the oldest removed), and starts a
    /// new one. With no backups (0), the file is only started anew.
    fn rotate(&self, inner: &mut Inner) -> Result<()> {
        let numbered = |n: u32| PathBuf::from(format!("{}.{n}", self.path.display()));
        if self.backups > 0 {
            let _ = std::fs::remove_file(numbered(self.backups));
            for n in (1..self.backups).rev() {
                let from = numbered(n);
                if from.exists() {
                    std::fs::rename(&from, numbered(n + 1))
                        .with_context(|| format!("cannot rename {}", from.display()))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))
                .with_context(|| format!("cannot rename {}", self.path.display()))?;
        } else {
            std::fs::remove_file(&self.path)
                .with_context(|| format!("cannot remove {}", self.path.display()))?;
        }
        inner.file = Self::append(&self.path)?;
        inner.size = 0;
        Ok(())
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line of Ray's format (field names and order of Ray's JSON; the timestamp in
    /// seconds, as a string, as protobuf's JSON writes an int64).
    fn line(&self, rng: &mut SeededRng, e: &Event, now_s: i64) -> String {
        const HEX: &[u8] = b"0123456789abcdefABCDEF";
        let id: String = (0..36).map(|_| HEX[rng.below(HEX.len())] as char).collect();
        let v = serde_json::json!({
            "event_id": id,
            "source_type": "AUTOSCALER",
            "source_hostname": self.hostname,
            "source_pid": self.pid,
            "severity": e.severity.name(),
            "message": e.message,
            "timestamp": now_s.to_string(),
            "label": "",
            "custom_fields": {},
        });
        v.to_string()
    }

    fn write(&self, events: &[Event], now_ns: i64) {
        if events.is_empty() {
            return;
        }
        let mut inner = super::lock(&self.inner);
        let now_s = now_ns.div_euclid(1_000_000_000);
        let mut text = String::new();
        for e in events {
            text.push_str(&self.line(&mut inner.rng, e, now_s));
            text.push('\n');
        }
        if self.max_bytes > 0
            && inner.size.saturating_add(text.len() as u64) > self.max_bytes
            && let Err(e) = self.rotate(&mut inner)
        {
            tracing::warn!("cannot rotate {}: {e:#}", self.path.display());
        }
        // One write per iteration: the log monitor never reads half a batch of lines.
        match inner.file.write_all(text.as_bytes()) {
            Ok(()) => inner.size = inner.size.saturating_add(text.len() as u64),
            Err(e) => tracing::warn!("cannot write {}: {e}", self.path.display()),
        }
    }

    /// The events of an iteration: its scaling lines, and the infeasible-demand warnings
    /// that started with it.
    pub fn events_of(&self, v: &IterationView<'_>) -> Vec<Event> {
        let Some(d) = &v.outcome.decision else {
            return Vec::new();
        };
        let mut out = scaling_events(d);
        let report = &v.outcome.report;
        let warnings = infeasible_events(
            &d.infeasible_requests,
            &report.infeasible_gangs,
            &report.infeasible_constraints,
        );
        let mut inner = super::lock(&self.inner);
        out.extend(inner.said.new_ones(warnings));
        // A node preempted (or drained by an operator), once, when it is first seen.
        out.extend(
            v.outcome
                .drained_outside
                .iter()
                .filter(|d| d.new)
                .map(|d| Event {
                    severity: Severity::Warning,
                    message: d.event_line(),
                }),
        );
        // A reason for pending demand or a kept node: a line when it starts and one
        // when it ends, as debug detail (consoles show only Ray's own lines by default).
        if let Some(e) = &v.outcome.explanation {
            let now = e.event_keys();
            for (k, line) in &now {
                if !inner.why.contains_key(k) {
                    out.push(Event {
                        severity: Severity::Debug,
                        message: format!("{}.", capitalized(line)),
                    });
                }
            }
            for (k, line) in &inner.why {
                if !now.contains_key(k) {
                    out.push(Event {
                        severity: Severity::Debug,
                        message: format!("No longer: {line}."),
                    });
                }
            }
            inner.why = now;
        }
        // Autostop: ten minutes before, when it stops, and work arriving after a warning.
        if let Some(a) = &v.outcome.autostop {
            let lines = a.lines(&mut inner.autostop, v.now_ns);
            out.extend(lines.into_iter().map(|message| Event {
                severity: Severity::Warning,
                message,
            }));
        }
        // Atomic gangs released or set aside (each said once: it happens once).
        out.extend(v.outcome.gang_lines.iter().map(|l| Event {
            severity: Severity::Warning,
            message: format!("{}.", capitalized(l)),
        }));
        // Advice the watchers were told not to drain on, once each.
        out.extend(v.advisories.iter().map(|n| Event {
            severity: Severity::Info,
            message: format!(
                "Instance {}: {}: kept running (rayscale.preemption.on_rebalance: ignore).",
                n.cloud_instance_id,
                if n.message.is_empty() {
                    "rebalance recommendation"
                } else {
                    n.message.as_str()
                }
            ),
        }));
        out
    }
}

/// `line` with its first letter in capitals.
fn capitalized(line: &str) -> String {
    let mut c = line.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

impl Observer for EventLog {
    fn iteration(&self, v: &IterationView<'_>) {
        let events = self.events_of(v);
        self.write(&events, v.now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_file_is_rotated_as_ray_rotates_its_logs() {
        let dir = std::env::temp_dir().join(format!("rayscale-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut log = EventLog::open(&dir, "h", 1).expect("open");
        (log.max_bytes, log.backups) = (1000, 2);
        let e = Event {
            severity: Severity::Info,
            message: "Adding 1 node(s) of type cpu4.".into(),
        };
        for i in 0..40 {
            log.write(std::slice::from_ref(&e), i * 1_000_000_000);
        }
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let path = log.path().to_path_buf();
        let numbered = |n: u32| PathBuf::from(format!("{}.{n}", path.display()));
        assert!(size(&path) <= 1000, "{}", size(&path));
        assert!(size(&numbered(1)) > 0 && size(&numbered(1)) <= 1000);
        assert!(size(&numbered(2)) > 0);
        assert!(!numbered(3).exists(), "only two backups are kept");
        // Every file holds whole lines.
        for p in [path.clone(), numbered(1), numbered(2)] {
            let text = std::fs::read_to_string(&p).expect("read");
            assert!(text.ends_with('\n') && text.lines().all(|l| l.ends_with('}')));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
