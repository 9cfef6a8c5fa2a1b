//! The simulated Teleport cluster's certificates, made at start: a CA, the
//! Auth servers' certificate (for `teleport.cluster.local`, as Teleport's
//! carry), and client identities written in the layout `tctl auth sign
//! --format=file` uses. Also the wrong ones the tests need: an identity
//! from another CA, and one that trusts another CA.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

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

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
}

impl Ca {
    fn new(name: &str) -> Result<Ca, PkiError> {
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

    /// A leaf for `names` signed by this CA: its PEM, DER and key.
    fn leaf(
        &self,
        cn: &str,
        names: &[&str],
    ) -> Result<(String, CertificateDer<'static>, KeyPair), PkiError> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        if names.contains(&"localhost") {
            params
                .subject_alt_names
                .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), cert.der().clone(), key))
    }
}

/// The cluster's CA and the Auth servers' certificate.
pub struct SimPki {
    ca: Ca,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
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
    pub fn new(cluster: &str) -> Result<SimPki, PkiError> {
        let ca = Ca::new(&format!("{cluster} host CA"))?;
        let (_, der, key) = ca.leaf("auth", &[AUTH_SERVER_NAME, "localhost"])?;
        Ok(SimPki {
            server_chain: vec![der],
            server_key: key.serialize_der(),
            ca,
        })
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca.pem
    }

    /// TLS for the Auth listeners: this certificate, client certificates
    /// required and verified against the CA, `alpn` offered.
    pub fn server_config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca.der.clone())
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| PkiError::Tls(e.to_string()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.server_chain.clone(), key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        cfg.alpn_protocols = alpn;
        Ok(Arc::new(cfg))
    }

    /// An identity for `user` the cluster accepts.
    pub fn identity(&self, user: &str) -> Result<String, PkiError> {
        let (cert, _, key) = self.ca.leaf(user, &[])?;
        Ok(identity_text(&key.serialize_pem(), &cert, &[&self.ca.pem]))
    }

    /// An identity whose client certificate another CA signed: the cluster
    /// refuses it.
    pub fn foreign_identity(&self, user: &str) -> Result<String, PkiError> {
        let other = Ca::new("another cluster")?;
        let (cert, _, key) = other.leaf(user, &[])?;
        Ok(identity_text(&key.serialize_pem(), &cert, &[&self.ca.pem]))
    }

    /// An identity that trusts another CA: it cannot verify the cluster.
    pub fn identity_trusting_another_ca(&self, user: &str) -> Result<String, PkiError> {
        let other = Ca::new("another cluster")?;
        let (cert, _, key) = self.ca.leaf(user, &[])?;
        Ok(identity_text(&key.serialize_pem(), &cert, &[&other.pem]))
    }
}
