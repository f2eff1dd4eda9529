//! Ray's `file_mounts` and `cluster_synced_files` on the nodes rayscale boots (AWS, GCP,
//! Azure). Ray's head rsyncs them to each worker over SSH before its setup commands
//! (`NodeUpdater.sync_file_mounts`); rayscale boots workers without SSH, so the head's
//! `rayscale run` serves its copies over HTTP to the cluster's nodes (with a token the
//! workers' boot scripts carry) and each worker's boot fetches them first, before its
//! `initialization_commands`, as Ray orders it.
//!
//! On the head a mount is at its remote path (Ray's `ray up` copies each `file_mounts`
//! entry there and rewrites the head's config to `{remote: remote}`), and a
//! `cluster_synced_files` entry is a path on the head by definition; a worker gets each at
//! the same remote path, `~` being its SSH user's home. A directory goes as a tar of
//! exactly the paths Ray's rsync would send under `rsync_exclude` and `rsync_filter`
//! ([`super::rsync_filter`]).
//!
//! The head gets its copies from the machine that runs `rayscale up`, as `ray up` gives
//! them: over SSH with the YAML's `auth`, with rsync and Ray's filters, before the head's
//! `initialization_commands` (its boot waits for [`COPIED_MARK`]; see [`head_copies`]).
//!
//! With `file_mounts_sync_continuously`, as Ray's monitor re-syncs a node whose mounts'
//! contents changed on the head, each worker keeps asking the head's server for the state
//! of its copies ([`STATE_PATH`]) every [`SYNC_INTERVAL_S`] and fetches them all again
//! when it changed (without running any setup again, as Ray's updater does then).
//!
//! This module is pure: what to copy, serve and fetch, from the config. The copy and the
//! server are the binary's (`bin/src/ssh.rs`, `bin/src/mounts.rs`), the wait and the fetch
//! are steps of the boot script (`boot`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::CoreError;

/// Where `rayscale up` leaves its mark on the head (under the SSH user's home) once it has
/// copied the file mounts there. A head launched with `file_mounts` waits for it before
/// its `initialization_commands`, as Ray's node updater syncs the mounts before them.
pub const COPIED_MARK: &str = ".rayscale/file-mounts.copied";

/// Where the mark is for a head whose copies go under `prefix` (a container head's host
/// directory, [`head_location`]): beside them, so that a head whose `/tmp` was emptied (a
/// reboot) waits for `up` again rather than start its container without them. Without a
/// prefix: `~/`[`COPIED_MARK`].
pub fn copied_mark(prefix: Option<&str>) -> String {
    match prefix {
        Some(p) => format!("{}/.rayscale-file-mounts.copied", p.trim_end_matches('/')),
        None => format!("~/{COPIED_MARK}"),
    }
}

/// Ray's own bootstrap files, which `ray up` adds to a head's `file_mounts` (a YAML taken
/// from a Ray head has them): the head's boot writes the config itself, so they are not
/// copied, nor bind-mounted into a container (Ray copies them in).
pub const RAY_BOOTSTRAP_FILES: [&str; 2] =
    ["~/ray_bootstrap_config.yaml", "~/ray_bootstrap_key.pem"];

