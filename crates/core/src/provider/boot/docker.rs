//! A node type's `docker:` block as the boot script runs it: the role's image and
//! options, and the container started as Ray's `DockerCommandRunner` starts it.

use serde_json::Value;

use super::{commands, quote};
use crate::CoreError;

/// A `docker:` block for one role (head or worker), with the node type's overrides
/// applied as Ray applies them (the type's `docker:` keys over the cluster's).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Docker {
    pub(super) image: String,
    pub(super) container: String,
    pub(super) pull: bool,
    pub(super) run_options: Vec<String>,
    /// `docker` or, with `use_podman`, `podman`.
    pub(super) command: &'static str,
    /// Add `--shm-size` from the node's available memory (unless the options set one).
    pub(super) shm_detection: bool,
    /// Add `--runtime=nvidia` when the NVIDIA container runtime and a GPU are there.
    pub(super) runtime_detection: bool,
    /// The file mounts bind-mounted into the container, as Ray's `docker_start_cmds`
    /// mounts them: (the host path they were fetched to, the remote path; `~` is the
    /// image's `HOME`).
    pub(super) mounts: Vec<(String, String)>,
}

/// Where a node's file mounts go on the host when they are bind-mounted into a
/// container (Ray's `get_docker_host_mount_location`, the remote path appended as is).
pub(super) fn host_mount_prefix(cluster: &str) -> String {
    format!("/tmp/ray_tmp_mount/{cluster}")
}

/// The object store's share of available memory and its cap, Ray 2.60's defaults
/// (`ray_constants.py` `DEFAULT_OBJECT_STORE_MEMORY_PROPORTION` and `..._MAX_MEMORY_BYTES`),
/// which Ray's launcher sizes `/dev/shm` from, 10% over.
const SHM_SHARE: f64 = 0.3 * 1.1;
const SHM_MAX_BYTES: u64 = 200_000_000_000;

impl Docker {
    /// The script lines that start the container, as Ray's `DockerCommandRunner.run_init`
    /// does: the user's options, then `--shm-size` from `MemAvailable`, then
    /// `--runtime=nvidia` when `docker info` lists the NVIDIA runtime and `nvidia-smi`
    /// works. Ray detects both over SSH before it starts the container; here the node
    /// does it at boot.
    pub(super) fn start(&self) -> String {
        let mut s = format!(
            "DOCKER={}\nCONTAINER={}\nDOCKER_DETECTED=\n",
            self.command,
            quote(&self.container)
        );
        if self.pull {
            s.push_str(&format!("\"$DOCKER\" pull {}\n", quote(&self.image)));
        }
        if self.shm_detection {
            s.push_str(&format!(
                "SHM_BYTES=\"$(awk '/^MemAvailable:/ {{v = $2 * 1024 * {SHM_SHARE}; \
                 if (v > {SHM_MAX_BYTES}) v = {SHM_MAX_BYTES}; printf \"%d\", v}}' \
                 \"${{RAYSCALE_MEMINFO:-/proc/meminfo}}\" 2>/dev/null || true)\"\n\
                 if [ -n \"$SHM_BYTES\" ]; then DOCKER_DETECTED=\"--shm-size=${{SHM_BYTES}}b\"; fi\n"
            ));
        }
        if self.runtime_detection {
            s.push_str(
                "if \"$DOCKER\" info -f '{{.Runtimes}}' 2>/dev/null | grep -q nvidia-container-runtime \
                 && nvidia-smi >/dev/null 2>&1; then\n  \
                 DOCKER_DETECTED=\"$DOCKER_DETECTED --runtime=nvidia\"\nfi\n",
            );
        }
        let mounts = if self.mounts.is_empty() {
            ""
        } else {
            // The image's HOME (Ray reads it the same way; /root when it sets none).
            s.push_str(&format!("DOCKER_IMAGE={}\n", quote(&self.image)));
            s.push_str(concat!(
                "DOCKER_HOME=\"$(\"$DOCKER\" inspect -f '{{json .Config.Env}}' \"$DOCKER_IMAGE\" 2>/dev/null ",
                "| tr ',' '\\n' | sed -n 's/^.*\"HOME=\\([^\"]*\\)\".*$/\\1/p' | head -n 1)\"\n",
                "[ -n \"$DOCKER_HOME\" ] || DOCKER_HOME=/root\n",
                "DOCKER_MOUNTS=()\n",
            ));
            for (host, remote) in &self.mounts {
                let inside = if remote == "~" {
                    "\"$DOCKER_HOME\"".to_string()
                } else if let Some(rest) = remote.strip_prefix("~/") {
                    format!("\"$DOCKER_HOME\"{}", quote(&format!("/{rest}")))
                } else {
                    quote(remote)
                };
                s.push_str(&format!("DOCKER_MOUNTS+=(-v {}:{inside})\n", quote(host)));
            }
            " \"${DOCKER_MOUNTS[@]}\""
        };
        s.push_str(&format!(
            "\"$DOCKER\" run --rm --name \"$CONTAINER\" -d -it{mounts} -e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 \
             {} $DOCKER_DETECTED --net=host {} bash\n",
            self.run_options.join(" "),
            quote(&self.image)
        ));
        s
    }
}

pub(super) fn docker_settings(
    top: Option<&Value>,
    per_type: Option<&Value>,
    is_head: bool,
) -> Result<Option<Docker>, CoreError> {
    let get = |key: &str| {
        per_type
            .and_then(|d| d.get(key))
            .or_else(|| top.and_then(|d| d.get(key)))
    };
    let str_of = |key: &str| get(key).and_then(Value::as_str).map(str::to_string);
    let flag = |key: &str| get(key).and_then(Value::as_bool).unwrap_or(false);
    let role = if is_head { "head" } else { "worker" };
    let image = str_of(&format!("{role}_image")).or_else(|| str_of("image"));
    let Some(image) = image.filter(|i| !i.is_empty()) else {
        return Ok(None);
    };
    let container = str_of("container_name").unwrap_or_else(|| "ray_container".to_string());
    if container.is_empty() {
        return Err(CoreError::invalid(
            "docker.container_name",
            "must not be empty with an image",
        ));
    }
    let mut run_options = Vec::new();
    for key in ["run_options".to_string(), format!("{role}_run_options")] {
        if let Some(v) = get(&key) {
            run_options.extend(commands(v, &format!("docker.{key}"))?);
        }
    }
    let shm_set = run_options.iter().any(|o| o.contains("--shm-size"));
    Ok(Some(Docker {
        image,
        container,
        pull: get("pull_before_run")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        run_options,
        command: if flag("use_podman") {
            "podman"
        } else {
            "docker"
        },
        shm_detection: !shm_set && !flag("disable_shm_size_detection"),
        runtime_detection: !flag("disable_automatic_runtime_detection"),
        mounts: Vec::new(),
    }))
}
