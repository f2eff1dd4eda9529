//! Workspace integration tests of rayscale (see `tests/`), and the helpers they share:
//! a scriptable gRPC expander server for the expander tests and benchmarks.

pub mod expander_server;
