//! `rayscale.install`: how a head whose image has no `rayscale` gets it at boot. The
//! head's boot script installs the `rayscale` wheel with the Python beside `ray` when
//! `rayscale` is not on its `PATH` (and `RAYSCALE_BIN` names none), from one of:
//!
//! ```yaml
//! rayscale:
//!   install:
//!     # the exact wheel file, by URL or by a path on the head, checked against its sha256
//!     wheel: https://example.com/wheels/rayscale-0.1.0-py3-none-manylinux_2_34_x86_64.whl
//!     sha256: 0123...cdef        # required for a URL; for a path, computed if absent
//!     # or: a directory or page of wheels, pip run with --no-index
//!     find_links: /opt/wheels
//!     pip: "rayscale==0.1.0"     # the requirement (default: this version)
//!     # or: a requirement from pip's package index, only when asked for
//!     index: true
//!     pip: "rayscale==0.1.0"
//! ```
//!
//! Nothing given: the boot installs nothing from anywhere, and a head without `rayscale`
//! stops its boot saying how to give it (the name is not published on the public index;
//! whoever registered it there would run code on the head, with its cloud credentials).
//!
//! Only read here and rendered into the boot script; nothing is installed by this crate.

use std::io::Read;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::schema::{describe, join, obj};
use crate::CoreError;

/// `rayscale.install`: where the head's boot gets the `rayscale` wheel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InstallSettings {
    /// Nothing given: the boot installs nothing (a head without `rayscale` stops).
    #[default]
    Nothing,
    /// The exact wheel file: downloaded (a URL) or copied (a path on the head), checked
    /// against `sha256` and installed with pip offline.
    Wheel {
        /// An `http://`, `https://` or `file://` URL, or an absolute path on the head.
        wheel: String,
        /// Its lowercase hex SHA-256; `None` for a path only, pinned when the boot
        /// script is rendered ([`InstallSettings::pinned_sha256`]).
        sha256: Option<String>,
    },
    /// `pip install --no-index --find-links FIND_LINKS PIP`.
    FindLinks {
        /// pip's `--find-links`: a directory or an HTML page of wheels.
        find_links: String,
        /// The requirement (default: this build's own version).
        pip: String,
    },
    /// `pip install PIP` from pip's package index (`index: true`: asked for).
    Index {
        /// The requirement (default: this build's own version).
        pip: String,
    },
}

/// This build's own requirement, `rayscale==VERSION`.
pub fn this_version() -> String {
    format!("rayscale=={}", env!("CARGO_PKG_VERSION"))
}

/// Whether `wheel` is a URL (else a path on the head).
pub fn is_url(wheel: &str) -> bool {
    wheel.contains("://")
}

/// The hex SHA-256 of the file at `path`.
pub fn file_sha256(path: &std::path::Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>())
}

