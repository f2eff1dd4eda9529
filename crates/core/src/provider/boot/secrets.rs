//! Obvious secrets refused before they go into user data: the head's boot script carries
//! the whole cluster YAML and a worker's its type's commands, docker options and labels,
//! and user data (EC2 `UserData`, GCE's `startup-script`, Azure's `customData`) is
//! readable by any process on the instance through the metadata service and by whoever
//! may describe the instance. A string of the YAML that holds an AWS access key id, an
//! AWS secret key assignment, a PEM private key, a GitHub or Slack token or a Google API
//! key is refused with its YAML path and the kind of token, never the token itself.
//!
//! Not a secret scanner: only shapes that are unmistakable. A presigned S3 URL's
//! `X-Amz-Credential=AKIA...` is the key's id in a URL meant to be shared, and passes.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::CoreError;
use crate::config::schema::join;

/// (kind of token, its pattern).
static PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        ("an AWS access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
        (
            "an AWS secret access key",
            r#"(?i-u:secret[_-]?access[_-]?key)["']?(?:\s*[:=]\s*|\s+)["']?[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+=]|$)"#,
        ),
        (
            "a PEM private key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        ),
        (
            "a GitHub token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22,})",
        ),
        ("a Slack token", r"\bxox[baprs]-[A-Za-z0-9-]{10,}"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ]
    .into_iter()
    .filter_map(|(kind, p)| match Regex::new(p) {
        Ok(r) => Some((kind, r)),
        Err(e) => {
            // Fixed patterns, tested: never at run time.
            tracing::error!("secret pattern for {kind} does not compile: {e}");
            None
        }
    })
    .collect()
});

/// The kind of token `text` holds, if any.
pub fn token_kind(text: &str) -> Option<&'static str> {
    PATTERNS.iter().find_map(|(kind, re)| {
        re.find_iter(text)
            .any(|m| !(kind.contains("access key id") && presigned(text, m.start())))
            .then_some(*kind)
    })
}

/// Whether the key id at `at` is a presigned URL's credential scope.
fn presigned(text: &str, at: usize) -> bool {
    let before = text[..at].to_ascii_lowercase();
    before.ends_with("credential=") || before.ends_with("credential%3d")
}

/// Refuses the first string of `v` (at YAML path `path`) that holds an obvious secret:
/// `PATH: holds what looks like KIND; ...` (one line, without the secret).
pub fn refuse(v: &Value, path: &str) -> Result<(), CoreError> {
    match v {
        Value::String(s) => match token_kind(s) {
            Some(kind) => Err(CoreError::invalid(
                if path.is_empty() {
                    "cluster config"
                } else {
                    path
                },
                format!(
                    "holds what looks like {kind}; it would go into the instances' user data, \
                     readable through the metadata service: fetch it at boot from a secret \
                     store instead (docs/src/guides/secrets.md)"
                ),
            )),
            None => Ok(()),
        },
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| refuse(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().try_for_each(|(k, x)| refuse(x, &join(path, k))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(PATTERNS.len(), 6);
    }

    #[test]
    fn obvious_tokens_are_named_by_kind() {
        // Built from parts, so that this file holds no token-shaped literal.
        let akia = format!("AKIA{}", "IOSFODNN7EXAMPLE");
        let secret = format!("{}/K7MDENG/bPxRfiCY{}", "wJalrXUtnFEMI", "EXAMPLEKEY");
        assert_eq!(secret.len(), 40);
        let ghp = format!("ghp_{}", "a1".repeat(18));
        let pat = format!("github_pat_{}", "A1b2_".repeat(6));
        let slack = format!("xoxb-{}", "1234-5678-abcd");
        let google = format!("AIza{}x", "Sy".repeat(17));
        for (text, kind) in [
            (
                format!("export AWS_ACCESS_KEY_ID={akia}"),
                "an AWS access key id",
            ),
            (
                format!("ASIA{}", "ABCDEFGHIJ012345"),
                "an AWS access key id",
            ),
            (
                format!("export AWS_SECRET_ACCESS_KEY={secret}"),
                "an AWS secret access key",
            ),
            (
                format!("aws configure set aws_secret_access_key {secret}"),
                "an AWS secret access key",
            ),
            (
                format!("aws_secret_access_key = \"{secret}\""),
                "an AWS secret access key",
            ),
            (
                format!("echo '-----BEGIN {}-----\nMIIE' > k", "RSA PRIVATE KEY"),
                "a PEM private key",
            ),
            (
                format!("-----BEGIN {}-----", "OPENSSH PRIVATE KEY"),
                "a PEM private key",
            ),
            (
                format!("-----BEGIN {}-----", "PRIVATE KEY"),
                "a PEM private key",
            ),
            (
                format!("git clone https://{ghp}@github.com/o/r"),
                "a GitHub token",
            ),
            (format!("GH={pat}"), "a GitHub token"),
            (format!("SLACK={slack}"), "a Slack token"),
            (format!("--key={google}"), "a Google API key"),
        ] {
            assert_eq!(token_kind(&text), Some(kind), "{text}");
        }
    }

    #[test]
    fn ordinary_commands_pass() {
        // A presigned S3 URL: the key's id as its credential scope.
        let presigned = format!(
            "https://b.s3.amazonaws.com/rayscale.whl?X-Amz-Credential=AKIA{}%2F20240101",
            "IOSFODNN7EXAMPLE"
        );
        for text in [
            "pip install -U 'ray[default]==2.60.0'",
            "export AWS_SECRET_ACCESS_KEY=$(aws secretsmanager get-secret-value --secret-id k)",
            "aws_secret_access_key = short",
            "-----BEGIN PUBLIC KEY-----",
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ user@host",
            "echo AKIA is a prefix",
            "ghp_short",
            "ray start --head --port=6379",
            presigned.as_str(),
        ] {
            assert_eq!(token_kind(text), None, "{text}");
        }
    }

    #[test]
    fn the_refusal_names_the_path_and_not_the_token() {
        let token = format!("ghp_{}", "Zz".repeat(18));
        let v = serde_json::json!({
            "setup_commands": ["echo a", "echo b", format!("git clone https://{token}@github.com/o/r")],
        });
        let e = refuse(&v, "").expect_err("refused").to_string();
        assert!(
            e.starts_with("setup_commands[2]: holds what looks like a GitHub token;"),
            "{e}"
        );
        assert!(!e.contains(&token) && !e.contains('\n'), "{e}");
        let v = serde_json::json!({"docker": {"run_options": ["-e", format!("K=AKIA{}", "IOSFODNN7EXAMPLE")]}});
        let e = refuse(&v, "").expect_err("refused").to_string();
        assert!(
            e.starts_with("docker.run_options[1]: holds what looks like an AWS access key id"),
            "{e}"
        );
        assert!(refuse(&serde_json::json!({"a": [1, "b", {"c": null}]}), "").is_ok());
    }
}
