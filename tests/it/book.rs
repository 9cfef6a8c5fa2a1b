//! The book (`docs/`): each page generated from the code is what the code
//! says now (`LIFELINE_BLESS=1 cargo test --test it book::` writes them
//! again), every page is reachable from `SUMMARY.md`, every relative link,
//! anchor and include resolves, and the architecture page names every
//! room under `src/` and every crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::deploy::{lifeline, subcommands};
use crate::support::{self, Cluster, Store};

fn book() -> PathBuf {
    support::repo().join("docs/src")
}

/// Holds the region of `page` between `<!-- name:begin -->` and
/// `<!-- name:end -->` to `generated`; with `LIFELINE_BLESS` set, writes
/// it instead. Returns what differed (an empty string when nothing did).
pub(crate) fn region(page: &str, name: &str, generated: &str) -> String {
    let path = book().join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let (begin, end) = (
        format!("<!-- {name}:begin -->\n"),
        format!("<!-- {name}:end -->"),
    );
    let a = text
        .find(&begin)
        .unwrap_or_else(|| panic!("{page}: no {begin:?}"))
        + begin.len();
    let b = text[a..]
        .find(&end)
        .unwrap_or_else(|| panic!("{page}: no {end:?}"))
        + a;
    if text[a..b] == *generated {
        return String::new();
    }
    if std::env::var_os("LIFELINE_BLESS").is_some() {
        let written = format!("{}{generated}{}", &text[..a], &text[b..]);
        std::fs::write(&path, written).expect("page written");
        return String::new();
    }
    format!("docs/src/{page} ({name})")
}

fn assert_none_differ(differ: Vec<String>) {
    let differ: Vec<String> = differ.into_iter().filter(|d| !d.is_empty()).collect();
    assert!(
        differ.is_empty(),
        "generated pages differ from the code: {differ:?}; write them again with LIFELINE_BLESS=1 cargo test --test it book::"
    );
}

fn cli_markdown() -> String {
    let mut out = format!("## lifeline\n\n```text\n{}```\n", lifeline(&["--help"]));
    for sub in subcommands() {
        out.push_str(&format!(
            "\n## lifeline {sub}\n\n```text\n{}```\n",
            lifeline(&["help", &sub])
        ));
    }
    out
}

#[test]
fn the_pages_generated_from_the_code_are_what_it_says() {
    use lifeline::telemetry::alerts;
    let s = alerts::AlertSettings {
        external_url: "https://lifeline.example.com".into(),
        stranded_for: std::time::Duration::from_secs(300),
    };
    assert_none_differ(vec![
        region(
            "reference/errors.md",
            "error-codes",
            &lifeline::http::error::codes_markdown(),
        ),
        region(
            "reference/alerts.md",
            "alert-rules",
            &alerts::rules_markdown(&s),
        ),
        region(
            "reference/alerts.md",
            "alert-rules-yaml",
            &format!("```yaml\n{}```\n", alerts::rules_yaml(&s)),
        ),
        region(
            "troubleshooting.md",
            "ready-reasons",
            &lifeline::http::probes::reasons_markdown(),
        ),
        region("reference/cli.md", "cli", &cli_markdown()),
        region(
            "operating/memory.md",
            "budget",
            &lifeline::app::memory::parts_markdown(),
        ),
    ]);
}

/// Every line `/readyz` can write opens with an entry of `READY_REASONS`,
/// and every entry is written somewhere.
#[test]
fn every_readyz_problem_is_in_the_troubleshooting_list() {
    let src = std::fs::read_to_string(support::repo().join("src/http/probes.rs")).expect("source");
    let body = &src[src.find("async fn readyz(").expect("readyz")..];
    let body = &body[..body.find("\n}\n").expect("its end")];
    // Problems written before readiness is decided fail it; after, not.
    let decided = body
        .find("let ready = ")
        .expect("where readiness is decided");
    let mut written: Vec<(String, bool)> = Vec::new();
    for (at, _) in body.match_indices("problems.push(format!(") {
        let lit = body[at + "problems.push(format!(".len()..].trim_start();
        let lit = lit.strip_prefix('"').expect("a literal");
        written.push((
            lit[..lit.find(['{', '"']).expect("its end")].to_string(),
            at < decided,
        ));
    }
    assert!(written.len() >= 7, "{written:?}");
    let reasons = lifeline::http::probes::READY_REASONS;
    let same = |w: &str, r: &lifeline::http::probes::ReadyReason| {
        w.starts_with(r.opens) || r.opens.starts_with(w)
    };
    for (w, fails) in &written {
        let listed = reasons.iter().find(|r| same(w, r));
        assert!(
            listed.is_some(),
            "/readyz writes {w:?}, which READY_REASONS does not list"
        );
        assert_eq!(
            listed.map(|r| r.fails),
            Some(*fails),
            "READY_REASONS says whether {w:?} fails /readyz otherwise than readyz does"
        );
    }
    for r in reasons {
        assert!(
            written.iter().any(|(w, _)| same(w, r)),
            "READY_REASONS lists {:?}, which /readyz never writes",
            r.opens
        );
    }
}

