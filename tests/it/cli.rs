//! The command line as an operator meets it: a broken config stops start-up
//! with a message naming the field, and the config exit code.

use std::process::Command;

fn lifeline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lifeline"))
}

/// Runs a command that must stop on its configuration: exit 78, and the
/// message on stderr (returned).
fn config_error(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(78), "{what}: {err}");
    err
}

/// `lifeline serve` with config `text` (written as `<dir>/<name>.toml`)
/// must stop on it: exit 78; its message.
fn serve_refuses(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    config_error(
        lifeline()
            .args(["serve", "--config"])
            .arg(&path)
            .env("LIFELINE_DB", dir.join("x.db")),
        text,
    )
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
        (
            "[[access.tokens]]\nname = \"ops\"\nsha256 = \"my-plain-token\"\nroles = [\"update\"]\n",
            "access.tokens[0].sha256",
        ),
        (
            "[[access.tokens]]\nname = \"ops\"\nsha256 = \"00\"\nroles = [\"admin\"]\n",
            "found `admin`, expected `one of `read`, `update`, `create``",
        ),
        ("[access]\njoin_tokens = [\"abc\"]\n", "access.join_tokens[0]"),
        ("[probes]\nallow = [\"10.0.0.1\"]\n", "probes.allow[0]"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let err = serve_refuses(dir.path(), &format!("bad{i}"), text);
        assert!(
            err.contains(needle),
            "{text:?}: {err:?} should name {needle:?}"
        );
    }
}

/// Guards TLS start-up checks: a wrong path, a certificate that is not
/// one, a key that is not the certificate's, a CA that holds nothing, or
/// half a pair stops `serve` before it listens, naming the field (78).
#[test]
fn tls_files_that_cannot_serve_stop_start_up_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let ca = lifeline_sim::pki::Ca::new("cli CA").unwrap();
    let a = ca.issue("a", &["localhost"]).unwrap();
    let b = ca.issue("b", &["localhost"]).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let (cert, key, other_key) = (
        write("a.crt", &a.cert_pem),
        write("a.key", &a.key_pem),
        write("b.key", &b.key_pem),
    );
    let garbage = write("garbage.pem", "not a certificate\n");
    let tls = |c: &str, k: &str| format!("[server]\ntls_cert = {c:?}\ntls_key = {k:?}\n");
    let cases = [
        (
            tls("/nonexistent/tls.crt", &key),
            "server.tls_cert",
            "/nonexistent/tls.crt",
        ),
        (tls(&garbage, &key), "server.tls_cert", "no CERTIFICATE"),
        (tls(&key, &key), "server.tls_cert", "is it the key?"),
        (tls(&cert, &cert), "server.tls_key", "no PRIVATE KEY"),
        (
            tls(&cert, &other_key),
            "server.tls_key",
            "is not the key of the certificate",
        ),
        (
            format!("[server]\ntls_cert = {cert:?}\n"),
            "server.tls_key",
            "needed too",
        ),
        (
            format!("{}agent_client_ca = {garbage:?}\n", tls(&cert, &key)),
            "server.agent_client_ca",
            "no usable CA certificate",
        ),
        (
            format!("[server]\nagent_client_ca = {cert:?}\n"),
            "server.agent_client_ca",
            "need TLS",
        ),
    ];
    for (i, (text, field, says)) in cases.iter().enumerate() {
        let err = serve_refuses(dir.path(), &format!("tls{i}"), text);
        assert!(
            err.contains(field) && err.contains(says),
            "{text:?}: {err:?} should name {field} and say {says:?}"
        );
        assert!(!err.contains("PRIVATE KEY-----"), "no key material: {err}");
    }
    // check-config reads the files too.
    let path = dir.path().join("tls4.toml");
    let err = config_error(
        lifeline().args(["check-config", "--config"]).arg(&path),
        "check-config",
    );
    assert!(err.contains("is not the key of the certificate"), "{err}");
}

#[test]
fn bad_environment_override_names_the_variable() {
    let err = config_error(
        lifeline()
            .args(["check-config"])
            .env("LIFELINE_RETENTION", "forever"),
        "LIFELINE_RETENTION=forever",
    );
    assert!(err.contains("LIFELINE_RETENTION"), "{err}");
}

