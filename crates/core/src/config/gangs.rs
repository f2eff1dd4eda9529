//! `rayscale.gangs`: all or nothing for placement groups. Off by default (Ray launches
//! what it can of a group and keeps it; with this off, decisions stay Ray's):
//!
//! ```yaml
//! rayscale:
//!   gangs: atomic          # or: {mode: atomic, timeout_s: 600, attempts: 3}
//! ```
//!
//! With `atomic`, the new nodes one decision launches for a pending placement group are
//! one gang: launched together (one all-or-nothing call where the cloud has one), and,
//! if one of them fails to come up, or they are not all running `timeout_s` after the
//! launch while the group is still pending, the gang's nodes that carry no work are
//! released and the group is planned again whole (the failed type set aside for the
//! unavailable-type TTL). After `attempts` failed attempts the group is reported as not
//! satisfiable now and not launched for until the TTL passes.

use serde_json::Value;

use super::schema::{describe, join};
use crate::CoreError;

/// `gangs.timeout_s` by default.
pub const DEFAULT_GANG_TIMEOUT_S: u64 = 600;
/// `gangs.attempts` by default.
pub const DEFAULT_GANG_ATTEMPTS: u32 = 3;

/// `rayscale.gangs` when atomic (absent or `off`: `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gangs {
    /// A gang not whole this long after its launch is released (s).
    pub timeout_s: u64,
    /// Failed attempts after which the group is set aside for the TTL.
    pub attempts: u32,
}

impl Default for Gangs {
    fn default() -> Self {
        Gangs {
            timeout_s: DEFAULT_GANG_TIMEOUT_S,
            attempts: DEFAULT_GANG_ATTEMPTS,
        }
    }
}

impl Gangs {
    /// Reads `rayscale.gangs` (`v`, at `path`): `atomic`, `off`, or a mapping.
    pub fn from_value(v: Option<&Value>, path: &str) -> Result<Option<Self>, CoreError> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        match v {
            Value::String(s) if s == "atomic" => return Ok(Some(Gangs::default())),
            Value::String(s) if s == "off" => return Ok(None),
            Value::Object(_) => {}
            _ => {
                return Err(CoreError::invalid(
                    path,
                    format!(
                        "expected \"atomic\", \"off\" or a mapping (mode, timeout_s, attempts), got {}",
                        describe(v)
                    ),
                ));
            }
        }
        let mut g = Gangs::default();
        let mut mode: Option<bool> = None;
        for (k, val) in v.as_object().into_iter().flatten() {
            let p = join(path, k);
            match k.as_str() {
                "mode" => {
                    mode = match val.as_str() {
                        Some("atomic") => Some(true),
                        Some("off") => Some(false),
                        _ => {
                            return Err(CoreError::invalid(
                                &p,
                                format!("expected \"atomic\" or \"off\", got {}", describe(val)),
                            ));
                        }
                    }
                }
                "timeout_s" => {
                    g.timeout_s = val
                        .as_u64()
                        .filter(|n| (1..=86_400).contains(n))
                        .ok_or_else(|| {
                            CoreError::invalid(
                                &p,
                                format!(
                                    "expected a whole number of seconds from 1 to 86400, got {}",
                                    describe(val)
                                ),
                            )
                        })?;
                }
                "attempts" => {
                    g.attempts = val
                        .as_u64()
                        .filter(|n| (1..=100).contains(n))
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            CoreError::invalid(
                                &p,
                                format!(
                                    "expected a whole number from 1 to 100, got {}",
                                    describe(val)
                                ),
                            )
                        })?;
                }
                _ => {
                    return Err(CoreError::invalid(p, super::keys::unknown("gangs")));
                }
            }
        }
        match mode {
            Some(true) => {}
            Some(false) => return Ok(None),
            None => {
                return Err(CoreError::invalid(
                    join(path, "mode"),
                    "missing: say mode: atomic (or off)",
                ));
            }
        }
        Ok(Some(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn atomic_off_or_a_block_and_bad_values_named() {
        let p = "rayscale.gangs";
        assert_eq!(Gangs::from_value(None, p).expect("absent"), None);
        assert_eq!(
            Gangs::from_value(Some(&json!("off")), p).expect("off"),
            None
        );
        assert_eq!(
            Gangs::from_value(Some(&json!("atomic")), p).expect("atomic"),
            Some(Gangs {
                timeout_s: 600,
                attempts: 3
            })
        );
        assert_eq!(
            Gangs::from_value(
                Some(&json!({"mode": "atomic", "timeout_s": 60, "attempts": 2})),
                p
            )
            .expect("block"),
            Some(Gangs {
                timeout_s: 60,
                attempts: 2
            })
        );
        assert_eq!(
            Gangs::from_value(Some(&json!({"mode": "off", "timeout_s": 60})), p).expect("off"),
            None
        );
        for (bad, what) in [
            (json!("yes"), "rayscale.gangs: expected \"atomic\""),
            (json!({"timeout_s": 60}), "rayscale.gangs.mode: missing"),
            (
                json!({"mode": "atomic", "timeout_s": 0}),
                "rayscale.gangs.timeout_s: expected",
            ),
            (
                json!({"mode": "atomic", "attempts": -1}),
                "rayscale.gangs.attempts: expected",
            ),
            (
                json!({"mode": "atomic", "retries": 2}),
                "rayscale.gangs.retries: unknown key",
            ),
        ] {
            let e = Gangs::from_value(Some(&bad), p)
                .expect_err("refused")
                .to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }
}
