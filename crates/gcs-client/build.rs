//! Compiles rayscale's own Ray-compatible .proto files (prost + tonic + pbjson).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY-free: build scripts are single-threaded; prost-build reads PROTOC.
    unsafe_env(&protoc);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("ray_descriptors.bin");
    let files = [
        "proto/ray/rpc/common.proto",
        "proto/ray/rpc/autoscaler.proto",
        "proto/ray/rpc/instance_manager.proto",
        "proto/ray/rpc/gcs_kv.proto",
        "proto/ray/rpc/gcs_node.proto",
        "proto/rayscale/expander/v1/expander.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .btree_map(".")
        // Each message is decoded from one contiguous slice (src/codec.rs).
        .codec_path("crate::codec::SliceCodec")
        .file_descriptor_set_path(&descriptors)
        .compile_protos(&files, &["proto"])?;
    let set = std::fs::read(&descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        .btree_map(["."])
        .build(&[".ray"])?;
    Ok(())
}

fn unsafe_env(protoc: &std::path::Path) {
    // The 2024 edition marks set_var unsafe; a build script has no other threads.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("PROTOC", protoc);
    }
}
