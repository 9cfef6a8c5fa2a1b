//! How Lifeline reaches a cluster source or an auth server's health:
//! plaintext HTTP/2, or TLS through its own rustls connector. Its own,
//! rather than tonic's TLS settings, because Teleport's proxy routing needs
//! an ALPN list tonic cannot set, and so that a failed handshake can be
//! explained in an operator's words (`explain`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::info;

pub use crate::config::AlpnUpgrade;
pub use crate::domain::TELEPORT_SERVER_NAME;

use super::upgrade;

/// A connection to the cluster: TLS over TCP, or over a WebSocket through
/// a load balancer.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
pub type Conn = Box<dyn Io>;

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("invalid address {addr:?}: {detail}")]
    Address { addr: String, detail: String },
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    #[error("{what}: no usable CA certificate ({detail})")]
    Roots { what: String, detail: String },
    #[error("cannot set up TLS: {0}")]
    Config(String),
    #[error("cannot connect to {addr}: {detail}")]
    Connect { addr: String, detail: String },
}

/// Plaintext, or TLS with what to trust and present.
#[derive(Clone)]
pub enum Dialer {
    Plain,
    Tls(Arc<TlsDialer>),
}

pub struct TlsDialer {
    /// Replaced whole when the identity is renewed; each connection takes
    /// the current one.
    config: std::sync::RwLock<Arc<ClientConfig>>,
    server_name: ServerName<'static>,
    /// Where the CA and client certificate came from, for messages.
    source: String,
    /// Woken by a failed handshake: the identity file may have been
    /// renewed since it was read.
    tls_failed: Arc<tokio::sync::Notify>,
    /// Through a proxy's TLS routing, how a layer-7 load balancer in
    /// front of it is crossed; `None` connects straight.
    upgrade: Option<Arc<Upgrade>>,
}

/// The ALPN connection upgrade for one proxy address (see [`upgrade`]).
pub struct Upgrade {
    always: bool,
    /// HTTPS to the proxy or its balancer: public roots and the proxy CA
    /// given, no client certificate, no ALPN.
    outer: Arc<ClientConfig>,
    /// The same offering only the probe's ALPN.
    probe: Arc<ClientConfig>,
    /// What the last probe found: `UNKNOWN`, `STRAIGHT` or `UPGRADE`.
    found: AtomicU8,
    /// A probe refused the web certificate (said once until one succeeds).
    untrusted: std::sync::atomic::AtomicBool,
}

/// How long the probe may take, as Teleport's clients allow theirs.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

const UNKNOWN: u8 = 0;
const STRAIGHT: u8 = 1;
const UPGRADE: u8 = 2;

