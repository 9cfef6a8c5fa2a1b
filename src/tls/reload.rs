//! The certificate every handshake gets, swapped without a restart: the
//! files are looked at every `server.tls_reload_interval`; new contents that
//! check out (a readable pair that matches and is valid) replace the old
//! certificate, new contents that do not are refused once, loudly, and the
//! old certificate stays. Renewal tools write the two files one after the
//! other, so a half-written pair is refused and picked up on the next look.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use super::pem::{self, Validity};
use crate::clock::{Clock, Ts};
use crate::config::ConfigError;
use crate::stats::Stats;

/// What one look at the files found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The same bytes as last time.
    Unchanged,
    /// New files, now served.
    Loaded(Validity),
    /// New files that do not check out; the old certificate stays.
    Refused(String),
}

/// How often contents that were refused are tried again.
pub const RETRY_REFUSED: Duration = Duration::from_secs(60);

pub struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    /// What is served now, and its subject and validity (for logs and
    /// `/metrics`), swapped together.
    current: RwLock<(Arc<CertifiedKey>, Validity)>,
    /// The files' digest at the last look, so each change is logged and
    /// counted once; and when those contents were refused, since when
    /// (they are tried again, quietly, every [`RETRY_REFUSED`]: a pair
    /// refused for a time, such as a notBefore a few seconds ahead, is
    /// served once it is valid).
    seen: Mutex<([u8; 32], Option<Ts>)>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

fn digest(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((cert.len() as u64).to_le_bytes());
    h.update(cert);
    h.update(key);
    h.finalize().into()
}

fn read_both(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), ConfigError> {
    Ok((
        pem::read("server.tls_cert", cert)?,
        pem::read("server.tls_key", key)?,
    ))
}

impl CertStore {
    /// Loads the pair; any fault stops start-up.
    pub fn load(
        cert_path: &Path,
        key_path: &Path,
        now: Ts,
        stats: Arc<Stats>,
    ) -> Result<CertStore, ConfigError> {
        let (cert, key) = read_both(cert_path, key_path)?;
        let loaded = pem::pair(cert_path, &cert, key_path, &key, now)?;
        let store = CertStore {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new((loaded.key, loaded.validity.clone())),
            seen: Mutex::new((digest(&cert, &key), None)),
            stats,
        };
        store.publish(&loaded.validity);
        Ok(store)
    }

