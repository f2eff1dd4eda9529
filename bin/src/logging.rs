//! Logs through `tracing`: human-readable lines on stderr by default, one JSON object a
//! line with `RAYSCALE_LOG_FORMAT=json` (for log shippers); `RUST_LOG` filters as usual
//! (default `info`, e.g. `RUST_LOG=rayscale=debug,tonic=warn`).

use tracing_subscriber::EnvFilter;

/// Installs the process's subscriber (once, at start-up).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let json = std::env::var("RAYSCALE_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // A second init (tests) leaves the first in place.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
