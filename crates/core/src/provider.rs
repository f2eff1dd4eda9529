//! The cloud side: [`CloudInstanceProvider`], the small trait every cloud (and the local
//! process provider) implements, modelled on Ray 2.60's `ICloudInstanceProvider`.
//!
//! Contract, for every implementation:
//! - Calls are asynchronous requests; their results are only *observed* by a later
//!   [`CloudInstanceProvider::list`] (or [`CloudInstanceProvider::poll_errors`]).
//! - [`CloudInstanceProvider::launch`] is idempotent by `request_id`: a retried or replayed
//!   launch with the same id never makes more instances than the first one asked for.
//!   Every instance it makes carries that `request_id` and its node type, so the
//!   reconciler can join cloud instances to its own records.
//! - [`CloudInstanceProvider::terminate`] of an instance that is already gone succeeds.
//! - Errors of calls that were accepted and failed later come back from `poll_errors`,
//!   once each.

use std::future::Future;

/// A cloud instance as the provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInstance {
    /// The provider's id of the instance.
    pub cloud_instance_id: String,
    /// Node type it was launched as.
    pub node_type: String,
    /// The launch request that made it (empty when unknown).
    pub request_id: String,
    /// False once it is being stopped or terminated.
    pub is_running: bool,
}

/// A request to launch `count` instances of `node_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRequest {
    /// Idempotency key of the request.
    pub request_id: String,
    /// Node type.
    pub node_type: String,
    /// Number of instances.
    pub count: u64,
}

/// What failed, for [`ProviderError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderErrorKind {
    /// A launch request failed (all of it or the instances not listed).
    Launch {
        /// The launch request.
        request_id: String,
        /// Its node type.
        node_type: String,
        /// How many instances of it failed.
        count: u64,
    },
    /// Terminating an instance failed.
    Terminate {
        /// The instance.
        cloud_instance_id: String,
    },
    /// A call failed before it was accepted (listing, bad credentials, ...).
    Call,
}

/// An error of a provider call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// What failed.
    pub kind: ProviderErrorKind,
    /// One line saying what is wrong.
    pub message: String,
    /// True when retrying later may help (throttling, capacity).
    pub retryable: bool,
}

impl ProviderError {
    /// A failed call.
    pub fn call(message: impl Into<String>, retryable: bool) -> Self {
        ProviderError {
            kind: ProviderErrorKind::Call,
            message: message.into(),
            retryable,
        }
    }
}

/// The cloud, as the reconciler sees it.
pub trait CloudInstanceProvider: Send + Sync {
    /// Every instance of this cluster that is not terminated.
    fn list(&self) -> impl Future<Output = Result<Vec<CloudInstance>, ProviderError>> + Send;
    /// Asks for new instances (idempotent by `request.request_id`).
    fn launch(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
    /// Asks for instances to be terminated (`request_id` keys the call).
    fn terminate(
        &self,
        cloud_instance_ids: &[String],
        request_id: &str,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
    /// Errors of accepted calls that failed since the last poll.
    fn poll_errors(&self) -> impl Future<Output = Vec<ProviderError>> + Send;
}
