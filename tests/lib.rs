//! Workspace integration tests of rayscale (see `tests/`), and the helpers they share:
//! a scriptable gRPC expander server for the expander tests and benchmarks, and a real
//! Ray head node for the live tests (`ray_head`).

pub mod expander_server;
pub mod ray_head;
