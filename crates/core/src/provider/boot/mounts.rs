//! The file mounts' steps of the boot script: a worker fetches the head's copies before
//! its setup (once, or following them with `file_mounts_sync_continuously`); a head
//! launched by `rayscale up` waits for `up` to copy them (see `config::mounts`).

use serde_json::Value;

use super::docker::{self, docker_settings};
use super::quote;
use crate::CoreError;
use crate::config::ClusterConfig;

/// Where the head of `config` keeps its file mounts on the host when its Ray runs in a
/// container (Ray's host mount location, which its container bind-mounts), else `None`
/// (at their remote paths); see [`head_location`](crate::config::mounts::head_location).
pub fn head_mounts_prefix(config: &ClusterConfig) -> Result<Option<String>, CoreError> {
    let head = config.head_node_type.as_deref().unwrap_or_default();
    let type_raw = config
        .raw
        .get("available_node_types")
        .and_then(|n| n.get(head));
    let docker = docker_settings(
        config.raw.get("docker"),
        type_raw.and_then(|v| v.get("docker")),
        true,
    )?;
    Ok(docker.map(|_| docker::host_mount_prefix(&config.cluster_name)))
}

/// The head's file-mounts step: wait until `rayscale up` has copied them here (its mark,
/// [`COPIED_MARK`](crate::config::mounts::COPIED_MARK), in the SSH user's home, looked up
/// on each pass: `SSH_USER`'s when that user exists and is not the one running, else
/// `HOME`), saying so once a minute. No deadline: as with Ray's `ray up`, a head does not
/// go on to its setup without the mounts; `rayscale up` run again copies them (or
/// `rayscale down` ends it).
pub(super) fn wait_for_copies(prefix: Option<&str>) -> Vec<String> {
    let shown = crate::config::mounts::copied_mark(prefix);
    // `~` is the SSH user's home, looked up on each pass; a container head's path holds
    // the cluster name, quoted.
    let mark = match shown.strip_prefix("~/") {
        Some(rest) => format!("\"$(mark_home)\"/{}", quote(rest)),
        None => quote(&shown),
    };
    let shown = quote(&shown);
    vec![
        "mark_home() {".to_string(),
        "  if [ -n \"${SSH_USER:-}\" ] && [ \"$(id -un)\" != \"$SSH_USER\" ] && id \"$SSH_USER\" >/dev/null 2>&1; then".to_string(),
        "    getent passwd \"$SSH_USER\" | cut -d: -f6".to_string(),
        "  else".to_string(),
        "    echo \"${HOME:-/root}\"".to_string(),
        "  fi".to_string(),
        "}".to_string(),
        "n=0".to_string(),
        format!("while [ ! -e {mark} ]; do"),
        format!(
            "  if [ $((n % 60)) -eq 0 ]; then echo \"rayscale: waiting for rayscale up to copy the file mounts here (\"{shown}\")\"; fi"
        ),
        "  n=$((n + 1)); sleep 1".to_string(),
        "done".to_string(),
        "echo \"rayscale: the file mounts are here\"".to_string(),
    ]
}

