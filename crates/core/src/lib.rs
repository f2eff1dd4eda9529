//! `rayscale-core`: the pure heart of rayscale.
//!
//! What lives here: the domain model (resources in exact fixed-point arithmetic, labels,
//! instance statuses), the Ray cluster config loader with path-naming validation (and a
//! fast reader for plain YAML), the Ray-compatible scheduler (`scheduler::schedule`), a
//! deterministic function of a snapshot, the expanders, the instance manager, the pure
//! reconciler, the provider contract every cloud implements (`provider`), what is known of
//! the cloud's capacity (`availability`), the live loop generic over its GCS, cloud and
//! clock (`driver`), and (`testing`) a fake cloud and a fake GCS for tests.
//!
//! What must NOT live here: any I/O. No tonic, prost, HTTP client, cloud SDK, file system
//! access beyond parsing text handed in, wall clock or unseeded randomness (the driver
//! gets its GCS, cloud and clock handed in; it only waits, on tokio's timers). Protobuf types
//! never cross into this crate; each I/O crate converts at its edge.
//!
//! Modules depend on each other one way, lowest first: `model`; `instance`; `error`;
//! `config` (with the expander settings and the canonical JSON); `provider` and
//! `expander`; `scheduler` (with the request building); `availability` and `scenario`
//! (the `plan` front end); `reconciler`; `telemetry` (what operators are shown); `driver`; `simulate` (the
//! what-if simulator, on the reconciler). `scripts/check_module_layers.py`
//! checks it.

pub mod availability;
pub mod config;
pub mod driver;
pub mod error;
pub mod expander;
pub mod explain;
pub mod instance;
pub mod launcher;
pub mod model;
pub mod preemption;
pub mod provider;
pub mod reconciler;
pub mod scenario;
pub mod scheduler;
pub mod simulate;
pub mod telemetry;
// Always compiled, not behind a feature: a feature the tests alone turn on would make
// the wheel's build (`-p rayscale`) compile this crate and every crate above it a
// second time; the linker leaves the unused fakes out of the binary.
pub mod testing;

pub use error::CoreError;