#[test]
fn missing_config_file_is_a_clear_error() {
    let err = config_error(
        lifeline().args(["serve", "--config", "/nonexistent/lifeline.toml"]),
        "missing file",
    );
    assert!(err.contains("/nonexistent/lifeline.toml"), "{err}");
}

#[test]
fn example_config_checks_out() {
    let out = lifeline()
        .args(["check-config", "--config"])
        .arg(crate::support::repo().join("lifeline.example.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Guards `lifeline token new`: the printed config lines are valid config
/// that admits the printed token (only its hash is in the file).
#[test]
fn token_new_prints_a_token_and_config_that_admits_it() {
    let out = lifeline()
        .args([
            "token",
            "new",
            "--name",
            "ops",
            "--roles",
            "read,update,create",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ll_"))
        .expect("a token line")
        .to_string();
    let toml = &text[text.find("[[access.tokens]]").expect("config lines")..];
    assert!(!toml.contains(&token), "the config holds no plain token");
    let cfg = lifeline::config::Config::from_toml(toml).expect("valid TOML");
    cfg.validate().expect("valid config");
    let a = lifeline::access::Access::new(&cfg.access, lifeline::clock::Clock::system());
    assert_eq!(a.authenticate(&token).map(|p| p.name), Some("ops".into()));

    let out = lifeline()
        .args(["token", "new", "--roles", "root"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("root"));
}

/// Guards `lifeline alert-rules` and `lifeline grafana-dashboard`: the
/// external URL comes from the config or the flag and reaches every link;
/// a wrong one exits 78 naming it. When `promtool` is on the path (CI
/// installs it), the rules pass `promtool check rules`.
#[test]
fn alert_rules_and_dashboard_link_to_the_external_url() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lifeline.toml");
    std::fs::write(
        &cfg,
        "[server]\nexternal_url = \"https://ll.example.com/\"\n",
    )
    .unwrap();
    let out = lifeline()
        .args(["alert-rules", "--stranded-for", "10m", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rules = String::from_utf8(out.stdout).unwrap();
    assert!(
        rules.contains("dashboard: \"https://ll.example.com/auth\""),
        "{rules}"
    );
    assert!(rules.contains("> 600"), "{rules}");
    assert!(!rules.contains("ll.example.com//"), "{rules}");

    let out = lifeline()
        .args([
            "grafana-dashboard",
            "--external-url",
            "https://other.example",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["links"][0]["url"], "https://other.example/");
    assert!(d["panels"].as_array().is_some_and(|p| p.len() > 10));

    let err = config_error(
        lifeline().args(["alert-rules", "--external-url", "ll.example.com"]),
        "a URL without a scheme",
    );
    assert!(err.contains("--external-url"), "{err}");

    let file = dir.path().join("rules.yml");
    std::fs::write(&file, &rules).unwrap();
    let tests = dir.path().join("rules_test.yml");
    std::fs::write(&tests, RULES_TEST).unwrap();
    for (args, target) in [(["check", "rules"], &file), (["test", "rules"], &tests)] {
        match Command::new("promtool").args(args).arg(target).output() {
            Ok(out) => assert!(
                out.status.success(),
                "promtool {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && std::env::var_os("CI").is_none() =>
            {
                eprintln!("promtool not found: rules not checked (CI installs it)");
                return;
            }
            Err(e) => panic!("promtool: {e}"),
        }
    }
}

/// `promtool test rules` over the generated file (`rules.yml`, stranded
/// after 10 minutes, external URL `https://ll.example.com`): a proxy's
/// root cause pages once it is older than that, with the agents' count
/// and a link to the agents behind that proxy; an auth server pages after
/// a minute of NOT_SERVING; failing signals page by their share.
const RULES_TEST: &str = r#"rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'lifeline_root_cause_agents{cause="proxy_expired",resource="proxy-2",instance="ll:8080"}'
        values: '38x20'
      - series: 'lifeline_root_cause_age_seconds{cause="proxy_expired",resource="proxy-2",instance="ll:8080"}'
        values: '0+60x20'
      - series: 'lifeline_auth_server_health{auth_server="auth-1",health="NOT_SERVING",instance="ll:8080"}'
        values: '1x20'
      - series: 'lifeline_signals_total{kind="reconnect",outcome="acked",instance="ll:8080"}'
        values: '0+10x20'
      - series: 'lifeline_signals_total{kind="reconnect",outcome="timeout",instance="ll:8080"}'
        values: '0+10x20'
    alert_rule_test:
      - eval_time: 9m
        alertname: LifelineAgentsStranded
        exp_alerts: []
      - eval_time: 12m
        alertname: LifelineAgentsStranded
        exp_alerts:
          - exp_labels:
              severity: critical
              cause: proxy_expired
              resource: proxy-2
              instance: ll:8080
            exp_annotations:
              summary: "38 agents stranded by proxy_expired of proxy-2"
              description: "Agents have been stranded for more than 10m: root cause proxy_expired, resource proxy-2 (Lifeline ll:8080). Check that Lifeline's reconnect signals reach them and that a live proxy is left to move to."
              dashboard: "https://ll.example.com/agents?state=stranded&proxy=proxy-2"
      - eval_time: 2m
        alertname: LifelineAuthServerNotServing
        exp_alerts:
          - exp_labels:
              severity: critical
              auth_server: auth-1
              health: NOT_SERVING
              instance: ll:8080
            exp_annotations:
              summary: "Auth server auth-1 is NOT_SERVING"
              description: "Auth server auth-1 has answered NOT_SERVING on its gRPC health stream for a minute; the agents attached to it are stranded as auth_unhealthy (Lifeline ll:8080)."
              dashboard: "https://ll.example.com/auth"
      - eval_time: 20m
        alertname: LifelineSignalsFailing
        exp_alerts:
          - exp_labels:
              severity: warning
              instance: ll:8080
            exp_annotations:
              summary: "50% of Lifeline's signals fail or time out"
              description: "Over ten minutes, more than one signal in ten ended failed, undeliverable or timed out: agents are not acting on reconnects (Lifeline ll:8080)."
              dashboard: "https://ll.example.com/signals"
"#;

/// A start-up that fails says its cause once: no error repeated after
/// its own message, and no task reported stopped after the cause.
#[test]
fn a_failed_start_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = lifeline()
        .args(["serve"])
        .env("LIFELINE_DB", dir.path().join("x.db"))
        .env("LIFELINE_LISTEN", held.local_addr().unwrap().to_string())
        .env("LIFELINE_GRPC_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.matches("Address already in use").count(),
        1,
        "the cause once:\n{err}"
    );
    assert!(err.contains("cannot listen for HTTP"), "{err}");
    assert!(
        !err.contains("task"),
        "no task said to stop after it:\n{err}"
    );
}

/// `check-config` prints the effective configuration as TOML: every
/// section, defaults included, that reads back as the same configuration;
/// a database password and a webhook's path (its secret) never shown.
#[test]
fn check_config_prints_the_effective_configuration_as_toml_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets.toml");
    std::fs::write(
        &path,
        "[storage]\nurl = \"postgres://lifeline:hunter2@db.example.com:5432/lifeline\"\n\n[[notify.webhooks]]\nname = \"ops\"\nurl = \"https://hooks.slack.com/services/T0/B0/XXXXsecret\"\nsecret_file = \"/etc/lifeline/ops.secret\"\nformat = \"slack\"\n",
    )
    .unwrap();
    let out = lifeline()
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in ["hunter2", "XXXXsecret", "services/T0"] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    assert!(text.contains("db.example.com:5432"), "{text}");
    assert!(!text.contains("Config {"), "not a Debug dump:\n{text}");
    let doc: toml::Table = text.parse().expect("the output is TOML");
    for section in [
        "server", "cluster", "storage", "signals", "access", "notify",
    ] {
        assert!(doc.contains_key(section), "[{section}] in\n{text}");
    }
    // The example config, printed and read back, prints the same again.
    let example = crate::support::repo().join("lifeline.example.toml");
    let first = lifeline()
        .args(["check-config", "--config"])
        .arg(&example)
        .output()
        .unwrap();
    assert!(first.status.success());
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &first.stdout).unwrap();
    let second = lifeline()
        .args(["check-config", "--config"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&second.stdout),
        "the printed configuration reads back as itself"
    );
}
