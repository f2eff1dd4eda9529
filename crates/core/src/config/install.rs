//! `rayscale.install`: how a head whose image has no `rayscale` gets it at boot. The
//! head's boot script installs the `rayscale` wheel with the Python beside `ray` when
//! `rayscale` is not on its `PATH` (and `RAYSCALE_BIN` names none):
//!
//! ```yaml
//! rayscale:
//!   install:
//!     pip: "rayscale==0.1.0"         # a requirement or a wheel's URL (default: this version)
//!     find_links: /opt/wheels        # pip's --find-links: a directory or page of wheels
//! ```
//!
//! Only read here and rendered into the boot script; nothing is installed by this crate.

use serde_json::Value;

use super::schema::{describe, join, obj};
use crate::CoreError;

/// `rayscale.install`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallSettings {
    /// What `pip install` is given: a requirement (`rayscale==0.1.0`) or a wheel's URL or
    /// path. Default: this build's own version, so the head runs what launched it.
    pub pip: String,
    /// pip's `--find-links` (a directory or an HTML page of wheels), if any.
    pub find_links: Option<String>,
}

impl Default for InstallSettings {
    fn default() -> Self {
        InstallSettings {
            pip: format!("rayscale=={}", env!("CARGO_PKG_VERSION")),
            find_links: None,
        }
    }
}

impl InstallSettings {
    /// Reads `rayscale.install` (`v`, at `path`); absent is the default.
    pub fn from_value(v: Option<&Value>, path: &str) -> Result<Self, CoreError> {
        let mut s = InstallSettings::default();
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(s);
        };
        let block = obj(v, path)?;
        for (k, val) in block {
            let p = join(path, k);
            let text = || -> Result<String, CoreError> {
                val.as_str()
                    .map(str::trim)
                    .filter(|t| !t.is_empty() && !t.contains(['\n', '\r', '\0']))
                    .map(str::to_string)
                    .ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!(
                                "expected a one-line, non-empty string, got {}",
                                describe(val)
                            ),
                        )
                    })
            };
            match k.as_str() {
                "pip" => s.pip = text()?,
                "find_links" => s.find_links = Some(text()?),
                _ => {
                    return Err(CoreError::invalid(
                        p,
                        "unknown key (known: pip, find_links)",
                    ));
                }
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_this_version_and_names_bad_keys() {
        let d = InstallSettings::from_value(None, "rayscale.install").expect("absent");
        assert_eq!(d.pip, format!("rayscale=={}", env!("CARGO_PKG_VERSION")));
        assert_eq!(d.find_links, None);
        let v: Value = serde_json::json!({"pip": " rayscale>=0.1 ", "find_links": "/opt/w"});
        let s = InstallSettings::from_value(Some(&v), "rayscale.install").expect("valid");
        assert_eq!(s.pip, "rayscale>=0.1");
        assert_eq!(s.find_links.as_deref(), Some("/opt/w"));
        for (bad, what) in [
            (
                serde_json::json!({"pip": 3}),
                "rayscale.install.pip: expected a one-line",
            ),
            (
                serde_json::json!({"pip": "a\nb"}),
                "rayscale.install.pip: expected a one-line",
            ),
            (
                serde_json::json!({"find_links": ""}),
                "rayscale.install.find_links",
            ),
            (
                serde_json::json!({"url": "x"}),
                "rayscale.install.url: unknown key",
            ),
            (
                serde_json::json!(["x"]),
                "rayscale.install: expected a mapping",
            ),
        ] {
            let e = InstallSettings::from_value(Some(&bad), "rayscale.install")
                .expect_err("refused")
                .to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }
}
