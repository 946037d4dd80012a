//! Generates the gRPC client and server of the node service from the method list below; the
//! messages are hand-written prost structs in `src/wire.rs`, so no `.proto` file and no protoc.

use tonic_build::manual::{Builder, Method, Service};

fn method(
    name: &str,
    route: &str,
    input: &str,
    output: &str,
) -> tonic_build::manual::MethodBuilder {
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::wire::{input}"))
        .output_type(format!("crate::wire::{output}"))
        .codec_path("tonic_prost::ProstCodec")
}

fn main() {
    let service = Service::builder()
        .name("Node")
        .package("railstore.node")
        .method(method("hello", "Hello", "HelloRequest", "HelloReply").build())
        .method(
            method("store", "Store", "StoreChunk", "StoreReply")
                .client_streaming()
                .build(),
        )
        .method(
            method("retrieve", "Retrieve", "RetrieveRequest", "ValueChunk")
                .server_streaming()
                .build(),
        )
        .method(method("delete", "Delete", "DeleteRequest", "DeleteReply").build())
        .method(method("exist", "Exist", "ExistRequest", "ExistReply").build())
        .method(
            method("iterate", "Iterate", "IterateRequest", "IterateChunk")
                .server_streaming()
                .build(),
        )
        .method(method("info", "Info", "DeviceRequest", "InfoReply").build())
        .method(method("sync", "Sync", "DeviceRequest", "SyncReply").build())
        .method(method("compact", "Compact", "CompactRequest", "CompactReply").build())
        .method(method("traffic", "Traffic", "TrafficRequest", "TrafficReply").build())
        .build();
    Builder::new().compile(&[service]);
    println!("cargo:rerun-if-changed=build.rs");
}
