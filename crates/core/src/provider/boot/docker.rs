//! A node type's `docker:` block as the boot script runs it: the role's image and
//! options, and the container started as Ray's `DockerCommandRunner` starts it.

use serde_json::Value;

use super::commands;
use crate::CoreError;

/// A `docker:` block, with the node type's overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Docker {
    pub(super) image: String,
    pub(super) container: String,
    pub(super) pull: bool,
    pub(super) run_options: Vec<String>,
}

pub(super) fn docker_settings(
    top: Option<&Value>,
    per_type: Option<&Value>,
) -> Result<Option<Docker>, CoreError> {
    let get = |key: &str| {
        per_type
            .and_then(|d| d.get(key))
            .or_else(|| top.and_then(|d| d.get(key)))
    };
    let str_of = |key: &str| get(key).and_then(Value::as_str).map(str::to_string);
    let image = str_of("worker_image").or_else(|| str_of("image"));
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
    for key in ["run_options", "worker_run_options"] {
        if let Some(v) = get(key) {
            run_options.extend(commands(v, &format!("docker.{key}"))?);
        }
    }
    Ok(Some(Docker {
        image,
        container,
        pull: get("pull_before_run")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        run_options,
    }))
}
