//! Why a Lifeline did not start.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::config::ConfigError;
use crate::ingest::connect::DialersError;
use crate::settings::SettingsError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot load the dynamic settings: {0}")]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Dialers(#[from] DialersError),
    #[error(transparent)]
    Notify(#[from] crate::notify::NotifyError),
    #[error(transparent)]
    Access(#[from] crate::access::teleport::SetupError),
    #[error(transparent)]
    SecretFile(#[from] crate::access::SecretFileError),
    #[error(transparent)]
    Keys(#[from] crate::store::keys::KeyError),
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl StartError {
    /// The configuration (or a file it names) is at fault, not the
    /// machine: the caller exits with EX_CONFIG.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            StartError::Config(_)
                | StartError::Dialers(_)
                | StartError::Notify(_)
                | StartError::Access(_)
                | StartError::SecretFile(_)
                | StartError::Store(StoreError::ReplicaNameTaken { .. })
        )
    }
}

/// A listener on `addr`, and the address it got (the port, when `addr`
/// asked for any).
pub(super) async fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}
