//! A Teleport identity file, as `tctl auth sign --format=file` writes it:
//! the private key (PEM), an SSH certificate (one line), the TLS client
//! certificate (PEM), SSH CA lines, then the TLS CA certificates (PEM,
//! several during a CA rotation). Lifeline takes the key, the first
//! certificate after it and every later certificate as a root; it skips the
//! SSH lines.
//!
//! Every way the file can be wrong is its own error naming the file and
//! what is wrong. Nothing here prints key material: `Identity`'s `Debug`
//! shows the certificate's subject and validity only.

use std::path::{Path, PathBuf};

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::clock::Ts;
use crate::tls::pem::{read_limited, validity, ReadFault};

/// The most an identity file may hold; real ones are a few KiB.
pub use crate::tls::pem::MAX_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("identity file {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("identity file {path}: larger than {MAX_BYTES} bytes; is it an identity file?")]
    TooLarge { path: PathBuf },
    #[error("identity file {path}: not valid PEM: {detail}")]
    Pem { path: PathBuf, detail: String },
    #[error("identity file {path}: no private key (expected a PEM private key first, as `tctl auth sign --format=file` writes)")]
    NoKey { path: PathBuf },
    #[error("identity file {path}: no TLS certificate after the private key")]
    NoCertificate { path: PathBuf },
    #[error("identity file {path}: no TLS CA certificate after the client certificate, so the Auth server cannot be verified")]
    NoCa { path: PathBuf },
    #[error("CA file {path}: no CERTIFICATE section")]
    EmptyCaFile { path: PathBuf },
    #[error("identity file {path}: the {what} is {source}")]
    Certificate {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: crate::tls::pem::Unreadable,
    },
    #[error("identity file {path}: the private key cannot be used: {detail}")]
    Key { path: PathBuf, detail: String },
    #[error("identity file {path}: the client certificate does not match the private key")]
    Mismatch { path: PathBuf },
    #[error("identity file {path}: the client certificate ({subject}) expired at {not_after}; sign a new identity with `tctl auth sign`")]
    Expired {
        path: PathBuf,
        subject: String,
        not_after: String,
    },
    #[error("identity file {path}: the client certificate ({subject}) is not valid before {not_before}; check this machine's clock")]
    NotYetValid {
        path: PathBuf,
        subject: String,
        not_before: String,
    },
}

