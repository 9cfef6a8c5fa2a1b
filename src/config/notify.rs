//! `[notify]`: whom Lifeline tells about incidents, and how: Alertmanagers
//! (`[notify.alertmanager]`) and signed webhooks (`[[notify.webhooks]]`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, positive, ConfigError};
use crate::domain::{NoticeKind, TargetKind};

/// The most webhooks one Lifeline delivers to.
pub const MAX_WEBHOOKS: usize = 32;
/// The most Alertmanagers (an HA cluster's members).
pub const MAX_ALERTMANAGERS: usize = 16;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// The one-cluster form's `cluster` label on alerts and in webhook
    /// bodies, in place of its name; empty: each notice names its
    /// cluster as Lifeline does (`name` of `[cluster]` or of its
    /// `[[clusters]]` entry).
    pub cluster: String,
    /// The `runbook_url` annotation: what on-call does about an incident;
    /// empty: the incident's own page (its postmortem and what Lifeline
    /// did).
    pub runbook_url: String,
    pub alertmanager: AlertmanagerConfig,
    /// Signed webhooks (`[[notify.webhooks]]`), each told every event it
    /// names, in order, once.
    pub webhooks: Vec<WebhookConfig>,
}

/// Alertmanager's v2 API. Every URL gets every alert (an HA cluster
/// deduplicates them itself).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Base URLs, e.g. `https://alertmanager-0:9093`; empty: none.
    #[serde(serialize_with = "super::redact::urls")]
    pub urls: Vec<String>,
    /// CA certificates (PEM) to trust for `https://`, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A bearer token, read from this file at each post (so it can rotate).
    pub bearer_token_file: Option<PathBuf>,
    /// HTTP basic auth: the user, and a file holding the password.
    pub basic_auth_user: Option<String>,
    /// The file holding basic auth's password, read at each post.
    pub basic_auth_password_file: Option<PathBuf>,
    /// How often open incidents are posted again (Alertmanager's
    /// convention: a minute).
    #[serde(with = "humantime_serde")]
    pub resend: Duration,
    /// How far ahead each post's `endsAt` lies: an alert a gone Lifeline
    /// no longer posts resolves on its own after this.
    #[serde(with = "humantime_serde")]
    pub ends_after: Duration,
    /// One post's limit.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Maintenance windows as Alertmanager silences: per target kind, the
    /// labels an alert about that resource carries (`{name}` stands for
    /// the target's name; a glob becomes a regex matcher). A kind left
    /// empty is not silenced.
    pub silences: SilenceConfig,
}

/// `[notify.alertmanager.silences]`: e.g. `proxy = { job =
/// "teleport-proxy", instance = "{name}:3080" }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SilenceConfig {
    /// The labels a window's `proxy/…` target silences (`{name}`: the
    /// proxy's name; a glob becomes a regex matcher).
    pub proxy: BTreeMap<String, String>,
    /// The labels a window's `auth/…` target silences.
    pub auth_server: BTreeMap<String, String>,
    /// The labels a window's `agent/…` target silences.
    pub agent: BTreeMap<String, String>,
}

/// The most labels one kind's silence matches on.
pub const MAX_SILENCE_LABELS: usize = 16;