fn cell(t: &str) -> String {
    t.replace('|', "\\|").replace('\n', " ")
}

/// The metric families of a scrape: name → (type, help).
fn families(scrape: &str) -> BTreeMap<String, (String, String)> {
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().1 = help.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().0 = kind.to_string();
        }
    }
    out
}

fn metrics_markdown(scrape: &str) -> String {
    let mut out = String::from("| metric | type | help |\n|---|---|---|\n");
    for (name, (kind, help)) in families(scrape) {
        out.push_str(&format!("| `{name}` | {kind} | {} |\n", cell(&help)));
    }
    out
}

fn operations_markdown(doc: &Value) -> String {
    let mut out = String::from("| method | path | what it does | tag |\n|---|---|---|---|\n");
    let paths = doc["paths"].as_object().expect("paths");
    for (path, ops) in paths {
        for method in ["get", "post", "put", "patch", "delete"] {
            let Some(op) = ops.get(method) else { continue };
            let tag = op["tags"][0].as_str().unwrap_or("");
            let what = op["summary"]
                .as_str()
                .or(op["description"].as_str())
                .unwrap_or("");
            out.push_str(&format!(
                "| {} | `{path}` | {} | {tag} |\n",
                method.to_uppercase(),
                cell(what)
            ));
        }
    }
    out
}

/// Every `$ref` to a component schema under `v`.
fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    if let Some(name) = x
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    {
                        out.insert(name.to_string());
                    }
                } else {
                    refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

fn webhooks_markdown(doc: &Value) -> String {
    let schemas = &doc["components"]["schemas"];
    let mut seen = BTreeSet::new();
    let mut todo = vec!["WebhookEvent".to_string()];
    let mut order = Vec::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let mut more = BTreeSet::new();
        refs(&schemas[&name], &mut more);
        todo.extend(more.into_iter().rev());
        order.push(name);
    }
    let mut out = String::new();
    for name in order {
        let schema = serde_json::to_string_pretty(&schemas[&name]).expect("JSON");
        out.push_str(&format!("## {name}\n\n```json\n{schema}\n```\n\n"));
    }
    out
}

/// The pages generated from a running Lifeline: its metric families as
/// a fresh one serves them, and its API's operations and webhook bodies
/// from the document it serves.
#[tokio::test(start_paused = true)]
async fn the_pages_generated_from_a_running_lifeline_are_what_it_serves() {
    let c = Cluster::six_legacy().store(Store::Sqlite).start().await;
    c.ready().await;
    let (status, scrape) = c.get_text("/metrics").await;
    assert_eq!(status, 200);
    let (status, doc) = c.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_none_differ(vec![
        region(
            "reference/metrics.md",
            "metrics",
            &metrics_markdown(&scrape),
        ),
        region(
            "reference/api.md",
            "api-operations",
            &operations_markdown(&doc),
        ),
        region(
            "reference/webhooks.md",
            "webhook-schemas",
            &webhooks_markdown(&doc),
        ),
    ]);
    c.shutdown().await;
}

fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    support::files_ending(dir, "md", out);
}

/// A page's lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchor mdBook gives a heading: lower case, letters, digits, `-`
/// and `_` kept, spaces as `-`, the rest dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// The targets of `[text](target)` links in a line, inline code left out.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = false;
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '`' {
            code = !code;
        } else if !code && c == ']' && bytes.get(i + 1) == Some(&'(') {
            let rest: String = bytes[i + 2..].iter().collect();
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
            }
        }
        i += 1;
    }
    out
}

