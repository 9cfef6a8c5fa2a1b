//! How `check-config` shows what may be a secret: a URL keeps its scheme,
//! host and port, and loses its user, password, path and query (a Slack
//! webhook's path is its secret); a duration that may be off says so.

use std::time::Duration;

use serde::Serializer;

/// A URL as it may be shown: `scheme://host:port/…`, nothing after.
pub fn shown_url(u: &str) -> String {
    match url::Url::parse(u) {
        Ok(p) => {
            let host = p.host_str().unwrap_or_default();
            let port = p.port().map(|n| format!(":{n}")).unwrap_or_default();
            let rest = if p.path().len() > 1 || p.query().is_some() {
                "/(redacted)"
            } else {
                ""
            };
            let user = if p.username().is_empty() && p.password().is_none() {
                ""
            } else {
                "(redacted)@"
            };
            format!("{}://{user}{host}{port}{rest}", p.scheme())
        }
        Err(_) => "(redacted: not a URL)".into(),
    }
}

pub fn url<S: Serializer>(u: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shown_url(u))
}

pub fn urls<S: Serializer>(us: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(us.iter().map(|u| shown_url(u)))
}

/// `"off"`, or a humantime duration, as the key is written.
pub fn duration_or_off<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        None => s.serialize_str("off"),
        Some(d) => s.collect_str(&humantime::format_duration(*d)),
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_url_is_shown_without_what_may_be_secret() {
        assert_eq!(
            shown_url("https://hooks.slack.com/services/T0/B0/XXXX"),
            "https://hooks.slack.com/(redacted)"
        );
        assert_eq!(
            shown_url("postgres://lifeline:hunter2@db:5432/lifeline"),
            "postgres://(redacted)@db:5432/(redacted)"
        );
        assert_eq!(shown_url("http://am:9093"), "http://am:9093");
        assert_eq!(
            shown_url("http://am:9093/?t=secret"),
            "http://am:9093/(redacted)"
        );
        assert_eq!(shown_url("not a url"), "(redacted: not a URL)");
    }
}
