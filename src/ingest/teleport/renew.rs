//! Renewed identities. Machine ID (`tbot`) rewrites its identity output
//! every ~20 minutes with a certificate valid for an hour, so the file is
//! read again when it changes (looked at every [`RECHECK`], and at once
//! after a failed TLS handshake) and every dialer presents the new one
//! from its next connection, without a restart. A file that changed but
//! cannot be used is said once; the previous identity stays. The client
//! certificate's expiry is a metric and on `/readyz`.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::identity::Identity;
use crate::clock::{Clock, Ts};
use crate::ingest::dial::Dialer;
use crate::stats::Stats;

/// How often the identity file is looked at.
pub const RECHECK: Duration = Duration::from_secs(10);

/// What to renew, and with what.
pub struct Renewal {
    pub path: PathBuf,
    /// Every dialer that presents the identity.
    pub dialers: Vec<Dialer>,
    /// Roots from elsewhere (the `lifeline` source's `ca_file`); `None`:
    /// the identity file's own CAs.
    pub roots: Option<Vec<CertificateDer<'static>>>,
    /// The identity's bytes as loaded at start.
    pub loaded: Vec<u8>,
}

/// Records `id`'s expiry for the metric and `/readyz`.
pub fn record(stats: &Stats, id: &Identity) {
    let secs = u64::try_from(id.not_after.as_micros() / 1_000_000).unwrap_or(0);
    stats
        .cluster_identity_not_after
        .store(secs, Ordering::Relaxed);
}

/// Says so when the identity file (it holds a private key) can be read
/// by its group or by anyone.
pub fn warn_if_readable(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(path) {
            let mode = m.permissions().mode();
            if mode & 0o077 != 0 {
                warn!(path = %path.display(), mode = format!("{:o}", mode & 0o777), "the identity file holds a private key and can be read by its group or by anyone: chmod 600 it");
            }
        }
    }
}

/// Looks at the identity file until `stop`, renewing every dialer when it
/// changed and parses.
pub async fn watch(
    r: Renewal,
    clock: Clock,
    stats: Arc<Stats>,
    mut reread: tokio::sync::watch::Receiver<u64>,
    stop: CancellationToken,
) {
    let failures: Vec<Arc<tokio::sync::Notify>> =
        r.dialers.iter().filter_map(Dialer::tls_failures).collect();
    let mut last = r.loaded.clone();
    loop {
        let failed = async {
            if failures.is_empty() {
                return std::future::pending().await;
            }
            futures::future::select_all(failures.iter().map(|n| Box::pin(n.notified()))).await;
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RECHECK) => {}
            _ = failed => {}
            _ = crate::supervise::reread_asked(&mut reread) => {}
        }
        let bytes = match Identity::read(&r.path) {
            Ok(b) => b,
            // Being rewritten, or gone for a moment: looked at again soon.
            Err(_) => continue,
        };
        if bytes == last {
            continue;
        }
        last = bytes;
        match renew(&r, &last, clock.now()) {
            Ok(id) => {
                record(&stats, &id);
                Stats::inc(&stats.cluster_identity_renewals);
                warn_if_readable(&r.path);
                info!(path = %r.path.display(), subject = %id.subject, not_after = %id.not_after, "identity file renewed: new connections present it");
            }
            Err(e) => {
                warn!(error = %e, "the identity file changed but cannot be used; the previous identity stays");
            }
        }
    }
}

fn renew(r: &Renewal, bytes: &[u8], now: Ts) -> Result<Identity, String> {
    let id = Identity::parse(&r.path, bytes, now).map_err(|e| e.to_string())?;
    let roots = r.roots.as_ref().unwrap_or(&id.roots);
    for d in &r.dialers {
        d.renew(roots, Some(id.key.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(id)
}
