//! Certificates made in memory ([`Ca`]), and the simulated Teleport
//! cluster's, made at start: a CA, the
//! Auth servers' certificate (for `teleport.cluster.local`, as Teleport's
//! carry), and client identities written in the layout `tctl auth sign
//! --format=file` uses. Also the wrong ones the tests need: an identity
//! from another CA, and one that trusts another CA.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls::server::WebPkiClientVerifier;
use rustls::time_provider::TimeProvider;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};

use lifeline::clock::{Clock, Ts};

/// The name Teleport's Auth certificates carry (Teleport's fact, written
/// here apart from Lifeline's copy).
pub const AUTH_SERVER_NAME: &str = "teleport.cluster.local";

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot make a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// A certificate authority made in memory: the simulated cluster's, the
/// demo's throwaway one for Lifeline's own listeners, the tests'.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
}

/// A certificate a [`Ca`] issued, with its key.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A certificate for `names` (DNS names; `localhost` brings
    /// 127.0.0.1 along), common name `cn`; none for a client's.
    pub fn issue(&self, cn: &str, names: &[&str]) -> Result<Issued, PkiError> {
        self.issue_valid(cn, names, None)
    }

    /// The same, valid from `valid.0` to `valid.1` (rcgen's long default
    /// without).
    pub fn issue_valid(
        &self,
        cn: &str,
        names: &[&str],
        valid: Option<(Ts, Ts)>,
    ) -> Result<Issued, PkiError> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some((from, until)) = valid {
            let at = |t: Ts| {
                time::OffsetDateTime::from_unix_timestamp(t.as_millis().div_euclid(1000))
                    .map_err(|e| PkiError::Tls(format!("certificate time: {e}")))
            };
            params.not_before = at(from)?;
            params.not_after = at(until)?;
        }
        if names.contains(&"localhost") {
            params
                .subject_alt_names
                .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key,
        })
    }
}

/// The cluster's CA and the Auth servers' certificate; and the proxy's
/// web certificate, from a CA of its own (in a real cluster, a public CA
/// or the load balancer's).
pub struct SimPki {
    /// What the Auth checks client certificates' validity against.
    clock: Clock,
    ca: Ca,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
    web_ca: Ca,
    web_chain: Vec<CertificateDer<'static>>,
    web_key: Vec<u8>,
}

/// The cluster's clock as TLS's: client certificates expire in the
/// simulation's time, which tests advance.
#[derive(Debug)]
struct SimTime(Clock);

impl TimeProvider for SimTime {
    fn current_time(&self) -> Option<UnixTime> {
        let ms = u64::try_from(self.0.now().as_millis()).ok()?;
        Some(UnixTime::since_unix_epoch(
            std::time::Duration::from_millis(ms),
        ))
    }
}

/// The layout `tctl auth sign --format=file` writes: key, SSH
/// certificate line, TLS certificate, SSH CA line, TLS CAs.
fn identity_text(key: &str, cert: &str, cas: &[&str]) -> String {
    let mut s = String::new();
    s.push_str(key);
    s.push_str(
        "ssh-ed25519-cert-v01@openssh.com AAAAC3NzaC1lZDI1NTE5AAAAIFNpbXVsYXRlZA== lifeline\n",
    );
    s.push_str(cert);
    s.push_str(
        "@cert-authority *.sim.teleport ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFNpbQ== type=host\n",
    );
    for c in cas {
        s.push_str(c);
    }
    s
}

impl SimPki {
    pub fn new(cluster: &str, clock: Clock) -> Result<SimPki, PkiError> {
        let ca = Ca::new(&format!("{cluster} host CA"))?;
        let auth = ca.issue("auth", &[AUTH_SERVER_NAME, "localhost"])?;
        let web_ca = Ca::new(&format!("{cluster} web CA"))?;
        let web = web_ca.issue("proxy", &["localhost"])?;
        Ok(SimPki {
            clock,
            server_chain: vec![auth.der],
            server_key: auth.key.serialize_der(),
            ca,
            web_chain: vec![web.der],
            web_key: web.key.serialize_der(),
            web_ca,
        })
    }

    /// The CA of the proxy's web certificate, PEM.
    pub fn web_ca_pem(&self) -> &str {
        &self.web_ca.pem
    }

    /// TLS for the proxy's web address (or its load balancer): the web
    /// certificate, no client certificate asked for, `alpn` offered.
    pub fn web_config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.web_key.clone()));
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(self.web_chain.clone(), key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        cfg.alpn_protocols = alpn;
        Ok(Arc::new(cfg))
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca.pem
    }

    /// TLS for the Auth listeners: this certificate, client certificates
    /// required and verified against the CA, `alpn` offered.
    pub fn server_config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, PkiError> {
        self.config(alpn, true)
    }

    /// The same with no client certificate asked for (a `ClusterEvents`
    /// source over plain server TLS).
    pub fn server_only_config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, PkiError> {
        self.config(alpn, false)
    }

    fn config(&self, alpn: Vec<Vec<u8>>, clients: bool) -> Result<Arc<ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder =
            ServerConfig::builder_with_details(provider.clone(), Arc::new(SimTime(self.clock)))
                .with_safe_default_protocol_versions()
                .map_err(|e| PkiError::Tls(e.to_string()))?;
        let builder = if clients {
            let mut roots = RootCertStore::empty();
            roots
                .add(self.ca.der.clone())
                .map_err(|e| PkiError::Tls(e.to_string()))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| PkiError::Tls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut cfg = builder
            .with_single_cert(self.server_chain.clone(), key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        cfg.alpn_protocols = alpn;
        Ok(Arc::new(cfg))
    }

    /// An identity for `user` the cluster accepts.
    pub fn identity(&self, user: &str) -> Result<String, PkiError> {
        let c = self.ca.issue(user, &[])?;
        Ok(identity_text(&c.key_pem, &c.cert_pem, &[&self.ca.pem]))
    }

    /// An identity for `user` whose certificate is valid from a minute ago
    /// (the cluster's clock) for `ttl`, as Machine ID issues them.
    pub fn short_lived_identity(
        &self,
        user: &str,
        ttl: std::time::Duration,
    ) -> Result<String, PkiError> {
        let now = self.clock.now();
        let from = now.saturating_sub(std::time::Duration::from_secs(60));
        let c = self
            .ca
            .issue_valid(user, &[], Some((from, now.saturating_add(ttl))))?;
        Ok(identity_text(&c.key_pem, &c.cert_pem, &[&self.ca.pem]))
    }

    /// An identity whose client certificate another CA signed: the cluster
    /// refuses it.
    pub fn foreign_identity(&self, user: &str) -> Result<String, PkiError> {
        let other = Ca::new("another cluster")?;
        let c = other.issue(user, &[])?;
        Ok(identity_text(&c.key_pem, &c.cert_pem, &[&self.ca.pem]))
    }

    /// An identity that trusts another CA: it cannot verify the cluster.
    pub fn identity_trusting_another_ca(&self, user: &str) -> Result<String, PkiError> {
        let other = Ca::new("another cluster")?;
        let c = self.ca.issue(user, &[])?;
        Ok(identity_text(&c.key_pem, &c.cert_pem, &[&other.pem]))
    }
}