impl Upgrade {
    /// `None` for `never`; otherwise trusting the public roots and
    /// `proxy_roots` (a private CA of the proxy's web certificate or of
    /// the balancer's).
    pub fn new(
        mode: AlpnUpgrade,
        proxy_roots: &[CertificateDer<'static>],
    ) -> Result<Option<Arc<Upgrade>>, DialError> {
        if mode == AlpnUpgrade::Never {
            return Ok(None);
        }
        let mut store = RootCertStore::empty();
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let (_, ignored) = store.add_parsable_certificates(proxy_roots.iter().cloned());
        if ignored > 0 {
            return Err(DialError::Roots {
                what: "cluster.proxy_ca_file".into(),
                detail: format!("{ignored} certificate(s) could not be used as a root"),
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let outer = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| DialError::Config(e.to_string()))?
            .with_root_certificates(store)
            .with_no_client_auth();
        let mut probe = outer.clone();
        probe.alpn_protocols = vec![upgrade::PROBE_ALPN.to_vec()];
        Ok(Some(Arc::new(Upgrade {
            always: mode == AlpnUpgrade::Always,
            outer: Arc::new(outer),
            probe: Arc::new(probe),
            found: AtomicU8::new(UNKNOWN),
            untrusted: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// Whether connections to `authority` go through the upgrade: always
    /// when so configured, otherwise as the probe finds (once, and again
    /// after a connection failed).
    async fn needed(&self, authority: &str) -> bool {
        if self.always {
            return true;
        }
        match self.found.load(Ordering::Relaxed) {
            STRAIGHT => return false,
            UPGRADE => return true,
            _ => {}
        }
        let Some(upgrade) = self.probe(authority).await else {
            // Neither answer: connect straight, as Teleport's clients do.
            return false;
        };
        let found = if upgrade { UPGRADE } else { STRAIGHT };
        if self.found.swap(found, Ordering::Relaxed) != found && upgrade {
            info!(
                proxy = authority,
                "the proxy does not negotiate ALPN (a layer-7 load balancer in front of it): connecting through Teleport's ALPN connection upgrade"
            );
        }
        upgrade
    }

    /// A handshake offering only the probe's ALPN: a proxy negotiates it
    /// (`Some(false)`), a balancer negotiates none or refuses it
    /// (`Some(true)`); `None` when the handshake fails otherwise.
    async fn probe(&self, authority: &str) -> Option<bool> {
        let handshake = async {
            let tcp = TcpStream::connect(authority).await?;
            let name = host_name(authority).map_err(std::io::Error::other)?;
            TlsConnector::from(self.probe.clone())
                .connect(name, tcp)
                .await
        };
        let e = match tokio::time::timeout(PROBE_TIMEOUT, handshake).await {
            Ok(Ok(tls)) => {
                self.untrusted.store(false, Ordering::Relaxed);
                return Some(tls.get_ref().1.alpn_protocol().is_none());
            }
            Ok(Err(e)) => e,
            Err(_) => return None,
        };
        match rustls_error(&e) {
            Some(
                rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol)
                | rustls::Error::NoApplicationProtocol,
            ) => Some(true),
            Some(r @ rustls::Error::InvalidCertificate(_)) => {
                // Likely a balancer with a private CA: without trusting it
                // Lifeline cannot tell, and the straight connection that
                // follows fails on the same certificate.
                if !self.untrusted.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        proxy = authority,
                        reason = %describe(r, None, None),
                        "cannot tell whether the proxy needs Teleport's ALPN connection upgrade: its web certificate is not trusted; set cluster.proxy_ca_file to its CA, or cluster.alpn_upgrade"
                    );
                }
                None
            }
            _ => None,
        }
    }

    /// Forgets what the probe found, so that the next connection asks
    /// again (the balancer may have been put in or taken out).
    fn forget(&self) {
        self.found.store(UNKNOWN, Ordering::Relaxed);
    }

    /// HTTPS to `authority`, upgraded to a stream the proxy routes.
    async fn open(&self, authority: &str) -> std::io::Result<upgrade::WsIo<TlsStream<TcpStream>>> {
        let tcp = TcpStream::connect(authority).await?;
        tcp.set_nodelay(true)?;
        let name = host_name(authority).map_err(std::io::Error::other)?;
        let https = TlsConnector::from(self.outer.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| match rustls_error(&e) {
                Some(r) => std::io::Error::other(format!(
                    "TLS to the proxy's web address failed: {}",
                    describe(r, None, Some("the public roots and cluster.proxy_ca_file"))
                )),
                None => e,
            })?;
        upgrade::upgrade(https, authority)
            .await
            .map_err(std::io::Error::other)
    }
}

/// The TLS server name of `authority`'s host: a DNS name or an IP address.
fn host_name(authority: &str) -> Result<ServerName<'static>, DialError> {
    let host = authority
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(authority)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|_| DialError::ServerName(host.to_string()))
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dialer::Plain => f.write_str("Plain"),
            Dialer::Tls(t) => f
                .debug_struct("Tls")
                .field("server_name", &t.server_name)
                .field("alpn", &t.config().alpn_protocols.len())
                .field("source", &t.source)
                .finish(),
        }
    }
}

/// Presents `key` when the server asks for a client certificate.
#[derive(Debug)]
struct ClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The ALPN list for Teleport: straight to Auth, `h2`; through a proxy's
/// TLS routing, Auth's routing protocol for the cluster first.
pub fn teleport_alpn(tls_routing_cluster: Option<&str>) -> Vec<Vec<u8>> {
    let mut alpn = Vec::new();
    if let Some(cluster) = tls_routing_cluster {
        alpn.push(
            format!(
                "teleport-auth@{}.{TELEPORT_SERVER_NAME}",
                hex::encode(cluster.as_bytes())
            )
            .into_bytes(),
        );
    }
    alpn.push(b"h2".to_vec());
    alpn
}

impl Dialer {
    /// TLS that trusts `roots`, verifies and sends `server_name`, offers
    /// `alpn` and, when given, presents `client`. `source` names where
    /// these came from in every error. With `upgrade`, connections cross
    /// a load balancer when the proxy needs it.
    pub fn tls(
        roots: &[CertificateDer<'static>],
        client: Option<Arc<CertifiedKey>>,
        server_name: &str,
        alpn: Vec<Vec<u8>>,
        source: &str,
        upgrade: Option<Arc<Upgrade>>,
    ) -> Result<Dialer, DialError> {
        let config = client_config(roots, client, alpn, source)?;
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|_| DialError::ServerName(server_name.to_string()))?;
        Ok(Dialer::Tls(Arc::new(TlsDialer {
            config: std::sync::RwLock::new(config),
            server_name,
            source: source.to_string(),
            tls_failed: Arc::new(tokio::sync::Notify::new()),
            upgrade,
        })))
    }