impl SilenceConfig {
    /// The labels for a target of `kind` (empty: it is not silenced).
    pub fn of(&self, kind: TargetKind) -> &BTreeMap<String, String> {
        match kind {
            TargetKind::Proxy => &self.proxy,
            TargetKind::AuthServer => &self.auth_server,
            TargetKind::Agent => &self.agent,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.proxy.is_empty() && self.auth_server.is_empty() && self.agent.is_empty()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (kind, labels) in [
            ("proxy", &self.proxy),
            ("auth_server", &self.auth_server),
            ("agent", &self.agent),
        ] {
            let field = format!("notify.alertmanager.silences.{kind}");
            if labels.len() > MAX_SILENCE_LABELS {
                return Err(invalid(
                    field,
                    format!("at most {MAX_SILENCE_LABELS} labels"),
                ));
            }
            for (name, value) in labels {
                let ok = name.chars().enumerate().all(|(i, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
                });
                if name.is_empty() || !ok {
                    return Err(invalid(
                        format!("{field}.{name}"),
                        "a label name is [a-zA-Z_][a-zA-Z0-9_]*",
                    ));
                }
                if value.is_empty() || value.len() > 256 || value.chars().any(char::is_control) {
                    return Err(invalid(
                        format!("{field}.{name}"),
                        "a label value is 1 to 256 characters, none a control character ({name} stands for the target's name)",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Default for AlertmanagerConfig {
    fn default() -> Self {
        AlertmanagerConfig {
            urls: Vec::new(),
            ca_file: None,
            bearer_token_file: None,
            basic_auth_user: None,
            basic_auth_password_file: None,
            resend: Duration::from_secs(60),
            ends_after: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            silences: SilenceConfig::default(),
        }
    }
}

/// A webhook body's shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The event as JSON, signed (`X-Lifeline-Signature`).
    #[default]
    Json,
    /// `{"text": …}` for a Slack incoming-webhook URL (signed too).
    Slack,
}

/// One webhook.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Its name in the delivery log and metrics (the URL is never shown:
    /// a Slack URL is itself a secret).
    pub name: String,
    /// Where it is posted (`https://`, or `http://` on loopback); shown
    /// nowhere.
    #[serde(serialize_with = "super::redact::url")]
    pub url: String,
    /// The signing secret, read from this file at each delivery.
    pub secret_file: PathBuf,
    /// The events it is sent; empty: every kind.
    #[serde(default)]
    pub events: Vec<NoticeKind>,
    /// `json` (Lifeline's signed body) or `slack` (a Slack incoming
    /// webhook's text).
    #[serde(default)]
    pub format: WebhookFormat,
    /// CA certificates (PEM) to trust for `https://`, besides the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// One attempt's limit.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How long an event is retried before it is dropped (and counted).
    #[serde(default = "default_max_age", with = "humantime_serde")]
    pub max_age: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_age() -> Duration {
    Duration::from_secs(24 * 3600)
}

impl WebhookConfig {
    /// Whether it is sent events of `kind`.
    pub fn wants(&self, kind: NoticeKind) -> bool {
        self.events.is_empty() || self.events.contains(&kind)
    }
}

fn http_url(field: &str, u: &str) -> Result<(), ConfigError> {
    match url::Url::parse(u) {
        Ok(p) if matches!(p.scheme(), "http" | "https") && p.host().is_some() => Ok(()),
        // The URL itself is not repeated: it may hold a secret.
        _ => Err(invalid(field, "is not an http(s):// URL with a host")),
    }
}

impl NotifyConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let am = &self.alertmanager;
        if am.urls.len() > MAX_ALERTMANAGERS {
            return Err(invalid(
                "notify.alertmanager.urls",
                format!("at most {MAX_ALERTMANAGERS}"),
            ));
        }
        for (i, u) in am.urls.iter().enumerate() {
            http_url(&format!("notify.alertmanager.urls[{i}]"), u)?;
        }
        positive("notify.alertmanager.resend", am.resend)?;
        am.silences.validate()?;
        positive("notify.alertmanager.timeout", am.timeout)?;
        if am.ends_after <= am.resend {
            return Err(invalid(
                "notify.alertmanager.ends_after",
                "must be longer than resend, or alerts would resolve between posts",
            ));
        }
        if am.basic_auth_user.is_some() != am.basic_auth_password_file.is_some() {
            return Err(invalid(
                "notify.alertmanager.basic_auth_user",
                "basic auth needs both basic_auth_user and basic_auth_password_file",
            ));
        }
        if am.basic_auth_user.is_some() && am.bearer_token_file.is_some() {
            return Err(invalid(
                "notify.alertmanager.bearer_token_file",
                "use either a bearer token or basic auth, not both",
            ));
        }
        if self.webhooks.len() > MAX_WEBHOOKS {
            return Err(invalid(
                "notify.webhooks",
                format!("at most {MAX_WEBHOOKS}"),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, w) in self.webhooks.iter().enumerate() {
            let field = |k: &str| format!("notify.webhooks[{i}].{k}");
            if !super::valid_token_name(&w.name) {
                return Err(invalid(field("name"), super::TOKEN_NAME_RULE));
            }
            if !names.insert(w.name.as_str()) {
                return Err(invalid(
                    field("name"),
                    format!("{:?} is used twice", w.name),
                ));
            }
            http_url(&field("url"), &w.url)?;
            positive(&field("timeout"), w.timeout)?;
            positive(&field("max_age"), w.max_age)?;
        }
        Ok(())
    }

    /// Whether anyone is told anything.
    pub fn any(&self) -> bool {
        !self.alertmanager.urls.is_empty() || !self.webhooks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn err(toml: &str) -> String {
        match Config::from_toml(toml).map(|c| c.validate()) {
            Ok(Ok(())) => panic!("accepted: {toml}"),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn each_bad_notify_setting_is_named_and_no_url_is_repeated() {
        let hook = |name: &str, url: &str| {
            format!(
                "[[notify.webhooks]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret_file = \"/s\"\n"
            )
        };
        let e = err("[notify.alertmanager]\nurls = [\"ftp://am:9093\"]\n");
        assert!(e.contains("notify.alertmanager.urls[0]"), "{e}");
        let e = err("[notify.alertmanager]\nurls = [\"http://am:9093\"]\nresend = \"5m\"\nends_after = \"1m\"\n");
        assert!(e.contains("ends_after"), "{e}");
        let e = err("[notify.alertmanager]\nbasic_auth_user = \"x\"\n");
        assert!(e.contains("basic_auth_password_file"), "{e}");
        let e = err("[notify.alertmanager.silences]\nproxy = { \"9job\" = \"x\" }\n");
        assert!(e.contains("notify.alertmanager.silences.proxy.9job"), "{e}");
        let e = err("[notify.alertmanager.silences]\nagent = { host = \"\" }\n");
        assert!(
            e.contains("silences.agent.host") && e.contains("1 to 256"),
            "{e}"
        );
        let e = err("[notify.alertmanager.silences]\nnode = { host = \"{name}\" }\n");
        assert!(e.contains("node"), "an unknown kind: {e}");
        let e = err(&hook("a b", "https://h.example.com/x"));
        assert!(e.contains("notify.webhooks[0].name"), "{e}");
        let e = err(&format!(
            "{}{}",
            hook("a", "https://h/1"),
            hook("a", "https://h/2")
        ));
        assert!(e.contains("used twice"), "{e}");
        let secret_url = "https://hooks.slack.com:99999/services/T0/B0/SECRETPART";
        let e = err(&hook("slack", secret_url));
        assert!(
            e.contains("notify.webhooks[0].url") && !e.contains("SECRETPART"),
            "{e}"
        );
        let e = err(&format!(
            "{}events = [\"incident.closed\"]\n",
            hook("a", "https://h/1")
        ));
        assert!(e.contains("incident.closed"), "{e}");
        let e = err(&format!("{}timeout = \"0s\"\n", hook("a", "https://h/1")));
        assert!(e.contains("notify.webhooks[0].timeout"), "{e}");
    }

    #[test]
    fn a_webhook_takes_every_event_unless_it_names_some() {
        let cfg = Config::from_toml(
            "[[notify.webhooks]]\nname = \"a\"\nurl = \"https://h/1\"\nsecret_file = \"/s\"\n\
             [[notify.webhooks]]\nname = \"b\"\nurl = \"https://h/2\"\nsecret_file = \"/s\"\nevents = [\"incident.opened\"]\nformat = \"slack\"\n",
        )
        .expect("parses");
        cfg.validate().expect("valid");
        use crate::domain::NoticeKind;
        let (a, b) = (&cfg.notify.webhooks[0], &cfg.notify.webhooks[1]);
        assert!(NoticeKind::ALL.iter().all(|k| a.wants(*k)));
        assert!(b.wants(NoticeKind::IncidentOpened) && !b.wants(NoticeKind::IncidentResolved));
        assert_eq!(b.format, super::WebhookFormat::Slack);
    }
}