#[test]
fn every_page_is_in_the_summary_and_every_link_resolves() {
    let root = book();
    let summary = std::fs::read_to_string(root.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = summary
        .lines()
        .flat_map(links)
        .map(|l| root.join(l))
        .collect();
    let mut all = Vec::new();
    pages(&root, &mut all);
    let mut wrong = Vec::new();
    for p in &all {
        if p.file_name().is_some_and(|n| n == "SUMMARY.md") {
            continue;
        }
        if !listed.contains(p) {
            wrong.push(format!("{} is not in SUMMARY.md", p.display()));
        }
    }
    for p in &listed {
        if !p.exists() {
            wrong.push(format!(
                "SUMMARY.md lists {}, which does not exist",
                p.display()
            ));
        }
    }
    for p in &all {
        let text = std::fs::read_to_string(p).expect("page");
        let dir = p.parent().expect("a folder");
        for line in text.lines() {
            if let Some(at) = line.find("{{#include ") {
                let rest = &line[at + "{{#include ".len()..];
                let target = rest[..rest.find("}}").expect("closed")].trim();
                if !dir.join(target).exists() {
                    wrong.push(format!(
                        "{}: includes {target}, which does not exist",
                        p.display()
                    ));
                }
            }
        }
        for line in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let file = if file.is_empty() {
                    p.clone()
                } else {
                    dir.join(file)
                };
                let Ok(linked) = std::fs::read_to_string(&file) else {
                    wrong.push(format!(
                        "{}: links to {target}, which does not exist",
                        p.display()
                    ));
                    continue;
                };
                if !anchor.is_empty() && !anchors(&linked).contains(anchor) {
                    wrong.push(format!(
                        "{}: links to {target}, which has no such heading",
                        p.display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every room (each module under `src/`) and every crate under `crates/`
/// is named on the architecture page.
#[test]
fn the_architecture_page_names_every_room_and_crate() {
    let page = std::fs::read_to_string(book().join("architecture/index.md")).expect("page");
    let repo = support::repo();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(repo.join("src")).expect("src").flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if name == "lib" {
            continue;
        }
        let named = [
            format!("src/{name}/"),
            format!("src/{name}.rs"),
            format!("`{name}`"),
        ];
        if !named.iter().any(|n| page.contains(n.as_str())) {
            missing.push(format!("src/{name}"));
        }
    }
    for e in std::fs::read_dir(repo.join("crates"))
        .expect("crates")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().to_string();
        if !page.contains(&name) {
            missing.push(format!("crates/{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not named on docs/src/architecture/index.md: {missing:?}"
    );
}

/// The README stays a front door: at most 150 lines, the two commands
/// first, and links into the book.
#[test]
fn the_readme_is_short_and_points_into_the_book() {
    let readme = std::fs::read_to_string(support::repo().join("README.md")).expect("README");
    assert!(
        readme.lines().count() <= 150,
        "README has {} lines",
        readme.lines().count()
    );
    let first_block = readme.split("```").nth(1).expect("a code block");
    assert!(
        first_block.contains("cargo run --release -- demo"),
        "{first_block}"
    );
    assert!(first_block.contains("cargo test"), "{first_block}");
    for l in readme.lines().flat_map(links) {
        if l.contains("://") {
            continue;
        }
        let file = l.split('#').next().unwrap_or("");
        assert!(
            support::repo().join(file).exists(),
            "README links to {l}, which does not exist"
        );
    }
    assert!(readme.contains("docs/src/"), "README points into the book");
}

/// The book's `console` examples print what the book says they print,
/// run by `trycmd` against the binary the tests build.
#[test]
fn the_books_command_examples_print_what_they_say() {
    trycmd::TestCases::new()
        .register_bin("lifeline", Path::new(env!("CARGO_BIN_EXE_lifeline")))
        .case(book().join("reference/cli.md"));
}

/// One `curl` example of the book, as a request.
#[derive(Debug)]
struct Curl {
    page: String,
    method: String,
    path: String,
    token: bool,
    body: Option<String>,
    /// The `jq` filter it pipes the answer through, if any.
    jq: Option<String>,
}

/// Every `curl` of `localhost:8080/api/…` in the book's `sh` blocks
/// (a line ending in `\` goes on on the next).
fn curls() -> Vec<Curl> {
    let mut all = Vec::new();
    pages(&book(), &mut all);
    let mut out = Vec::new();
    for p in all {
        let text = std::fs::read_to_string(&p).expect("page");
        let page = p.strip_prefix(book()).unwrap_or(&p).display().to_string();
        let mut in_sh = false;
        let mut joined = String::new();
        for line in text.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            if !in_sh {
                continue;
            }
            joined.push_str(line.trim_end_matches('\\'));
            if line.ends_with('\\') {
                joined.push(' ');
                continue;
            }
            let cmd = std::mem::take(&mut joined);
            let cmd = cmd.trim();
            if !cmd.starts_with("curl ") {
                continue;
            }
            let (request, jq) = match cmd.split_once(" | jq") {
                Some((r, j)) => (r, Some(shlex::split(j).unwrap_or_default().join(" "))),
                None => (cmd, None),
            };
            let words = shlex::split(request).unwrap_or_else(|| panic!("{page}: {cmd}"));
            let mut c = Curl {
                page: page.clone(),
                method: "GET".into(),
                path: String::new(),
                token: false,
                body: None,
                jq,
            };
            let mut it = words.iter().skip(1);
            while let Some(w) = it.next() {
                match w.as_str() {
                    "-X" => c.method = it.next().expect("a method").clone(),
                    "-H" => {
                        c.token |= it
                            .next()
                            .expect("a header")
                            .starts_with("Authorization: Bearer")
                    }
                    "-d" => c.body = it.next().cloned(),
                    w if w.starts_with('-') => {}
                    url => {
                        if let Some((_, path)) = url.split_once("localhost:8080") {
                            c.path = path.to_string();
                        }
                    }
                }
            }
            if c.path.starts_with("/api/") {
                out.push(c);
            }
        }
    }
    out
}

/// The fields a `jq` filter of the book reads: `.a, .b` and
/// `.items[] | {a, b}` (each item's).
fn jq_fields(filter: &str) -> (Vec<String>, Vec<String>) {
    let filter = filter.trim();
    if let Some((_, fields)) = filter.split_once("| {") {
        let item = fields
            .trim_end_matches('}')
            .split(',')
            .map(|f| f.trim().to_string())
            .collect();
        return (vec!["items".into()], item);
    }
    let top = filter
        .split(',')
        .filter_map(|t| t.trim().strip_prefix('.'))
        .filter(|t| !t.is_empty())
        .map(|t| t.split(['.', '[']).next().unwrap_or("").to_string())
        .collect();
    (top, Vec::new())
}

/// Every `curl` example of the book's API answers 2xx from `lifeline
/// demo`, started here as a reader starts it (on free ports), once its
/// chaos has opened an incident, with the fields its `jq` filter reads.
#[tokio::test]
async fn the_books_api_examples_answer_as_they_say_on_the_demo() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut demo, base, _) = crate::demo::start_demo(
        dir.path(),
        &["--agents", "60", "--ttl", "4s", "--chaos-period", "2s"],
        &[],
    )
    .await;
    let http = reqwest::Client::new();
    // Real time: the demo is its own process. Bounded, each poll a
    // quarter of a second apart.
    let waited = lifeline::clock::Stopwatch::start();
    loop {
        let incidents: Value = match http
            .get(format!("{base}/api/v1/incidents?limit=1"))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        if incidents["items"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(120),
            "the demo's chaos opened no incident in 2 minutes: {incidents}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let examples = curls();
    assert!(examples.len() >= 10, "{examples:?}");
    for ex in &examples {
        let url = format!("{base}{}", ex.path);
        let method = reqwest::Method::from_bytes(ex.method.as_bytes()).expect("a method");
        let mut req = http.request(method, &url);
        if ex.token {
            req = req.bearer_auth(crate::demo::TOKEN);
        }
        if let Some(b) = &ex.body {
            req = req
                .header("content-type", "application/json")
                .body(b.clone());
        }
        let resp = crate::support::bounded(&format!("{} {}", ex.method, ex.path), req.send())
            .await
            .expect("answered");
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(
            (200..300).contains(&status),
            "{}: {} {} → {status} {body}",
            ex.page,
            ex.method,
            ex.path
        );
        if let Some(filter) = &ex.jq {
            let (top, item) = jq_fields(filter);
            for f in &top {
                assert!(
                    body.get(f).is_some(),
                    "{}: {} has no {f:?}: {body}",
                    ex.page,
                    ex.path
                );
            }
            if let Some(first) = body["items"].as_array().and_then(|a| a.first()) {
                for f in &item {
                    assert!(
                        first.get(f).is_some(),
                        "{}: {}'s items have no {f:?}: {first}",
                        ex.page,
                        ex.path
                    );
                }
            }
        }
    }
    let _ = demo.kill().await;
}