    /// The certificate served now: its subject and validity.
    pub fn served(&self) -> Validity {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    fn publish(&self, v: &Validity) {
        let secs = u64::try_from(v.not_after.as_micros() / 1_000_000).unwrap_or(0);
        self.stats.tls_not_after.store(secs, Ordering::Relaxed);
    }

    /// Looks at the files once.
    pub fn check(&self, now: Ts) -> Reloaded {
        let read = read_both(&self.cert_path, &self.key_path);
        // Unreadable files (one being replaced may be missing for an
        // instant) are a change too, tried once like any other.
        let d = match &read {
            Ok((cert, key)) => digest(cert, key),
            Err(e) => digest(b"unreadable", e.to_string().as_bytes()),
        };
        let again = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            match *seen {
                (s, None) if s == d => return Reloaded::Unchanged,
                (s, Some(at)) if s == d && now.since(at) < RETRY_REFUSED => {
                    return Reloaded::Unchanged
                }
                (s, Some(_)) if s == d => true,
                _ => {
                    *seen = (d, None);
                    false
                }
            }
        };
        let checked = read
            .and_then(|(cert, key)| pem::pair(&self.cert_path, &cert, &self.key_path, &key, now));
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).1 = checked.is_err().then_some(now);
        if checked.is_err() && again {
            // Refused before, for the same reason: said once.
            return Reloaded::Unchanged;
        }
        match checked {
            Ok(loaded) => {
                self.publish(&loaded.validity);
                *self.current.write().unwrap_or_else(|e| e.into_inner()) =
                    (loaded.key, loaded.validity.clone());
                Stats::inc(&self.stats.tls_reloads_loaded);
                Reloaded::Loaded(loaded.validity)
            }
            Err(e) => {
                Stats::inc(&self.stats.tls_reloads_refused);
                Reloaded::Refused(e.to_string())
            }
        }
    }

    /// Looks every `every`, and whenever `reread` changes, until `stop`;
    /// each change is logged once.
    pub async fn watch(
        self: Arc<Self>,
        every: Duration,
        clock: Clock,
        mut reread: watch::Receiver<u64>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
                _ = crate::supervise::reread_asked(&mut reread) => {}
            }
            let span = info_span!("tls.reload", cert = %self.cert_path.display());
            let _e = span.enter();
            match self.check(clock.now()) {
                Reloaded::Unchanged => {}
                Reloaded::Loaded(v) => {
                    info!(
                        subject = %v.subject,
                        not_after = %v.not_after.rfc3339(),
                        "TLS certificate reloaded: new connections get it"
                    );
                }
                Reloaded::Refused(why) => {
                    warn!(error = %why, "new TLS certificate files refused; still serving the previous certificate");
                }
            }
        }
    }

    /// Spawns [`CertStore::watch`].
    pub fn spawn_watch(
        self: &Arc<Self>,
        every: Duration,
        rt: &crate::supervise::Runtime,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(
            me.watch(every, rt.clock, rt.reread.subscribe(), rt.shutdown.clone())
                .instrument(info_span!("tls.watch")),
        )
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .0
                .clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn write_leaf(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
        write_leaf_with(dir, cn, |_| {})
    }

    /// A self-signed leaf for `localhost` named `cn`, its parameters
    /// changed by `edit` first, written as `tls.crt` and `tls.key`.
    fn write_leaf_with(
        dir: &Path,
        cn: &str,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        edit(&mut params);
        let cert = params.self_signed(&key).expect("cert");
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, cert.pem()).expect("write cert");
        std::fs::write(&k, key.serialize_pem()).expect("write key");
        (c, k)
    }

    #[test]
    fn a_new_pair_replaces_the_old_and_a_half_written_one_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c, k) = write_leaf(dir.path(), "first");
        let now = Clock::system().now();
        let stats = Arc::new(Stats::default());
        let store = CertStore::load(&c, &k, now, stats.clone()).expect("loads");
        assert!(store.served().subject.contains("first"));
        assert_eq!(store.check(now), Reloaded::Unchanged);

        // The renewal wrote the certificate; the key is still the old one.
        let other = tempfile::tempdir().expect("tempdir");
        let (c2, k2) = write_leaf(other.path(), "second");
        std::fs::copy(&c2, &c).expect("copy cert");
        match store.check(now) {
            Reloaded::Refused(why) => assert!(why.contains("server.tls_key"), "{why}"),
            other => panic!("half-written pair served: {other:?}"),
        }
        assert!(store.served().subject.contains("first"));
        // Looked at once: the same bytes are not refused again.
        assert_eq!(store.check(now), Reloaded::Unchanged);

        std::fs::copy(&k2, &k).expect("copy key");
        match store.check(now) {
            Reloaded::Loaded(v) => assert!(v.subject.contains("second"), "{v:?}"),
            other => panic!("new pair not loaded: {other:?}"),
        }
        assert!(store.served().subject.contains("second"));
        assert_eq!(stats.tls_reloads_loaded.load(Ordering::Relaxed), 1);
        assert_eq!(stats.tls_reloads_refused.load(Ordering::Relaxed), 1);
    }

    /// A pair refused for a time (its notBefore a little ahead, as a
    /// renewal written by a host whose clock runs early) is tried again,
    /// quietly, and served once it is valid.
    #[test]
    fn a_pair_not_yet_valid_is_served_once_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c, k) = write_leaf(dir.path(), "first");
        let now = Clock::system().now();
        let stats = Arc::new(Stats::default());
        let store = CertStore::load(&c, &k, now, stats.clone()).expect("loads");

        write_leaf_with(dir.path(), "early", |p| {
            p.not_before =
                time::OffsetDateTime::from_unix_timestamp(now.as_micros() / 1_000_000 + 30)
                    .expect("a time");
        });

        assert!(matches!(store.check(now), Reloaded::Refused(_)));
        let later = |s: u64| now.saturating_add(Duration::from_secs(s));
        assert_eq!(
            store.check(later(10)),
            Reloaded::Unchanged,
            "not yet looked at again"
        );
        assert_eq!(
            store.check(later(40)),
            Reloaded::Unchanged,
            "within the retry period"
        );
        match store.check(later(61)) {
            Reloaded::Loaded(v) => assert!(v.subject.contains("early"), "{v:?}"),
            other => panic!("a pair now valid not served: {other:?}"),
        }
        assert_eq!(
            stats.tls_reloads_refused.load(Ordering::Relaxed),
            1,
            "refused once"
        );
        assert_eq!(store.check(later(200)), Reloaded::Unchanged);
    }
}