    /// Trusts `roots` and presents `client` from the next connection on
    /// (a renewed identity); connections open now keep theirs. The ALPN
    /// list stays. Plaintext has nothing to renew.
    pub fn renew(
        &self,
        roots: &[CertificateDer<'static>],
        client: Option<Arc<CertifiedKey>>,
    ) -> Result<(), DialError> {
        let Dialer::Tls(tls) = self else {
            return Ok(());
        };
        let alpn = tls.config().alpn_protocols.clone();
        let config = client_config(roots, client, alpn, &tls.source)?;
        if let Ok(mut c) = tls.config.write() {
            *c = config;
        }
        Ok(())
    }

    /// Woken when a TLS handshake of this dialer fails.
    pub fn tls_failures(&self) -> Option<Arc<tokio::sync::Notify>> {
        match self {
            Dialer::Plain => None,
            Dialer::Tls(t) => Some(t.tls_failed.clone()),
        }
    }

    /// A gRPC channel to `addr` (`host:port`, an `http://` or `https://`
    /// prefix allowed). Connects now, so a bad address, a refused
    /// connection or a failed handshake is an error here.
    pub async fn channel(
        &self,
        addr: &str,
        connect_timeout: Duration,
    ) -> Result<Channel, DialError> {
        let authority = authority(addr)?;
        let endpoint = Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| DialError::Address {
                addr: addr.to_string(),
                detail: e.to_string(),
            })?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            // A watch stream carries every heartbeat of the cluster and a
            // listing pages of thousands: HTTP/2's default 64 KiB window
            // would stall the sender once per 32 KiB read, a round trip
            // each (over a WAN, the ingest rate's ceiling). Bounded still.
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW);
        let connected = match self {
            Dialer::Plain => endpoint.connect().await,
            Dialer::Tls(tls) => {
                let tls = tls.clone();
                let connector = tower::service_fn(move |uri: Uri| {
                    let tls = tls.clone();
                    async move {
                        let host = uri
                            .authority()
                            .map(|a| a.as_str().to_string())
                            .unwrap_or_default();
                        tls.connect(&host).await.map(TokioIo::new)
                    }
                });
                endpoint.connect_with_connector(connector).await
            }
        };
        connected.map_err(|e| DialError::Connect {
            addr: authority.clone(),
            detail: explain(&e),
        })
    }

    /// A TLS stream to `addr` speaking HTTP/1.1, for the HTTPS calls next
    /// to gRPC: the same trust and certificate, with `http/1.1` offered
    /// where `h2` was (the server picks its HTTP API by ALPN).
    pub async fn tls_stream(&self, addr: &str) -> Result<Conn, DialError> {
        let authority = authority(addr)?;
        match self {
            Dialer::Plain => Err(DialError::Config("HTTPS needs a TLS dialer".into())),
            Dialer::Tls(tls) => {
                let mut config = (*tls.config()).clone();
                for p in config.alpn_protocols.iter_mut() {
                    if p.as_slice() == b"h2" {
                        *p = b"http/1.1".to_vec();
                    }
                }
                let http1 = TlsDialer {
                    config: std::sync::RwLock::new(Arc::new(config)),
                    server_name: tls.server_name.clone(),
                    source: tls.source.clone(),
                    tls_failed: tls.tls_failed.clone(),
                    upgrade: tls.upgrade.clone(),
                };
                http1
                    .connect(&authority)
                    .await
                    .map_err(|e| DialError::Connect {
                        addr: authority.clone(),
                        detail: explain(&e),
                    })
            }
        }
    }
}

impl TlsDialer {
    fn config(&self) -> Arc<ClientConfig> {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    async fn connect(&self, authority: &str) -> std::io::Result<Conn> {
        if let Some(up) = &self.upgrade {
            if up.needed(authority).await {
                let routed = async { self.handshake(up.open(authority).await?).await };
                return match routed.await {
                    Ok(tls) => Ok(Box::new(tls)),
                    Err(e) => {
                        up.forget();
                        Err(e)
                    }
                };
            }
        }
        let tcp = TcpStream::connect(authority).await?;
        tcp.set_nodelay(true)?;
        match self.handshake(tcp).await {
            Ok(tls) => Ok(Box::new(tls)),
            Err(e) => {
                if let Some(up) = &self.upgrade {
                    up.forget();
                }
                Err(e)
            }
        }
    }

    /// The cluster's TLS over `io`.
    async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        io: S,
    ) -> std::io::Result<TlsStream<S>> {
        TlsConnector::from(self.config())
            .connect(self.server_name.clone(), io)
            .await
            .map_err(|e| match tls_reason(&e, &self.server_name, &self.source) {
                Some(reason) => {
                    self.tls_failed.notify_one();
                    std::io::Error::other(reason)
                }
                None => e,
            })
    }
}