/// What Lifeline presents to Teleport and trusts of it.
pub struct Identity {
    pub path: PathBuf,
    /// The client certificate and its key, checked to match.
    pub key: std::sync::Arc<CertifiedKey>,
    /// The TLS CAs that sign the Auth servers' certificates.
    pub roots: Vec<CertificateDer<'static>>,
    /// The client certificate's subject, for messages.
    pub subject: String,
    pub not_before: Ts,
    pub not_after: Ts,
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, IdentityError> {
    read_limited(path).map_err(|f| match f {
        ReadFault::Io(source) => IdentityError::Read {
            path: path.to_path_buf(),
            source,
        },
        ReadFault::TooLarge => IdentityError::TooLarge {
            path: path.to_path_buf(),
        },
    })
}

/// Every certificate in a PEM file of CAs (the `lifeline` source's
/// `ca_file`).
pub fn load_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, IdentityError> {
    let bytes = read_bounded(path)?;
    let mut rd: &[u8] = &bytes;
    let mut roots = Vec::new();
    while let Some((kind, der)) = pem::from_buf(&mut rd).map_err(|e| IdentityError::Pem {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })? {
        if kind == SectionKind::Certificate {
            roots.push(CertificateDer::from(der));
        }
    }
    if roots.is_empty() {
        return Err(IdentityError::EmptyCaFile {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("path", &self.path)
            .field("subject", &self.subject)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Reads and checks the identity file at `path`, valid at `now`.
    pub fn load(path: &Path, now: Ts) -> Result<Identity, IdentityError> {
        Identity::parse(path, &Identity::read(path)?, now)
    }

    /// The file's bytes, bounded, for [`Identity::parse`].
    pub fn read(path: &Path) -> Result<Vec<u8>, IdentityError> {
        read_bounded(path)
    }

    /// Checks the identity file's contents (`path` names it in errors).
    pub fn parse(path: &Path, bytes: &[u8], now: Ts) -> Result<Identity, IdentityError> {
        let p = || path.to_path_buf();
        let mut rd: &[u8] = bytes;
        let mut key: Option<PrivateKeyDer<'static>> = None;
        let mut certs: Vec<CertificateDer<'static>> = Vec::new();
        // Each next PEM section, skipping the lines around it (the SSH
        // certificate and CA lines).
        while let Some((kind, der)) = pem::from_buf(&mut rd).map_err(|e| IdentityError::Pem {
            path: p(),
            detail: e.to_string(),
        })? {
            match kind {
                SectionKind::PrivateKey if key.is_none() && certs.is_empty() => {
                    key = Some(PrivateKeyDer::Pkcs8(der.into()));
                }
                SectionKind::RsaPrivateKey if key.is_none() && certs.is_empty() => {
                    key = Some(PrivateKeyDer::Pkcs1(der.into()));
                }
                SectionKind::EcPrivateKey if key.is_none() && certs.is_empty() => {
                    key = Some(PrivateKeyDer::Sec1(der.into()));
                }
                SectionKind::Certificate if key.is_some() => certs.push(der.into()),
                // A certificate before the key, a second key, anything else:
                // not the layout Teleport writes.
                SectionKind::Certificate => return Err(IdentityError::NoKey { path: p() }),
                other => {
                    return Err(IdentityError::Pem {
                        path: p(),
                        detail: format!("unexpected {other:?} section"),
                    })
                }
            }
        }
        let key = key.ok_or(IdentityError::NoKey { path: p() })?;
        let mut certs = certs.into_iter();
        let cert = certs
            .next()
            .ok_or(IdentityError::NoCertificate { path: p() })?;
        let roots: Vec<CertificateDer<'static>> = certs.collect();
        if roots.is_empty() {
            return Err(IdentityError::NoCa { path: p() });
        }
        for r in &roots {
            validity(r).map_err(|source| IdentityError::Certificate {
                path: p(),
                what: "CA certificate",
                source,
            })?;
        }
        let v = validity(&cert).map_err(|source| IdentityError::Certificate {
            path: p(),
            what: "client certificate",
            source,
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let key = CertifiedKey::from_der(vec![cert], key, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => IdentityError::Mismatch { path: p() },
            other => IdentityError::Key {
                path: p(),
                detail: other.to_string(),
            },
        })?;
        if now >= v.not_after {
            return Err(IdentityError::Expired {
                path: p(),
                subject: v.subject,
                not_after: v.not_after.rfc3339(),
            });
        }
        if now < v.not_before {
            return Err(IdentityError::NotYetValid {
                path: p(),
                subject: v.subject,
                not_before: v.not_before.rfc3339(),
            });
        }
        Ok(Identity {
            path: p(),
            key: std::sync::Arc::new(key),
            roots,
            subject: v.subject,
            not_before: v.not_before,
            not_after: v.not_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    const NOW: Ts = Ts(1_800_000_000_000_000);

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA cert");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A client certificate for `user` valid from `from` to `to` (seconds
    /// around NOW), signed by `ca`, and its key.
    fn client(ca: &Ca, user: &str, from: i64, to: i64) -> (String, KeyPair) {
        let key = KeyPair::generate().expect("client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, user);
        let at = |s: i64| {
            time::OffsetDateTime::from_unix_timestamp(NOW.as_micros() / 1_000_000 + s)
                .expect("time")
        };
        params.not_before = at(from);
        params.not_after = at(to);
        let cert = params.signed_by(&key, &ca.issuer).expect("client cert");
        (cert.pem(), key)
    }

    /// The layout `tctl auth sign --format=file` writes.
    fn file(key: &str, cert: &str, cas: &[&str]) -> String {
        let mut s = String::new();
        s.push_str(key);
        s.push_str("ssh-ed25519-cert-v01@openssh.com AAAAC3NzaC1lZDI1NTE5 lifeline\n");
        s.push_str(cert);
        s.push_str("@cert-authority *.example.com ssh-ed25519 AAAAC3Nza type=host\n");
        for c in cas {
            s.push_str(c);
        }
        s
    }

    fn parse(text: &str) -> Result<Identity, IdentityError> {
        Identity::parse(Path::new("/etc/lifeline/identity"), text.as_bytes(), NOW)
    }

    #[test]
    fn reads_the_key_the_client_certificate_and_every_ca() {
        let (host, host2) = (ca("host CA"), ca("host CA (rotation)"));
        let user = ca("user CA");
        let (cert, key) = client(&user, "lifeline-bot", -60, 3600);
        let id = parse(&file(&key.serialize_pem(), &cert, &[&host.pem, &host2.pem]))
            .expect("a good identity");
        assert_eq!(id.roots.len(), 2);
        assert!(id.subject.contains("lifeline-bot"), "{}", id.subject);
        assert!(id.not_after > NOW);
        let shown = format!("{id:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
        // Only what is safe to log: no key field, no certificate bytes.
        assert!(!shown.contains("key"), "{shown}");
        let der_start = format!("{:?}", &id.roots[0].as_ref()[..8]);
        assert!(
            !shown.contains(&der_start[1..der_start.len() - 1]),
            "{shown}"
        );
    }

    #[test]
    fn each_bad_file_says_what_is_wrong() {
        let host = ca("host CA");
        let user = ca("user CA");
        let (cert, key) = client(&user, "bot", -60, 3600);
        let key = key.serialize_pem();
        let (_, other_key) = client(&user, "bot", -60, 3600);
        let (expired, expired_key) = client(&user, "bot", -7200, -3600);
        let (future, future_key) = client(&user, "bot", 3600, 7200);
        let cases: Vec<(&str, String, &str)> = vec![
            ("empty", String::new(), "no private key"),
            (
                "certificate first",
                file("", &cert, &[&host.pem]),
                "no private key",
            ),
            ("no certificate", key.clone(), "no TLS certificate"),
            ("no CA", file(&key, &cert, &[]), "no TLS CA certificate"),
            (
                "another key",
                file(&other_key.serialize_pem(), &cert, &[&host.pem]),
                "does not match the private key",
            ),
            (
                "expired",
                file(&expired_key.serialize_pem(), &expired, &[&host.pem]),
                "expired at",
            ),
            (
                "not yet valid",
                file(&future_key.serialize_pem(), &future, &[&host.pem]),
                "not valid before",
            ),
            (
                "broken PEM",
                "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n".into(),
                "not valid PEM",
            ),
            (
                "garbage certificate",
                file(
                    &key,
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                    &[&host.pem],
                ),
                "not a readable X.509 certificate",
            ),
        ];
        for (what, text, want) in cases {
            let err = parse(&text).expect_err(what).to_string();
            assert!(err.contains(want), "{what}: {err}");
            assert!(
                err.contains("/etc/lifeline/identity"),
                "{what} names the file: {err}"
            );
            assert!(!err.contains("PRIVATE KEY"), "{what} leaks nothing: {err}");
        }
    }

    #[test]
    fn a_missing_or_huge_file_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("dir");
        let missing = dir.path().join("nope");
        let err = Identity::load(&missing, NOW)
            .expect_err("missing")
            .to_string();
        assert!(
            err.contains("cannot read it") && err.contains("nope"),
            "{err}"
        );
        let huge = dir.path().join("huge");
        std::fs::write(&huge, vec![b'x'; (MAX_BYTES + 1) as usize]).expect("write");
        let err = Identity::load(&huge, NOW).expect_err("huge").to_string();
        assert!(err.contains("larger than"), "{err}");
    }
}
