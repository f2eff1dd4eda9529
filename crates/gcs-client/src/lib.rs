//! `rayscale-gcs-client`: Ray 2.60's GCS protocol, written by rayscale and compiled with
//! prost/tonic, plus the conversions between those wire types and `rayscale-core`'s model.
//!
//! What lives here: the generated protobuf/gRPC types (`proto`), their proto3 JSON
//! (pbjson), pure conversions (`convert`), a hand reader of the one large reply
//! (`wire`: `GetClusterResourceStateReply`'s node rows read off the frame's bytes, borrowed,
//! instead of through prost's maps; checked against prost by property tests), and the tonic
//! clients: the GCS client
//! (`client`: Ray's `AutoscalerStateService` and internal KV, with deadlines and retries),
//! the GCS as the driver sees it (`driver`: `rayscale_core::driver::Gcs` over the
//! client, which keeps the instance table and the lease in the GCS KV), and the gRPC expander
//! (`expander`, rayscale's own `rayscale.expander.v1` service, which reuses Ray's wire
//! types for demands). What must NOT live here: scheduling or
//! reconciling decisions (those are `rayscale-core`'s), cloud provider code, or any
//! protobuf type leaking into `rayscale-core`'s API.

pub mod client;
pub mod codec;
pub mod convert;
pub mod driver;
pub mod error;
pub mod expander;
mod wire;
#[cfg(test)]
mod wire_tests;

pub use error::GcsError;

/// Generated code for Ray's protobuf packages.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod proto {
    /// Package `ray`.
    pub mod ray {
        /// Package `ray.rpc`.
        pub mod rpc {
            include!(concat!(env!("OUT_DIR"), "/ray.rpc.rs"));
            include!(concat!(env!("OUT_DIR"), "/ray.rpc.serde.rs"));
            /// Package `ray.rpc.autoscaler`.
            pub mod autoscaler {
                include!(concat!(env!("OUT_DIR"), "/ray.rpc.autoscaler.rs"));
                include!(concat!(env!("OUT_DIR"), "/ray.rpc.autoscaler.serde.rs"));
                /// Package `ray.rpc.autoscaler.im` (the instance manager).
                pub mod im {
                    include!(concat!(env!("OUT_DIR"), "/ray.rpc.autoscaler.im.rs"));
                    include!(concat!(env!("OUT_DIR"), "/ray.rpc.autoscaler.im.serde.rs"));
                }
            }
        }
    }
    /// Package `rayscale`.
    pub mod rayscale {
        /// Package `rayscale.expander`.
        pub mod expander {
            /// Package `rayscale.expander.v1`: the external expander service.
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/rayscale.expander.v1.rs"));
            }
        }
    }
}