/// A client configuration that trusts `roots`, offers `alpn` and, when
/// given, presents `client`.
fn client_config(
    roots: &[CertificateDer<'static>],
    client: Option<Arc<CertifiedKey>>,
    alpn: Vec<Vec<u8>>,
    source: &str,
) -> Result<Arc<ClientConfig>, DialError> {
    let mut store = RootCertStore::empty();
    let (added, ignored) = store.add_parsable_certificates(roots.iter().cloned());
    if added == 0 {
        return Err(DialError::Roots {
            what: source.to_string(),
            detail: format!("{ignored} certificate(s) could not be used as a root"),
        });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DialError::Config(e.to_string()))?
        .with_root_certificates(store);
    let mut config = match client {
        Some(key) => builder.with_client_cert_resolver(Arc::new(ClientCert(key))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}

/// HTTP/2 flow-control windows for the cluster's streams: what the
/// server may send ahead of Lifeline's reads, per stream and per
/// connection.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 4 << 20;

/// `host:port` out of `addr`, which may carry an `http(s)://` prefix.
fn authority(addr: &str) -> Result<String, DialError> {
    let rest = addr
        .strip_prefix("https://")
        .or_else(|| addr.strip_prefix("http://"))
        .unwrap_or(addr)
        .trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(rest.to_string())
        }
        _ => Err(DialError::Address {
            addr: addr.to_string(),
            detail: "expected host:port".into(),
        }),
    }
}

/// What went wrong in an operator's words when a TLS failure is in the
/// error's chain; the whole chain otherwise.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = rustls_error(err) {
            return format!("TLS failed: {}", describe(r, None, None));
        }
        cur = err.source();
    }
    // HTTP/2 keeps only the text of an I/O error: a TLS alert the server
    // sent after the handshake (TLS 1.3 refuses a client certificate
    // then) arrives as "received fatal alert: <name>".
    let text = crate::backoff::chain(e);
    let alert = text
        .split("received fatal alert: ")
        .nth(1)
        .map(|a| {
            a.chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect::<String>()
        })
        .and_then(|name| {
            (0..=u8::MAX)
                .map(AlertDescription::from)
                .find(|a| format!("{a:?}") == name)
        });
    match alert {
        Some(a) => format!(
            "TLS failed: {}",
            describe(&rustls::Error::AlertReceived(a), None, None)
        ),
        None => text,
    }
}

/// The rustls error `err` is, or carries as an I/O error's payload (which
/// an I/O error's `source` skips).
fn rustls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    err.downcast_ref::<rustls::Error>().or_else(|| {
        err.downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    })
}

fn tls_reason(e: &std::io::Error, name: &ServerName<'_>, source: &str) -> Option<String> {
    let r = rustls_error(e)?;
    Some(format!(
        "TLS handshake failed: {}",
        describe(r, Some(name), Some(source))
    ))
}

fn describe(r: &rustls::Error, name: Option<&ServerName<'_>>, source: Option<&str>) -> String {
    let from = source.map(|s| format!(" ({s})")).unwrap_or_default();
    match r {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            format!("the server's certificate is not signed by a trusted CA{from}")
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => match name {
            Some(n) => format!(
                "the server's certificate is not valid for the server name {n:?}; check the configured server name"
            ),
            None => "the server's certificate is not valid for the server name".to_string(),
        },
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired".to_string(),
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied
            | AlertDescription::UnsupportedCertificate,
        ) => format!(
            "the server refused Lifeline's client certificate{from}: {r}; is the identity from this cluster, and unexpired?"
        ),
        rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol)
        | rustls::Error::NoApplicationProtocol => {
            "the server accepts none of the offered ALPN protocols (is TLS routing set as the server expects?)".to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpn_for_tls_routing_names_the_cluster_in_hex_then_h2() {
        assert_eq!(teleport_alpn(None), vec![b"h2".to_vec()]);
        let alpn = teleport_alpn(Some("example.com"));
        assert_eq!(
            String::from_utf8_lossy(&alpn[0]),
            "teleport-auth@6578616d706c652e636f6d.teleport.cluster.local"
        );
        assert_eq!(alpn[1], b"h2".to_vec());
    }

    #[test]
    fn addresses_take_an_optional_scheme_and_need_a_port() {
        assert_eq!(authority("auth:3025").ok().as_deref(), Some("auth:3025"));
        assert_eq!(
            authority("https://auth:3025/").ok().as_deref(),
            Some("auth:3025")
        );
        assert!(authority("auth").is_err());
        assert!(authority(":3025").is_err());
    }

    #[test]
    fn tls_without_a_usable_root_is_refused() {
        let bad = CertificateDer::from(vec![1u8, 2, 3]);
        let err = Dialer::tls(&[bad], None, "x", vec![], "ca.pem", None).unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }
}
