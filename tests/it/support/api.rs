//! Talking to a running Lifeline as its users do: the CLI, the API's
//! JSON, the dashboard's forms.

use super::*;

use lifeline::clock::Ts;
use serde_json::Value;

/// Runs the `lifeline` binary against `c` (`--server` appended) as
/// [`UPDATER`] (`LIFELINE_TOKEN`; a `--token` in `args` wins): exit code,
/// stdout, stderr.
pub async fn cli(c: &Running, args: &[&str]) -> (i32, String, String) {
    let out = real_timeout(
        REAL_WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
            .args(args)
            .args(["--server", &c.ll().base_url()])
            .env_remove("RUST_LOG")
            .env("LIFELINE_TOKEN", UPDATER)
            .output(),
    )
    .await
    .expect("CLI finished in time")
    .expect("CLI runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn names(items: &Value) -> Vec<String> {
    let mut v: Vec<String> = items
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `items[*][key]` as strings, in the API's order.
pub fn strs(items: &Value, key: &str) -> Vec<String> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .map(|i| i[key].as_str().expect("a string field").to_string())
        .collect()
}

/// `items[*]["id"]`, in the API's order.
pub fn ids(items: &Value) -> Vec<i64> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .map(|i| i["id"].as_i64().expect("an integer id"))
        .collect()
}

/// Parses an API timestamp.
pub fn ts(v: &Value) -> Ts {
    Ts::parse_rfc3339(v.as_str().expect("timestamp string")).expect("RFC 3339")
}

/// The `name=value` of the cookie a response sets, as a browser sends it
/// back.
pub fn cookie_pair(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("set-cookie")
        .expect("the response sets a cookie")
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_string()
}

/// The sign-in page's CSRF cookie (`name=value`) and form token, as a
/// browser would get them before posting `/signin`.
pub async fn signin_csrf(client: &reqwest::Client, base: &str) -> (String, String) {
    let page = bounded(
        "the sign-in page",
        client.get(format!("{base}/signin?next=/agents")).send(),
    )
    .await
    .expect("sign-in page");
    let cookie = cookie_pair(&page);
    let html = page.text().await.expect("html");
    let at = html.find("name=\"csrf\" value=\"").expect("CSRF field") + 19;
    let csrf = html[at..at + html[at..].find('"').expect("end")].to_string();
    (cookie, csrf)
}

/// Signs in at `base` with `token` from the sign-in page's form (its CSRF
/// cookie and token): the cookies a signed-in browser then sends (the
/// CSRF cookie and the session).
pub async fn signed_in(client: &reqwest::Client, base: &str, token: &str) -> String {
    let (csrf_cookie, csrf) = signin_csrf(client, base).await;
    let signed = bounded(
        "sign-in",
        client
            .post(format!("{base}/signin"))
            .header("cookie", &csrf_cookie)
            .form(&[
                ("csrf", csrf.as_str()),
                ("token", token),
                ("next", "/agents"),
            ])
            .send(),
    )
    .await
    .expect("answer");
    assert_eq!(signed.status().as_u16(), 303, "signed in");
    let session = signed.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_string();
    format!("{csrf_cookie}; {session}")
}

/// The agents page at `base`, as a browser sending `cookies` gets it.
pub async fn agents_page(client: &reqwest::Client, base: &str, cookies: &str) -> String {
    bounded(
        "a dashboard page",
        client
            .get(format!("{base}/agents"))
            .header("cookie", cookies)
            .send(),
    )
    .await
    .expect("page")
    .text()
    .await
    .expect("html")
}

/// The CSRF token of a dashboard page fetched with `cookies` (the form
/// token a signed-in browser's pages carry).
pub async fn page_csrf(client: &reqwest::Client, base: &str, cookies: &str) -> String {
    let html = agents_page(client, base, cookies).await;
    let at = html.find("name=\"csrf\" value=\"").expect("CSRF field") + 19;
    html[at..at + html[at..].find('"').expect("end")].to_string()
}

/// Every figure under a key that names something wrong (rejected,
/// refused, failed, failures, dropped, errors) that is not 0, or a map of
/// such figures not all 0: each as `path.key = value`.
pub fn wrong_figures(path: &str, v: &Value, out: &mut Vec<String>) {
    let Some(o) = v.as_object() else { return };
    for (k, x) in o {
        let at = format!("{path}.{k}");
        let wrong = [
            "rejected", "refused", "failed", "failures", "dropped", "errors",
        ]
        .iter()
        .any(|w| k.contains(w));
        match x {
            Value::Number(n) if wrong && n.as_f64() != Some(0.0) => out.push(format!("{at} = {n}")),
            Value::Object(m) if wrong => {
                if !m.values().all(|n| n.as_f64() == Some(0.0)) {
                    out.push(format!("{at} = {x}"));
                }
            }
            _ => wrong_figures(&at, x, out),
        }
    }
}

/// A JSON webhook `name` to `url`, signed with the secret in `secret`.
pub fn webhook(
    name: &str,
    url: String,
    secret: &std::path::Path,
) -> lifeline::config::WebhookConfig {
    lifeline::config::WebhookConfig {
        name: name.into(),
        url,
        secret_file: secret.to_path_buf(),
        events: Vec::new(),
        format: lifeline::config::WebhookFormat::Json,
        ca_file: None,
        timeout: std::time::Duration::from_secs(10),
        max_age: std::time::Duration::from_secs(24 * 3600),
    }
}
