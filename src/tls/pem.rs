//! Reading Lifeline's own PEM files: the certificate chain and its key (a
//! pair checked to match, valid now) and the CA that signs agents' client
//! certificates. Every fault is a `ConfigError` naming the field and the
//! file; nothing here prints key material.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::clock::Ts;
use crate::config::{invalid, ConfigError};

/// The most one PEM file may hold; real ones are a few KiB.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// Why a PEM file could not be read.
#[derive(Debug)]
pub enum ReadFault {
    Io(std::io::Error),
    /// Larger than [`MAX_BYTES`].
    TooLarge,
}

/// One read, bounded: a byte past the limit is enough to refuse it. (The
/// Teleport identity file is read this way too.)
pub fn read_limited(path: &Path) -> Result<Vec<u8>, ReadFault> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(ReadFault::Io)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(ReadFault::TooLarge);
    }
    Ok(bytes)
}

/// [`read_limited`], a fault naming `field`.
pub fn read(field: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_limited(path).map_err(|f| match f {
        ReadFault::Io(e) => invalid(field, format!("cannot read {}: {e}", path.display())),
        ReadFault::TooLarge => invalid(
            field,
            format!(
                "{} is larger than {MAX_BYTES} bytes; is it a PEM file?",
                path.display()
            ),
        ),
    })
}

/// A certificate's subject and validity, read from its X.509.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    pub subject: String,
    pub not_before: Ts,
    pub not_after: Ts,
}

/// A certificate that X.509 cannot read.
#[derive(Debug, thiserror::Error)]
#[error("not a readable X.509 certificate: {0}")]
pub struct Unreadable(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>);

pub fn validity(der: &CertificateDer<'_>) -> Result<Validity, Unreadable> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(Unreadable)?;
    let v = cert.validity();
    let ts = |t: &x509_parser::time::ASN1Time| Ts(t.timestamp().saturating_mul(1_000_000));
    Ok(Validity {
        subject: cert.subject().to_string(),
        not_before: ts(&v.not_before),
        not_after: ts(&v.not_after),
    })
}

/// A server certificate ready to serve, and what it says of itself.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub validity: Validity,
}

/// Checks a certificate chain (`cert`, leaf first) against its key: both
/// readable PEM, the leaf valid at `now`, the key the leaf's own.
pub fn pair(
    cert_path: &Path,
    cert: &[u8],
    key_path: &Path,
    key: &[u8],
    now: Ts,
) -> Result<Loaded, ConfigError> {
    const CERT: &str = "server.tls_cert";
    const KEY: &str = "server.tls_key";
    let cp = cert_path.display();
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(CERT, format!("{cp} is not valid PEM: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(
            CERT,
            format!("{cp} holds no CERTIFICATE section; is it the key?"),
        ));
    };
    let validity = validity(leaf).map_err(|e| {
        invalid(
            CERT,
            format!("{cp}: the first certificate is not readable X.509: {e}"),
        )
    })?;
    if now >= validity.not_after {
        return Err(invalid(
            CERT,
            format!(
                "{cp}: the certificate ({}) expired at {}",
                validity.subject,
                validity.not_after.rfc3339()
            ),
        ));
    }
    if now < validity.not_before {
        return Err(invalid(
            CERT,
            format!(
                "{cp}: the certificate ({}) is not valid before {}; check this machine's clock",
                validity.subject,
                validity.not_before.rfc3339()
            ),
        ));
    }
    let kp = key_path.display();
    let private = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => invalid(
            KEY,
            format!("{kp} holds no PRIVATE KEY section; is it the certificate?"),
        ),
        other => invalid(KEY, format!("{kp} is not a valid PEM private key: {other}")),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, private, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => invalid(
            KEY,
            format!("{kp} is not the key of the certificate in {cp}"),
        ),
        other => invalid(
            KEY,
            format!("{kp}: the private key cannot be used: {other}"),
        ),
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        validity,
    })
}

/// Every certificate in a PEM file of CAs, as roots.
pub fn roots(field: &str, path: &Path) -> Result<RootCertStore, ConfigError> {
    let bytes = read(field, path)?;
    let p = path.display();
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(field, format!("{p} is not valid PEM: {e}")))?;
    let mut store = RootCertStore::empty();
    let (added, ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(invalid(
            field,
            format!("{p} holds no usable CA certificate ({ignored} could not be used)"),
        ));
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use rcgen::{CertificateParams, KeyPair};

    fn leaf(names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.self_signed(&key).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    fn now() -> Ts {
        Clock::system().now()
    }

    fn check(cert: &str, key: &str) -> Result<Loaded, String> {
        pair(
            Path::new("c.pem"),
            cert.as_bytes(),
            Path::new("k.pem"),
            key.as_bytes(),
            now(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_matching_pair_loads_and_says_when_it_expires() {
        let (c, k) = leaf(&["localhost"]);
        let l = check(&c, &k).expect("loads");
        assert!(l.validity.not_after > now());
    }

    #[test]
    fn each_fault_names_its_field_and_file() {
        let (c, k) = leaf(&["localhost"]);
        let (_, other_key) = leaf(&["localhost"]);
        let cases = [
            (k.as_str(), k.as_str(), "server.tls_cert", "no CERTIFICATE"),
            (c.as_str(), c.as_str(), "server.tls_key", "no PRIVATE KEY"),
            (
                c.as_str(),
                other_key.as_str(),
                "server.tls_key",
                "not the key of the certificate in c.pem",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
                k.as_str(),
                "server.tls_cert",
                "c.pem",
            ),
        ];
        for (cert, key, field, says) in cases {
            let e = check(cert, key).err().expect("refused");
            assert!(e.contains(field) && e.contains(says), "{e}");
            assert!(!e.contains("PRIVATE KEY-----"), "no key material: {e}");
        }
    }

    #[test]
    fn an_expired_certificate_is_refused() {
        let (c, k) = leaf(&["localhost"]);
        let later = now().saturating_add(std::time::Duration::from_secs(3600 * 24 * 365 * 5000));
        let e = pair(
            Path::new("c.pem"),
            c.as_bytes(),
            Path::new("k.pem"),
            k.as_bytes(),
            later,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.contains("server.tls_cert") && e.contains("expired"),
            "{e}"
        );
    }
}
