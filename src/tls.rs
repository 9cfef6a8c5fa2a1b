//! The tls room: Lifeline's own certificate on its HTTP and gRPC listeners.
//! `pem` reads and checks the PEM files (every fault names its config
//! field), `reload` hands each handshake the current certificate and swaps
//! in new files when they change on disk, `listen` accepts connections and
//! passes finished handshakes to axum and tonic, `coalesce` lets a gRPC
//! connection's frames leave in one write, `held` bounds the HTTP
//! listener's connections (a cap, header and idle timeouts), and `serve`
//! runs each listener, plain or TLS, through the same code.
//!
//! Owns: the server side of rustls. Must not touch: what the connections
//! carry (the `http` and `signals` rooms decide that), or Lifeline's own
//! outbound TLS (`ingest::dial`, `client`, `telemetry`).

pub mod coalesce;
mod forward;
pub mod held;
pub mod limit;
pub mod listen;
pub mod pem;
pub mod reload;
pub mod serve;

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig as RustlsConfig;

use crate::clock::Ts;
use crate::config::{invalid, ConfigError, ServerConfig};
use crate::stats::Stats;

pub use listen::{HttpsListener, Which};
pub use reload::CertStore;

/// What both listeners serve when `server.tls_cert` is set.
pub struct ServerTls {
    /// HTTP/1.1 for the API and dashboard.
    pub http: Arc<RustlsConfig>,
    /// HTTP/2 for gRPC; asks agents for a client certificate when
    /// `server.agent_client_ca` is set (optional at the handshake, so
    /// health checks need none; `AgentSignals.Connect` insists on it).
    pub grpc: Arc<RustlsConfig>,
    /// The certificate both use, re-read when its files change.
    pub certs: Arc<CertStore>,
    /// True when agents must present a client certificate.
    pub agent_client_ca: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("certs", &self.certs)
            .field("agent_client_ca", &self.agent_client_ca)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the server's TLS (see [`ServerTls::load`]) and keeps its
    /// certificate fresh: rotated files are read again every
    /// `server.tls_reload_interval`.
    pub fn start(
        cfg: &ServerConfig,
        rt: &mut crate::supervise::Runtime,
    ) -> Result<Option<ServerTls>, ConfigError> {
        let tls = Self::load(cfg, rt.clock.now(), rt.stats.clone())?;
        if let Some(t) = &tls {
            let reload = t.certs.spawn_watch(cfg.tls_reload_interval, rt);
            rt.tasks.track("tls reload", reload);
        }
        Ok(tls)
    }

    /// Reads and checks `server.tls_cert`, `tls_key` and `agent_client_ca`
    /// (valid at `now`). `None` when TLS is off.
    pub fn load(
        cfg: &ServerConfig,
        now: Ts,
        stats: Arc<Stats>,
    ) -> Result<Option<ServerTls>, ConfigError> {
        let (Some(cert), Some(key)) = (&cfg.tls_cert, &cfg.tls_key) else {
            return Ok(None);
        };
        let certs = Arc::new(CertStore::load(cert, key, now, stats)?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = |field: &str| {
            RustlsConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(field.to_string(), e.to_string()))
        };
        let mut http = versions("server.tls_cert")?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        http.alpn_protocols = vec![b"http/1.1".to_vec()];
        let grpc = versions("server.tls_cert")?;
        let mut grpc = match &cfg.agent_client_ca {
            Some(path) => {
                let roots = pem::roots("server.agent_client_ca", path)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| {
                            invalid("server.agent_client_ca", format!("{}: {e}", path.display()))
                        })?;
                grpc.with_client_cert_verifier(verifier)
            }
            None => grpc.with_no_client_auth(),
        }
        .with_cert_resolver(certs.clone());
        grpc.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(ServerTls {
            http: Arc::new(http),
            grpc: Arc::new(grpc),
            certs,
            agent_client_ca: cfg.agent_client_ca.is_some(),
        }))
    }
}
