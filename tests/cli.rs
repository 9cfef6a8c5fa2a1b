//! The command line as an operator meets it: a broken config stops start-up
//! with a message naming the field, and the config exit code.

use std::process::Command;

fn lifeline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lifeline"))
}

/// Guards "a broken config file gets a clear error": the field is named and
/// the exit code is EX_CONFIG (78).
#[test]
fn invalid_config_names_the_field_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[storage]\nretention = \"5s\"\n", "storage.retention"),
        ("[storage]\nretension = \"1h\"\n", "retension"),
        ("[server]\nlisten = \"localhost\"\n", "server.listen"),
        ("[health]\nunknown_grace = \"soon\"\n", "unknown_grace"),
        (
            "[[auth_servers]]\nname = \"a\"\naddr = \"nope\"\n",
            "auth_servers[0].addr",
        ),
        ("this is not toml", "config file"),
        (
            "[signals]\ngrpc_client_lb_policy = '{\"loadBalancingConfig\": 1}'\n",
            "signals.grpc_client_lb_policy",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = lifeline()
            .args(["serve", "--config"])
            .arg(&path)
            .env("LIFELINE_DB", dir.path().join("x.db"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{text:?}: {err}");
        assert!(
            err.contains(needle),
            "{text:?}: {err:?} should name {needle:?}"
        );
    }
}

#[test]
fn bad_environment_override_names_the_variable() {
    let out = lifeline()
        .args(["check-config"])
        .env("LIFELINE_RETENTION", "forever")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("LIFELINE_RETENTION"), "{err}");
}

#[test]
fn missing_config_file_is_a_clear_error() {
    let out = lifeline()
        .args(["serve", "--config", "/nonexistent/lifeline.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("/nonexistent/lifeline.toml"), "{err}");
}

#[test]
fn example_config_checks_out() {
    let out = lifeline()
        .args(["check-config", "--config"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/lifeline.example.toml"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
