//! Fakes and emulators of cloud APIs, one file per cloud, each citing the reference it
//! follows.

pub mod aws;
pub mod azure;
pub mod ec2_pages;
pub mod gce;
pub mod kube;
pub mod record;