/// The commands of a worker's file-mounts step: each of the head's mounts fetched from
/// its server into the same path here (`~` the SSH user's home), or with a container
/// under `host_prefix` (Ray's host mount location, bind-mounted into it): a directory's tar
/// unpacked into it (over what is there, as rsync copies), a file put in place with its
/// mode; a mount the head does not serve fails the boot, with the head's reason. With
/// `file_mounts_sync_continuously`, the state of the head's copies is read first and a
/// loop left running in the background fetches them all again whenever it changes (a
/// failed pass is tried again at the next change check; its lines go to
/// `~/.rayscale/file-mounts-sync.log`).
pub fn worker_mount_commands(
    raw: &Value,
    src: &crate::config::mounts::MountsSource,
    host_prefix: Option<&str>,
) -> Vec<String> {
    use crate::config::mounts::{
        KIND_HEADER, MODE_HEADER, STATE_PATH, SYNC_INTERVAL_S, hex_of, mount_paths,
        sync_continuously,
    };
    let paths = mount_paths(raw);
    if paths.is_empty() {
        return Vec::new();
    }
    let function = [
        "fetch_mount() {",
        "  local n=\"$1\" dest=\"$3\" tmp code",
        "  case \"$dest\" in \"~\") dest=\"$HOME\" ;; \"~/\"*) dest=\"$HOME/${dest#\"~/\"}\" ;; esac",
        // Each step checked: `set -e` does not reach into a function called from a
        // condition (the sync loop's `if fetch_all`).
        "  tmp=\"$(mktemp -d)\" || return 1",
        "  code=\"$(curl -sS --retry 10 --retry-connrefused --retry-delay 3 -H \"Authorization: Bearer $MOUNTS_TOKEN\" \\",
        "    -D \"$tmp/headers\" -o \"$tmp/body\" -w '%{http_code}' \"http://$RAY_HEAD_IP:$MOUNTS_PORT/file-mounts/$n\")\" || code=000",
        "  if [ \"$code\" != 200 ]; then",
        "    echo \"rayscale: file mount $2: the head ($RAY_HEAD_IP:$MOUNTS_PORT) answered $code: $(head -c 400 \"$tmp/body\" 2>/dev/null)\" >&2",
        "    rm -rf \"$tmp\"; return 1",
        "  fi",
        "  if grep -qi '^KIND: *dir' \"$tmp/headers\"; then",
        "    if ! { mkdir -p \"$dest\" && tar -xzf \"$tmp/body\" -C \"$dest\"; }; then",
        "      echo \"rayscale: file mount $2: cannot unpack it into $dest\" >&2; rm -rf \"$tmp\"; return 1",
        "    fi",
        "  else",
        "    chmod \"$(sed -n 's/^MODE: *\\([0-7]*\\).*/\\1/Ip' \"$tmp/headers\" | head -n 1)\" \"$tmp/body\" 2>/dev/null || true",
        "    if ! { mkdir -p \"$(dirname \"$dest\")\" && mv -f \"$tmp/body\" \"$dest\"; }; then",
        "      echo \"rayscale: file mount $2: cannot put it at $dest\" >&2; rm -rf \"$tmp\"; return 1",
        "    fi",
        "  fi",
        "  rm -rf \"$tmp\"",
        "  echo \"rayscale: file mount $2 fetched from the head\"",
        "}",
    ]
    .join("\n")
    .replace("KIND", KIND_HEADER)
    .replace("MODE", MODE_HEADER);
    let mut out = vec![
        format!("MOUNTS_PORT={}", src.port),
        format!("MOUNTS_TOKEN={}", quote(&src.token)),
        function,
    ];
    let fetches: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let dest = match host_prefix {
                Some(prefix) => format!("{prefix}/{p}"),
                None => p.clone(),
            };
            (
                hex_of(p),
                format!("fetch_mount {} {} {}", hex_of(p), quote(p), quote(&dest)),
            )
        })
        .collect();
    if !sync_continuously(raw) {
        out.extend(fetches.into_iter().map(|(_, f)| f));
        return out;
    }
    // Each mount's state (`<hex of its path> <digest>` lines) is read before the first
    // fetch, so a change made meanwhile is fetched again; then only a mount whose state
    // changed is fetched again, and a failed one is tried at the next pass, the passes
    // spaced out (up to a minute) while one fails.
    out.push(format!(
        "mounts_state() {{ curl -fsS --max-time 30 -H \"Authorization: Bearer $MOUNTS_TOKEN\" \"http://$RAY_HEAD_IP:$MOUNTS_PORT{STATE_PATH}\" 2>/dev/null || true; }}"
    ));
    out.push("MOUNTS_STATE_DIR=\"$HOME/.rayscale/file-mounts-state\"".to_string());
    out.push("mkdir -p \"$MOUNTS_STATE_DIR\"".to_string());
    out.push("mounts_state >\"$MOUNTS_STATE_DIR/first\"".to_string());
    out.push("fetch_one() {".to_string());
    out.push("  case \"$1\" in".to_string());
    for (hex, f) in &fetches {
        out.push(format!("    {hex}) {f} ;;"));
    }
    out.push("    *) return 0 ;;".to_string());
    out.push("  esac".to_string());
    out.push("}".to_string());
    out.extend(fetches.iter().map(|(_, f)| f.clone()));
    out.push(
        "while read -r n d; do [ -n \"$n\" ] && [ -n \"$d\" ] && printf '%s\\n' \"$d\" >\"$MOUNTS_STATE_DIR/$n\"; done <\"$MOUNTS_STATE_DIR/first\""
            .to_string(),
    );
    out.push(format!(
        "( pause={SYNC_INTERVAL_S}; while sleep $((pause + RANDOM % 3)); do failed=0; \
         while read -r n d; do \
         if [ -z \"$n\" ] || [ -z \"$d\" ] || [ \"$d\" = \"$(cat \"$MOUNTS_STATE_DIR/$n\" 2>/dev/null)\" ]; then continue; fi; \
         echo \"rayscale: a file mount changed on the head ($(date -u +%FT%TZ)); fetching it again\"; \
         if fetch_one \"$n\"; then printf '%s\\n' \"$d\" >\"$MOUNTS_STATE_DIR/$n\"; else failed=1; fi; \
         done < <(mounts_state); \
         if [ \"$failed\" = 1 ]; then pause=$((pause * 2 > 60 ? 60 : pause * 2)); else pause={SYNC_INTERVAL_S}; fi; \
         done ) </dev/null >>~/.rayscale/file-mounts-sync.log 2>&1 &"
    ));
    out.push(
        "echo \"rayscale: the file mounts follow the head's copies (file_mounts_sync_continuously)\""
            .to_string(),
    );
    out
}
