//! The bootstrap's SSH key (Ray's project-wide key, see the parent module's docs): its
//! name, its `ssh-keys` metadata line, the project metadata with it, and the calls that
//! find, make and add it (split out of `bootstrap.rs`, behaviour unchanged).

use super::*;

/// Ray's key name: `ray-autoscaler_gcp_<region>_<project>_<user>_<i>`.
pub fn key_name(region: &str, project: &str, user: &str, i: usize) -> String {
    format!("ray-autoscaler_gcp_{region}_{project}_{user}_{i}")
}

/// The `ssh-keys` metadata line of `user`'s OpenSSH public key (`ssh-rsa <key> [comment]`):
/// `<user>:ssh-rsa <key> <user>`, as Ray writes it.
pub fn ssh_key_line(user: &str, public_key: &str) -> Result<String, GcpError> {
    let mut parts = public_key.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(kind @ "ssh-rsa"), Some(key)) => Ok(format!("{user}:{kind} {key} {user}")),
        _ => Err(GcpError::config(
            "auth.ssh_private_key",
            format!(
                "the public key is not an OpenSSH ssh-rsa key: {:?}",
                public_key.chars().take(40).collect::<String>()
            ),
        )),
    }
}

/// The value of item `key` of a `Metadata` (`{fingerprint, items: [{key, value}]}`).
fn metadata_item<'a>(metadata: &'a Value, key: &str) -> Option<&'a str> {
    metadata
        .get("items")
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .find(|i| i.get("key").and_then(Value::as_str) == Some(key))
        })
        .and_then(|i| i.get("value"))
        .and_then(Value::as_str)
}

/// The `ssh-keys` value of a `Metadata`.
fn ssh_keys(metadata: &Value) -> &str {
    metadata_item(metadata, "ssh-keys").unwrap_or("")
}