/// What `rayscale up` copies to the head, as `ray up`'s node updater does: each
/// `file_mounts` entry as `(remote path, local path)`, sorted by remote path, without
/// Ray's bootstrap files. Empty when there is nothing to copy (then the head's boot does
/// not wait). A local path that is not a string is an error naming its key.
pub fn head_copies(raw: &Value) -> Result<Vec<(String, String)>, CoreError> {
    let Some(mounts) = raw.get("file_mounts") else {
        return Ok(Vec::new());
    };
    let mounts = match mounts {
        Value::Null => return Ok(Vec::new()),
        Value::Object(m) => m,
        other => {
            return Err(CoreError::invalid(
                "file_mounts",
                format!("expected a mapping of remote path to local path, got {other}"),
            ));
        }
    };
    let mut out = Vec::new();
    for (remote, local) in mounts {
        if remote.trim().is_empty() || RAY_BOOTSTRAP_FILES.contains(&remote.as_str()) {
            continue;
        }
        match local {
            Value::String(l) if !l.trim().is_empty() => out.push((remote.clone(), l.clone())),
            other => {
                return Err(CoreError::invalid(
                    format!("file_mounts.{remote}"),
                    format!("expected a local path, got {other}"),
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The head's port for the mounts server unless `rayscale run --file-mounts-port` says
/// otherwise (Ray's cluster security group lets the cluster's nodes reach every port).
pub const DEFAULT_PORT: u16 = 8079;

/// The server's path answering the state of the head's copies: one hex digest of every
/// mount's tree (paths, sizes, modification times, modes), which changes when any does.
pub const STATE_PATH: &str = "/file-mounts-state";

/// How often a worker with `file_mounts_sync_continuously` asks for that state (Ray's
/// monitor updates every 5 s).
pub const SYNC_INTERVAL_S: u32 = 5;

/// Whether the config asks for `file_mounts_sync_continuously`.
pub fn sync_continuously(raw: &Value) -> bool {
    raw.get("file_mounts_sync_continuously") == Some(&Value::Bool(true))
}

/// The server's answer header saying whether a mount is a `dir` or a `file`.
pub const KIND_HEADER: &str = "x-rayscale-mount-kind";
/// The server's answer header giving a file mount's permission bits (octal).
pub const MODE_HEADER: &str = "x-rayscale-mount-mode";

/// Where a worker's boot fetches the mounts: the head's server (at `RAY_HEAD_IP`) and its
/// token. Set by `rayscale run` on the head when it serves them; never read from YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountsSource {
    /// The head's port.
    pub port: u16,
    /// The bearer token the server asks for (hex).
    pub token: String,
}

/// The paths a worker gets, in order: `file_mounts`' remote paths (sorted), then
/// `cluster_synced_files` not already among them. The server's
/// `/file-mounts/<hex of the path>` answers a directory as a gzipped tar
/// of its contents ([`KIND_HEADER`] `dir`) and a file as its bytes (`file`, with its
/// permission bits in [`MODE_HEADER`]).
pub fn mount_paths(raw: &Value) -> Vec<String> {
    let mut out: Vec<String> = raw
        .get("file_mounts")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    out.sort();
    for p in raw
        .get("cluster_synced_files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !out.iter().any(|o| o == p) {
            out.push(p.to_string());
        }
    }
    out.retain(|p| !p.trim().is_empty());
    out
}

/// Where the head keeps the mount at `remote`: at that path (`~` its SSH user's
/// `home`), or, when its Ray runs in a container, under the host directory Ray
/// bind-mounts into the container (`host_prefix`, Ray's `/tmp/ray_tmp_mount/<cluster>`),
/// as Ray's `DockerCommandRunner` puts file mounts. `rayscale up` copies there and the
/// head's server reads from there.
pub fn head_location(remote: &str, host_prefix: Option<&str>) -> String {
    match host_prefix {
        Some(prefix) => format!("{prefix}/{}", remote.trim_start_matches('/')),
        None => remote.to_string(),
    }
}

/// The hex of a remote path, as the boot script puts it in the URL.
pub fn hex_of(path: &str) -> String {
    path.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The path back from [`hex_of`]'s hex (`None`: not such hex).
pub fn from_hex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

/// `path` with a leading `~` as `home` (what the head's server reads).
pub fn expand_home(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_the_mounts_then_the_synced_files() {
        let raw = json!({
            "file_mounts": {"~/z": "./z", "/etc/a.conf": "./a.conf", "~/code": "."},
            "cluster_synced_files": ["/data/x", "~/code", ""],
        });
        assert_eq!(
            mount_paths(&raw),
            ["/etc/a.conf", "~/code", "~/z", "/data/x"]
        );
        assert!(mount_paths(&json!({"file_mounts": {}})).is_empty());
        assert!(mount_paths(&json!({})).is_empty());
    }

    #[test]
    fn the_head_gets_each_file_mount_but_rays_bootstrap_files() {
        let raw = json!({
            "file_mounts": {
                "~/z": "./z", "/etc/a.conf": "~/a.conf",
                "~/ray_bootstrap_config.yaml": "/tmp/c.yaml",
                "~/ray_bootstrap_key.pem": "~/.ssh/k.pem",
            },
            "cluster_synced_files": ["/data/x"],
        });
        let copies = head_copies(&raw).unwrap();
        assert_eq!(
            copies,
            [
                ("/etc/a.conf".to_string(), "~/a.conf".to_string()),
                ("~/z".to_string(), "./z".to_string())
            ]
        );
        assert!(head_copies(&json!({})).unwrap().is_empty());
        assert!(
            head_copies(&json!({"file_mounts": null}))
                .unwrap()
                .is_empty()
        );
        assert!(head_copies(&json!({"file_mounts": {}})).unwrap().is_empty());
        let e = head_copies(&json!({"file_mounts": {"~/x": 3}})).unwrap_err();
        assert!(e.to_string().contains("file_mounts.~/x"), "{e}");
        let e = head_copies(&json!({"file_mounts": ["~/x"]})).unwrap_err();
        assert!(e.to_string().contains("file_mounts"), "{e}");
    }

    #[test]
    fn a_containers_mounts_live_under_the_host_prefix() {
        assert_eq!(head_location("~/code", None), "~/code");
        let prefix = Some("/tmp/ray_tmp_mount/c");
        assert_eq!(
            head_location("~/code", prefix),
            "/tmp/ray_tmp_mount/c/~/code"
        );
        assert_eq!(
            head_location("/etc/a", prefix),
            "/tmp/ray_tmp_mount/c/etc/a"
        );
    }

    #[test]
    fn paths_go_through_hex_and_back() {
        for p in ["~/code", "/etc/a b.conf", "~/ü"] {
            assert_eq!(from_hex(&hex_of(p)).as_deref(), Some(p));
        }
        assert_eq!(from_hex("7"), None);
        assert_eq!(from_hex("zz"), None);
    }

    #[test]
    fn home_is_expanded_only_at_the_start() {
        let home = Path::new("/home/u");
        assert_eq!(expand_home("~/code", home), Path::new("/home/u/code"));
        assert_eq!(expand_home("~", home), Path::new("/home/u"));
        assert_eq!(expand_home("/etc/x", home), Path::new("/etc/x"));
        assert_eq!(expand_home("a/~/b", home), Path::new("a/~/b"));
    }
}
