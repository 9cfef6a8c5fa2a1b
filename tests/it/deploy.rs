//! What `deploy/` ships agrees with the binary: the Kubernetes base's
//! PrometheusRule and Grafana dashboard ConfigMap are exactly what
//! `lifeline alert-rules --kubernetes` and `lifeline grafana-dashboard
//! --kubernetes` print, so neither drifts from the metrics; the manual
//! pages and shell completions the packages install are exactly what the
//! binaries print, so neither drifts from the flags.

use std::time::Duration;

use lifeline::telemetry::{alerts, grafana};

/// The external URL the committed files were written with.
const URL: &str = "https://lifeline.example.com";

fn committed(rel: &str) -> String {
    let p = crate::support::repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn same(rel: &str, printed: &str, regenerate: &str) {
    assert!(
        committed(rel) == printed,
        "{rel} differs from what the binary prints; regenerate it:\n  {regenerate} > {rel}"
    );
}

#[test]
fn the_prometheus_rule_is_what_alert_rules_prints() {
    let s = alerts::AlertSettings {
        external_url: URL.into(),
        stranded_for: Duration::from_secs(300),
    };
    same(
        "deploy/kubernetes/base/prometheusrule.yaml",
        &alerts::prometheus_rule_yaml(&s),
        &format!("lifeline alert-rules --kubernetes --external-url {URL}"),
    );
}

#[test]
fn the_dashboard_configmap_is_what_grafana_dashboard_prints() {
    same(
        "deploy/kubernetes/base/grafana-dashboard.yaml",
        &grafana::configmap_yaml(URL),
        &format!("lifeline grafana-dashboard --kubernetes --external-url {URL}"),
    );
}

/// What `lifeline <args>` prints, with an environment that sets nothing
/// (clap's help shows an `env` variable's value when it is set).
pub(crate) fn lifeline(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("lifeline runs");
    assert!(out.status.success(), "lifeline {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Every page in `deploy/man/` is what a binary prints, and every page a
/// binary has is there: `lifeline`'s, one per subcommand (the top page
/// names each), and `lifeline-agent`'s, each package's in a folder of its
/// own. Likewise each completion script.
#[test]
fn the_man_pages_and_completions_are_what_the_binaries_print() {
    let mut expected = vec!["lifeline.1".to_string()];
    same(
        "deploy/man/lifeline/lifeline.1",
        &lifeline(&["man"]),
        "lifeline man",
    );
    let top = lifeline(&["man"]);
    for sub in subcommands() {
        let page = format!("lifeline-{sub}.1");
        assert!(
            top.contains(&format!("lifeline\\-{}(1)", sub.replace('-', "\\-"))),
            "the top page names {page}"
        );
        same(
            &format!("deploy/man/lifeline/{page}"),
            &lifeline(&["man", &sub]),
            &format!("lifeline man {sub}"),
        );
        expected.push(page);
    }
    same(
        "deploy/man/lifeline-agent/lifeline-agent.1",
        &lifeline_agent::args::man_page(),
        "lifeline-agent --man",
    );
    let mut there: Vec<String> =
        std::fs::read_dir(crate::support::repo().join("deploy/man/lifeline"))
            .expect("deploy/man/lifeline")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
    there.sort();
    expected.sort();
    assert_eq!(
        there, expected,
        "deploy/man/lifeline holds exactly the pages lifeline has"
    );
    for shell in ["bash", "zsh", "fish"] {
        same(
            &format!("deploy/completions/lifeline.{shell}"),
            &lifeline(&["completions", shell]),
            &format!("lifeline completions {shell}"),
        );
        let parsed: clap_complete::Shell = shell.parse().expect("a shell");
        same(
            &format!("deploy/completions/lifeline-agent.{shell}"),
            &lifeline_agent::args::completions(parsed),
            &format!("lifeline-agent --completions {shell}"),
        );
    }
}

/// The subcommands with a page of their own, as `lifeline man` says when
/// asked for one it has not.
pub(crate) fn subcommands() -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args(["man", "no-such-subcommand"])
        .output()
        .expect("lifeline runs");
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let (_, list) = err.split_once("the subcommands are: ").expect("the list");
    list.trim().split(", ").map(str::to_string).collect()
}

/// The lines of `text` from the one that contains `start` to the next
/// that is indented no deeper (the YAML block it opens).
fn block<'a>(text: &'a str, start: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(start))
        .unwrap_or_else(|| panic!("no line with {start:?}"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let depth = indent(lines[at]);
    let mut out = vec![lines[at]];
    for l in &lines[at + 1..] {
        if !l.trim().is_empty() && indent(l) <= depth {
            break;
        }
        out.push(l);
    }
    out
}

/// A Kubernetes quantity in bytes: `256Mi`, `1Gi`.
fn quantity(q: &str) -> u64 {
    let q = q.trim();
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("a quantity: {q}"));
    n * match unit {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "" => 1,
        u => panic!("a unit the manifests do not use: {u}"),
    }
}

/// The Deployment's memory request and limit are the memory budget's, for
/// the fleet it is sized for (`lifeline::app::memory`): the request is
/// what Lifeline uses before SQLite's page cache fills, rounded up to
/// 64 MiB; the limit is the whole budget with a quarter more for bursts,
/// rounded up to 128 MiB.
#[test]
fn the_deployments_memory_is_derived_from_the_budget() {
    use lifeline::app::memory::{Budget, Engine, KUBERNETES_AGENTS};
    let b = Budget::of(Engine::Sqlite, KUBERNETES_AGENTS, KUBERNETES_AGENTS);
    let up = |x: u64, step: u64| x.div_ceil(step) * step;
    let want_request = up(b.without_page_cache(), 64 << 20);
    let want_limit = up(b.total() + b.total() / 4, 128 << 20);
    let deployment = committed("deploy/kubernetes/base/deployment.yaml");
    let resources = block(&deployment, "resources:").join("\n");
    let field = |section: &str| {
        let at = resources
            .find(section)
            .unwrap_or_else(|| panic!("no {section} in {resources}"));
        let rest = &resources[at..];
        let m = rest.find("memory:").expect("a memory quantity");
        quantity(rest[m + "memory:".len()..].lines().next().unwrap_or(""))
    };
    let mib = |x: u64| format!("{}Mi", x >> 20);
    assert_eq!(
        (mib(field("requests:")), mib(field("limits:"))),
        (mib(want_request), mib(want_limit)),
        "the Deployment's memory request and limit, from the budget of {KUBERNETES_AGENTS} agents: {b:?}"
    );
}

/// kubelet probes the admin port, whose container port is the one the
/// config's `server.admin_listen` names; Prometheus scrapes it through
/// its own Service; the NetworkPolicy lets only the monitoring
/// namespace's Prometheus reach it, while the main ports stay open.
#[test]
fn the_manifests_probe_and_scrape_the_admin_port_and_only_prometheus_reaches_it() {
    let cfg = lifeline::config::Config::load(
        Some(&crate::support::repo().join("deploy/kubernetes/base/lifeline.toml")),
        |_| None,
    )
    .expect("the base config loads");
    let admin = cfg
        .server
        .admin_listen
        .expect("server.admin_listen is set")
        .port();
    let deployment = committed("deploy/kubernetes/base/deployment.yaml");
    let port = block(&deployment, "- name: admin").join("\n");
    assert!(port.contains(&format!("containerPort: {admin}")), "{port}");
    for probe in ["readinessProbe:", "livenessProbe:", "startupProbe:"] {
        let b = block(&deployment, probe).join("\n");
        assert!(
            b.contains("port: admin"),
            "{probe} probes the admin port:\n{b}"
        );
    }
    let monitor = committed("deploy/kubernetes/base/servicemonitor.yaml");
    assert!(monitor.contains("- port: admin"), "{monitor}");
    assert!(
        monitor.contains("app.kubernetes.io/component: admin"),
        "{monitor}"
    );
    let services = committed("deploy/kubernetes/base/services.yaml");
    let svc = services
        .split("\n---\n")
        .find(|d| d.contains("name: lifeline-admin"))
        .expect("the admin Service");
    assert!(
        svc.contains("component: admin") && svc.contains("targetPort: admin"),
        "{svc}"
    );
    let policy = committed("deploy/kubernetes/base/networkpolicy.yaml");
    let ingress = block(&policy, "  ingress:");
    // Each rule of the ingress list: the admin port's has a `from`, the
    // main ports' none (any source).
    let rules: Vec<String> = ingress[1..]
        .join("\n")
        .split("\n    - ")
        .map(str::to_string)
        .collect();
    let admin_rule = rules
        .iter()
        .find(|r| r.contains(&format!("port: {admin}")))
        .expect("a rule for the admin port");
    assert!(
        admin_rule.contains("from:") && admin_rule.contains("namespaceSelector"),
        "the admin port only from where the manifests say:\n{admin_rule}"
    );
    let main = rules
        .iter()
        .find(|r| r.contains("port: 8080"))
        .expect("a rule for 8080");
    assert!(!main.contains(&format!("port: {admin}")), "{main}");
}

/// The sidecar configs `deploy/` ships name Lifeline's own default gRPC
/// port, where a packaged Lifeline listens for them.
#[test]
fn the_shipped_sidecar_configs_name_lifelines_default_grpc_port() {
    let port = lifeline::config::ServerConfig::default().grpc_listen.port();
    for rel in [
        "deploy/lifeline-agent.toml",
        "deploy/kubernetes/kube-agent/lifeline-agent.toml",
    ] {
        let doc: toml::Table = committed(rel).parse().expect("TOML");
        let urls: Vec<String> = match &doc["lifeline"] {
            toml::Value::String(s) => vec![s.clone()],
            toml::Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            other => panic!("{rel}: lifeline = {other}"),
        };
        assert!(!urls.is_empty(), "{rel}");
        for u in urls {
            let parsed = url::Url::parse(&u).expect("a URL");
            assert_eq!(parsed.port_or_known_default(), Some(port), "{rel}: {u}");
        }
    }
}

/// The kube agents' Role evicts, gets and watches only the StatefulSet's
/// own pods, by name, and reads only their state Secrets: one name per
/// replica the chart values run, under the StatefulSet's name the
/// sidecar's config gives. Nothing in it reaches the namespace's other
/// pods (Teleport's auth and proxy often live there).
#[test]
fn the_kube_agent_role_names_exactly_the_statefulsets_pods() {
    let cfg: toml::Table = committed("deploy/kubernetes/kube-agent/lifeline-agent.toml")
        .parse()
        .expect("TOML");
    let sts = cfg["statefulset"].as_str().expect("statefulset");
    let values = committed("deploy/kubernetes/kube-agent/values-patch.yaml");
    let replicas: usize = values
        .lines()
        .find_map(|l| l.trim().strip_prefix("replicaCount:"))
        .expect("replicaCount")
        .trim()
        .parse()
        .expect("a number");
    let pods: Vec<String> = (0..replicas).map(|i| format!("{sts}-{i}")).collect();
    let secrets: Vec<String> = pods.iter().map(|p| format!("{p}-state")).collect();
    let role = committed("deploy/kubernetes/kube-agent/role.yaml");
    let role = role.split("\n---\n").next().expect("the Role");
    let rules: Vec<&str> = role.split("\n  - apiGroups:").skip(1).collect();
    let names = |rule: &str| -> Vec<String> {
        rule.lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(str::to_string)
            .collect()
    };
    let mut seen = Vec::new();
    for rule in &rules {
        let verbs = rule
            .lines()
            .find_map(|l| l.trim().strip_prefix("verbs:"))
            .expect("verbs");
        let resources = rule
            .lines()
            .find_map(|l| l.trim().strip_prefix("resources:"))
            .expect("resources");
        seen.push((resources.trim().to_string(), verbs.trim().to_string()));
        match (resources.trim(), verbs.trim()) {
            (r#"["pods"]"#, r#"["list"]"#) => assert!(!rule.contains("resourceNames")),
            (r#"["pods"]"#, _) | (r#"["pods/eviction"]"#, _) => {
                assert!(!verbs.contains("list"), "list cannot be held to names");
                assert_eq!(
                    names(rule),
                    pods,
                    "{resources} {verbs}: the StatefulSet's pods only"
                );
            }
            (r#"["secrets"]"#, r#"["get"]"#) => assert_eq!(names(rule), secrets),
            other => panic!("a rule the sidecar does not need: {other:?}"),
        }
    }
    assert!(
        seen.iter()
            .any(|(r, v)| r.contains("pods/eviction") && v.contains("create")),
        "evictions: {seen:?}"
    );
}
