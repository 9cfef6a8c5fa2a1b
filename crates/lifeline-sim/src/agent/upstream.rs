//! Where simulated agents reach Lifeline: one address (plaintext or TLS)
//! or several replicas as a layer-4 load balancer hands them out, the
//! channel to each, and the join token on every request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Where simulated agents reach Lifeline's gRPC port: plaintext, or TLS
/// trusting a CA (and presenting a client certificate when given).
#[derive(Clone, Debug)]
pub struct LifelineAddr {
    pub addr: SocketAddr,
    pub tls: Option<ClientTlsConfig>,
}

impl From<SocketAddr> for LifelineAddr {
    fn from(addr: SocketAddr) -> Self {
        LifelineAddr { addr, tls: None }
    }
}

impl LifelineAddr {
    /// TLS to `addr`, verified as `localhost` against `ca_pem`; presenting
    /// `client` (certificate and key, PEM) when given.
    pub fn tls(addr: SocketAddr, ca_pem: &str, client: Option<(&str, &str)>) -> LifelineAddr {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca_pem))
            .domain_name("localhost");
        if let Some((cert, key)) = client {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        LifelineAddr {
            addr,
            tls: Some(tls),
        }
    }
}

/// Every replica's gRPC port (one, or several behind the same load
/// balancer).
#[derive(Clone, Debug)]
pub struct Lifelines(pub Vec<LifelineAddr>);

impl From<LifelineAddr> for Lifelines {
    fn from(a: LifelineAddr) -> Self {
        Lifelines(vec![a])
    }
}

impl From<SocketAddr> for Lifelines {
    fn from(a: SocketAddr) -> Self {
        Lifelines(vec![a.into()])
    }
}

/// The channels one agent may use, one per replica, and the one it is on.
#[derive(Clone)]
pub struct Upstream {
    channels: Arc<[Channel]>,
    at: usize,
}

impl Upstream {
    /// Replicas' channels shared by many agents, this one starting at the
    /// `at`th (wrapping).
    pub(super) fn starting_at(channels: Arc<[Channel]>, at: usize) -> Upstream {
        let at = at.checked_rem(channels.len()).unwrap_or(0);
        Upstream { channels, at }
    }

    pub(super) fn current(&self) -> &Channel {
        &self.channels[self.at % self.channels.len()]
    }

    /// Moves on to the next replica, as a balancer does when a backend
    /// breaks a connection or refuses one.
    pub(super) fn next(&mut self) {
        self.at = (self.at + 1) % self.channels.len();
    }
}

impl From<Channel> for Upstream {
    fn from(c: Channel) -> Self {
        Upstream {
            channels: Arc::from([c]),
            at: 0,
        }
    }
}

/// A channel to Lifeline's gRPC port (connects lazily, reconnects itself).
pub fn lifeline_channel(to: impl Into<LifelineAddr>) -> Result<Channel, tonic::transport::Error> {
    let to = to.into();
    let scheme = if to.tls.is_some() { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{}", to.addr))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    if let Some(tls) = to.tls {
        ep = ep.tls_config(tls)?;
    }
    Ok(ep.connect_lazy())
}

/// A Connect request carrying `authorization: Bearer <join token>`.
pub fn join_request<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Ok(v) = format!("Bearer {token}").parse() {
        req.metadata_mut().insert("authorization", v);
    }
    req
}