/// Whether the project's metadata turns OS Login on (`enable-oslogin`: `TRUE`), under
/// which instances ignore `ssh-keys`.
fn os_login(metadata: &Value) -> bool {
    metadata_item(metadata, "enable-oslogin").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether the project's `ssh-keys` hold `line` (by its key), or, without one, any line
/// of `user` (Ray's test: three words, the last the user).
fn holds_key(metadata: &Value, user: &str, line: Option<&str>) -> bool {
    let key_of = |l: &str| l.split_whitespace().nth(1).map(str::to_string);
    ssh_keys(metadata).lines().any(|l| match line {
        Some(want) => key_of(l).is_some() && key_of(l) == key_of(want),
        None => {
            let w: Vec<&str> = l.split(' ').collect();
            w.len() == 3 && w[2] == user
        }
    })
}

/// `metadata` with `line` appended to its `ssh-keys` item (made when absent), keeping its
/// `fingerprint` (the write is refused if another writer changed it).
pub fn metadata_with_line(metadata: &Value, line: &str) -> Value {
    let mut m = metadata.clone();
    if !m.is_object() {
        m = json!({});
    }
    // Output only (`compute#metadata`): not sent back.
    if let Some(o) = m.as_object_mut() {
        o.remove("kind");
    }
    let items = m
        .as_object_mut()
        .map(|o| o.entry("items").or_insert_with(|| json!([])));
    if let Some(Value::Array(items)) = items {
        match items
            .iter_mut()
            .find(|i| i.get("key").and_then(Value::as_str) == Some("ssh-keys"))
        {
            Some(item) => {
                let old = item.get("value").and_then(Value::as_str).unwrap_or("");
                let new = if old.is_empty() {
                    line.to_string()
                } else {
                    format!("{}\n{line}", old.trim_end_matches('\n'))
                };
                item["value"] = json!(new);
            }
            None => items.push(json!({"key": "ssh-keys", "value": line})),
        }
    }
    m
}

/// The cluster's key (see the module's docs): its name and private half's path.
pub(super) async fn project_key(
    compute: &Rest,
    project: &str,
    region: &str,
    user: &str,
    ssh_dir: &Path,
) -> Result<Option<(String, PathBuf)>, GcpError> {
    let read = || async {
        let p = compute
            .get("projects.get", &format!("compute/v1/projects/{project}"))
            .await?;
        Ok::<Value, GcpError>(
            p.get("commonInstanceMetadata")
                .cloned()
                .unwrap_or(json!({})),
        )
    };
    let metadata = read().await?;
    if os_login(&metadata) {
        return Ok(None);
    }
    for i in 0..KEY_TRIES {
        let name = key_name(region, project, user, i);
        let private = ssh_dir.join(&name);
        let public = ssh_dir.join(format!("{name}.pub"));
        if private.exists() {
            let line = match std::fs::read_to_string(&public) {
                Ok(p) => Some(ssh_key_line(user, &p)?),
                Err(_) => None,
            };
            if holds_key(&metadata, user, line.as_deref()) {
                return Ok(Some((name, private)));
            }
            // Ours, and missing from the project (a trimmed metadata): put it back.
            if let Some(line) = line {
                add_line(compute, project, &line, metadata, read).await?;
                return Ok(Some((name, private)));
            }
            continue;
        }
        let public_key = generate_key(&private)?;
        let line = ssh_key_line(user, &public_key)?;
        add_line(compute, project, &line, metadata, read).await?;
        return Ok(Some((name, private)));
    }
    Err(GcpError::config(
        "auth.ssh_private_key",
        format!(
            "{} to {} exist in {} but none is in project {project}'s ssh-keys: set \
             auth.ssh_private_key",
            key_name(region, project, user, 0),
            key_name(region, project, user, KEY_TRIES - 1),
            ssh_dir.display()
        ),
    ))
}

/// Appends `line` to the project's `ssh-keys` and waits for the operation; a stale
/// fingerprint (412) reads the metadata again.
async fn add_line<F, Fut>(
    compute: &Rest,
    project: &str,
    line: &str,
    mut metadata: Value,
    read: F,
) -> Result<(), GcpError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Value, GcpError>>,
{
    for attempt in 1..=WRITE_TRIES {
        if holds_key(&metadata, "", Some(line)) {
            return Ok(());
        }
        // Without the fingerprint the write would not be conditional and could replace
        // what another writer set meanwhile.
        if metadata
            .get("fingerprint")
            .and_then(Value::as_str)
            .is_none()
        {
            return Err(GcpError::transient(
                "projects.get",
                None,
                format!(
                    "project {project}'s commonInstanceMetadata has no fingerprint: its \
                     ssh-keys are left as they are"
                ),
            ));
        }
        let body = metadata_with_line(&metadata, line);
        match compute
            .post(
                "projects.setCommonInstanceMetadata",
                &format!("compute/v1/projects/{project}/setCommonInstanceMetadata"),
                &body,
            )
            .await
        {
            Ok(op) => return global_operation(compute, project, op).await,
            Err(e) if e.status() == Some(412) && attempt < WRITE_TRIES => {
                metadata = read().await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits (up to a minute) for a global operation to end; its error is the call's.
async fn global_operation(compute: &Rest, project: &str, mut op: Value) -> Result<(), GcpError> {
    let name = op
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut delay = Duration::from_millis(250);
    loop {
        if op.get("status").and_then(Value::as_str) == Some("DONE") {
            return match op.get("error") {
                None | Some(Value::Null) => Ok(()),
                Some(err) => {
                    let code = err
                        .get("errors")
                        .and_then(|e| e.get(0))
                        .and_then(|e| e.get("code"))
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    Err(GcpError::Call {
                        call: "projects.setCommonInstanceMetadata",
                        kind: crate::errors::classify(code.as_deref(), None).kind(""),
                        message: format!("operation {name} ended with {err}"),
                        code,
                        status: None,
                    })
                }
            };
        }
        if name.is_empty() || tokio::time::Instant::now() >= deadline {
            return Err(GcpError::transient(
                "projects.setCommonInstanceMetadata",
                None,
                format!("operation {name:?} did not end within 60 s"),
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
        op = compute
            .get(
                "globalOperations.get",
                &format!("compute/v1/projects/{project}/global/operations/{name}"),
            )
            .await?;
    }
}

/// Makes a 2048-bit RSA key at `private` (and `<private>.pub`) with `ssh-keygen`, as
/// Ray's bootstrap makes one; returns the public key.
fn generate_key(private: &Path) -> Result<String, GcpError> {
    let err = |m: String| GcpError::config("auth.ssh_private_key", m);
    if let Some(dir) = private.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    let out = std::process::Command::new("ssh-keygen")
        .args([
            "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-C", "",
        ])
        .arg("-f")
        .arg(private)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            err(format!(
                "ssh-keygen (OpenSSH's, to make the cluster's key as ray up does): {e}"
            ))
        })?;
    if !out.status.success() {
        return Err(err(format!(
            "ssh-keygen {}: {}",
            private.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let public = format!("{}.pub", private.display());
    std::fs::read_to_string(&public).map_err(|e| err(format!("{public}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_key_line_is_rays_and_is_appended_to_ssh_keys() {
        let line = ssh_key_line("ubuntu", "ssh-rsa AAAAB3Nza me@host\n").unwrap();
        assert_eq!(line, "ubuntu:ssh-rsa AAAAB3Nza ubuntu");
        assert!(ssh_key_line("ubuntu", "ssh-ed25519 AAAA").is_err());
        let none = json!({"fingerprint": "f1"});
        let one = metadata_with_line(&none, &line);
        assert_eq!(
            one,
            json!({"fingerprint": "f1", "items": [{"key": "ssh-keys", "value": line}]})
        );
        let other = json!({"fingerprint": "f2", "items": [
            {"key": "enable-oslogin", "value": "FALSE"},
            {"key": "ssh-keys", "value": "alice:ssh-rsa BBBB alice\n"}]});
        let two = metadata_with_line(&other, &line);
        assert_eq!(two["items"][0], other["items"][0]);
        assert_eq!(
            two["items"][1]["value"],
            format!("alice:ssh-rsa BBBB alice\n{line}")
        );
        assert!(holds_key(&two, "ubuntu", Some(&line)));
        assert!(!holds_key(&other, "ubuntu", Some(&line)));
        // Without a public half, Ray's test: any line of the user.
        assert!(holds_key(&other, "alice", None));
        assert!(!holds_key(&other, "ubuntu", None));
    }
}
