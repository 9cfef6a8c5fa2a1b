//! Compiles the workspace's `proto/lifeline/v1/*.proto` and the subset of
//! Teleport's API under `proto/teleport/` with protox (pure Rust), so a
//! fresh machine needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The protocol files stay at the workspace's top level (`proto/`).
    const ROOT: &str = "../../proto";
    let files = [
        "lifeline/v1/cluster.proto",
        "lifeline/v1/signals.proto",
        "lifeline/v1/service_config.proto",
        "teleport/legacy/types/types.proto",
        "teleport/legacy/client/proto/authservice.proto",
        "teleport/presence/v1/service.proto",
    ]
    .map(|f| format!("{ROOT}/{f}"));
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(&files, [ROOT])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // `rpc Connect` (a fixed contract name) would collide with the
        // generated `connect()` constructor; channels are built explicitly.
        .build_transport(false)
        // Prost's encoding with smaller first buffers (see `codec`).
        .codec_path("crate::codec::Lean")
        // A watch event's resource is boxed: the event is moved through
        // the stream, the burst and the conversion, and its largest variant
        // is hundreds of bytes.
        .boxed(".proto.Event.Resource")
        .compile_fds(fds)?;
    Ok(())
}