impl InstallSettings {
    /// Reads `rayscale.install` (`v`, at `path`); absent is [`InstallSettings::Nothing`].
    pub fn from_value(v: Option<&Value>, path: &str) -> Result<Self, CoreError> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(InstallSettings::Nothing);
        };
        let block = obj(v, path)?;
        let (mut wheel, mut sha256, mut find_links, mut pip, mut index) =
            (None, None, None, None, false);
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
                "wheel" => wheel = Some(text()?),
                "sha256" => {
                    let t = text()?.to_ascii_lowercase();
                    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(CoreError::invalid(
                            p,
                            "expected 64 hex digits (what `sha256sum WHEEL` prints)",
                        ));
                    }
                    sha256 = Some(t);
                }
                "find_links" => find_links = Some(text()?),
                "pip" => pip = Some(text()?),
                "index" => {
                    index = val.as_bool().ok_or_else(|| {
                        CoreError::invalid(
                            &p,
                            format!("expected true or false, got {}", describe(val)),
                        )
                    })?
                }
                _ => {
                    return Err(CoreError::invalid(p, super::keys::unknown("install")));
                }
            }
        }
        if let Some(wheel) = wheel {
            let p = join(path, "wheel");
            if let Some(other) = [
                ("pip", pip.is_some()),
                ("find_links", find_links.is_some()),
                ("index", index),
            ]
            .iter()
            .find(|(_, set)| *set)
            {
                return Err(CoreError::invalid(
                    p,
                    format!(
                        "installs that one file: drop {}.{} (a wheel or find_links or pip, \
                         one of them)",
                        path, other.0
                    ),
                ));
            }
            let name = if is_url(&wheel) {
                let scheme = wheel.split("://").next().unwrap_or_default();
                if !["http", "https", "file"].contains(&scheme) {
                    return Err(CoreError::invalid(
                        p,
                        format!("a URL of {scheme}://: expected https://, http:// or file://"),
                    ));
                }
                if sha256.is_none() {
                    return Err(CoreError::invalid(
                        join(path, "sha256"),
                        "missing: a wheel by URL needs its sha256 (`sha256sum WHEEL`), \
                         checked on the head before it is installed",
                    ));
                }
                let no_query = wheel.split(['?', '#']).next().unwrap_or_default();
                no_query.rsplit('/').next().unwrap_or_default().to_string()
            } else {
                if !wheel.starts_with('/') {
                    return Err(CoreError::invalid(
                        p,
                        "expected a URL or an absolute path on the head",
                    ));
                }
                wheel.rsplit('/').next().unwrap_or_default().to_string()
            };
            if !name.ends_with(".whl") || name.len() <= ".whl".len() {
                return Err(CoreError::invalid(
                    join(path, "wheel"),
                    "must name a .whl file (pip needs the wheel's own file name)",
                ));
            }
            return Ok(InstallSettings::Wheel { wheel, sha256 });
        }
        if sha256.is_some() {
            return Err(CoreError::invalid(
                join(path, "sha256"),
                format!("is the digest of {path}.wheel, which is not given"),
            ));
        }
        let pip = pip.unwrap_or_else(this_version);
        match (find_links, index) {
            (Some(_), true) => Err(CoreError::invalid(
                join(path, "index"),
                format!("conflicts with {path}.find_links, which installs with --no-index"),
            )),
            (Some(find_links), false) => Ok(InstallSettings::FindLinks { find_links, pip }),
            (None, true) => Ok(InstallSettings::Index { pip }),
            (None, false) => Err(CoreError::invalid(
                join(path, "pip"),
                format!(
                    "alone would install from the public package index, where anyone may \
                     register the name: add {path}.index: true to allow that, or give \
                     {path}.wheel + sha256, or {path}.find_links"
                ),
            )),
        }
    }

    /// The SHA-256 the boot script checks the wheel against: the one given, else (a path)
    /// the digest of the file at that path here, where the script is rendered (the same
    /// file is expected on the head). `None` when no wheel is given.
    pub fn pinned_sha256(&self, path: &str) -> Result<Option<String>, CoreError> {
        match self {
            InstallSettings::Wheel {
                sha256: Some(s), ..
            } => Ok(Some(s.clone())),
            InstallSettings::Wheel {
                wheel,
                sha256: None,
            } => file_sha256(std::path::Path::new(wheel))
                .map(Some)
                .map_err(|e| {
                    CoreError::invalid(
                        join(path, "wheel"),
                        format!(
                            "cannot read {wheel} here to pin its sha256 ({e}): give \
                             {path}.sha256"
                        ),
                    )
                }),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "rayscale.install";

    fn read(v: Value) -> Result<InstallSettings, String> {
        InstallSettings::from_value(Some(&v), P).map_err(|e| e.to_string())
    }

    #[test]
    fn nothing_given_installs_nothing() {
        assert_eq!(
            InstallSettings::from_value(None, P),
            Ok(InstallSettings::Nothing)
        );
        assert_eq!(
            InstallSettings::from_value(Some(&Value::Null), P),
            Ok(InstallSettings::Nothing)
        );
    }

    #[test]
    fn a_bare_requirement_needs_index_true() {
        let e = read(serde_json::json!({"pip": "rayscale==0.1.0"})).expect_err("refused");
        assert!(
            e.starts_with(
                "rayscale.install.pip: alone would install from the public package index"
            ) && e.contains("add rayscale.install.index: true")
                && e.contains("rayscale.install.wheel + sha256")
                && e.contains("rayscale.install.find_links")
                && !e.contains('\n'),
            "{e}"
        );
        assert_eq!(
            read(serde_json::json!({"pip": " rayscale>=0.1 ", "index": true})),
            Ok(InstallSettings::Index {
                pip: "rayscale>=0.1".into()
            })
        );
        assert_eq!(
            read(serde_json::json!({"index": true})),
            Ok(InstallSettings::Index {
                pip: this_version()
            })
        );
        // `index: false` is no opt-in.
        assert!(read(serde_json::json!({"pip": "x", "index": false})).is_err());
    }

    #[test]
    fn find_links_installs_this_version_by_default() {
        assert_eq!(
            read(serde_json::json!({"find_links": "/opt/w"})),
            Ok(InstallSettings::FindLinks {
                find_links: "/opt/w".into(),
                pip: this_version()
            })
        );
        assert_eq!(
            read(serde_json::json!({"find_links": "/opt/w", "pip": "rayscale==9"})),
            Ok(InstallSettings::FindLinks {
                find_links: "/opt/w".into(),
                pip: "rayscale==9".into()
            })
        );
        let e =
            read(serde_json::json!({"find_links": "/opt/w", "index": true})).expect_err("refused");
        assert!(e.contains("rayscale.install.index: conflicts with"), "{e}");
    }

    #[test]
    fn a_wheel_by_url_needs_its_sha256_and_a_path_may_be_pinned_here() {
        let sha = "AB".repeat(32);
        let url = "https://h.example/w/rayscale-0.1.0-py3-none-any.whl?X-Amz-Signature=1";
        assert_eq!(
            read(serde_json::json!({"wheel": url, "sha256": sha})),
            Ok(InstallSettings::Wheel {
                wheel: url.into(),
                sha256: Some("ab".repeat(32))
            })
        );
        let e = read(serde_json::json!({"wheel": url})).expect_err("refused");
        assert!(
            e.starts_with("rayscale.install.sha256: missing: a wheel by URL needs its sha256"),
            "{e}"
        );
        // A path: pinned from the file where the script is rendered.
        let dir = std::env::temp_dir().join(format!("rayscale-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("rayscale-0.1.0-py3-none-any.whl");
        std::fs::write(&f, b"abc").expect("write");
        let s = read(serde_json::json!({"wheel": f.display().to_string()})).expect("a path");
        assert_eq!(
            s.pinned_sha256(P),
            Ok(Some(
                // sha256("abc")
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into()
            ))
        );
        std::fs::remove_dir_all(&dir).expect("clean");
        let e = s.pinned_sha256(P).expect_err("gone").to_string();
        assert!(
            e.starts_with("rayscale.install.wheel: cannot read ")
                && e.ends_with("give rayscale.install.sha256"),
            "{e}"
        );
        let given = InstallSettings::Wheel {
            wheel: "/nowhere/rayscale-1-py3-none-any.whl".into(),
            sha256: Some("0".repeat(64)),
        };
        assert_eq!(given.pinned_sha256(P), Ok(Some("0".repeat(64))));
        assert_eq!(InstallSettings::Nothing.pinned_sha256(P), Ok(None));
    }

    #[test]
    fn bad_blocks_name_their_key() {
        let whl = "/opt/rayscale-0.1.0-py3-none-any.whl";
        for (bad, what) in [
            (
                serde_json::json!({"pip": 3, "index": true}),
                "rayscale.install.pip: expected a one-line",
            ),
            (
                serde_json::json!({"pip": "a\nb", "index": true}),
                "rayscale.install.pip: expected a one-line",
            ),
            (
                serde_json::json!({"find_links": ""}),
                "rayscale.install.find_links",
            ),
            (
                serde_json::json!({"index": "yes"}),
                "rayscale.install.index: expected true or false",
            ),
            (
                serde_json::json!({"url": "x"}),
                "rayscale.install.url: unknown key",
            ),
            (
                serde_json::json!(["x"]),
                "rayscale.install: expected a mapping",
            ),
            (
                serde_json::json!({"wheel": whl, "sha256": "12"}),
                "rayscale.install.sha256: expected 64 hex digits",
            ),
            (
                serde_json::json!({"wheel": whl, "sha256": "g".repeat(64)}),
                "rayscale.install.sha256: expected 64 hex digits",
            ),
            (
                serde_json::json!({"sha256": "0".repeat(64)}),
                "rayscale.install.sha256: is the digest of rayscale.install.wheel",
            ),
            (
                serde_json::json!({"wheel": whl, "pip": "rayscale"}),
                "rayscale.install.wheel: installs that one file: drop rayscale.install.pip",
            ),
            (
                serde_json::json!({"wheel": whl, "index": true}),
                "rayscale.install.wheel: installs that one file: drop rayscale.install.index",
            ),
            (
                serde_json::json!({"wheel": "wheels/rayscale-0.1.0-py3-none-any.whl"}),
                "rayscale.install.wheel: expected a URL or an absolute path",
            ),
            (
                serde_json::json!({"wheel": "s3://b/rayscale-0.1.0-py3-none-any.whl", "sha256": "0".repeat(64)}),
                "rayscale.install.wheel: a URL of s3://",
            ),
            (
                serde_json::json!({"wheel": "https://h/dl?f=rayscale.whl", "sha256": "0".repeat(64)}),
                "rayscale.install.wheel: must name a .whl file",
            ),
            (
                serde_json::json!({"wheel": "/opt/rayscale.tar.gz"}),
                "rayscale.install.wheel: must name a .whl file",
            ),
        ] {
            let e = read(bad.clone()).expect_err("refused");
            assert!(e.contains(what), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
