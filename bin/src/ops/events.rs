//! Ray's autoscaler event file: `<logs dir>/events/event_AUTOSCALER.log`, one JSON
//! `Event` per line as Ray's event logger writes it. Ray's log monitor publishes the file
//! to every job's console ("(autoscaler +2s) Adding 3 node(s) of type cpu4.") and its
//! dashboard's event module lists it. The lines themselves are worded by
//! `rayscale_core::telemetry::events`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use rayscale_core::driver::{IterationView, Observer};
use rayscale_core::expander::SeededRng;
use rayscale_core::telemetry::events::{Event, Said, infeasible_events, scaling_events};

struct Inner {
    file: std::fs::File,
    rng: SeededRng,
    said: Said,
}

/// Appends the loop's events to Ray's event file.
pub struct EventLog {
    path: PathBuf,
    hostname: String,
    pid: u32,
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
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(EventLog {
            path,
            hostname: hostname.to_string(),
            pid: std::process::id(),
            inner: Mutex::new(Inner {
                file,
                rng: SeededRng::new(seed),
                said: Said::default(),
            }),
        })
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
        // One write per iteration: the log monitor never reads half a batch of lines.
        if let Err(e) = inner.file.write_all(text.as_bytes()) {
            tracing::warn!("cannot write {}: {e}", self.path.display());
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
        out
    }
}

impl Observer for EventLog {
    fn iteration(&self, v: &IterationView<'_>) {
        let events = self.events_of(v);
        self.write(&events, v.now_ns);
    }
}
