//! Certificates made for a TLS test.

/// A TLS test's certificates: a CA made for the test, Lifeline's
/// certificate and key files it signed, and an agent's client certificate.
pub struct TestTls {
    pub ca: lifeline_sim::pki::Ca,
    pub ca_file: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub agent: lifeline_sim::pki::Issued,
}

impl TestTls {
    pub(super) fn make(dir: &std::path::Path) -> TestTls {
        let ca = lifeline_sim::pki::Ca::new("test CA").expect("CA");
        let server = ca.issue("lifeline", &["localhost"]).expect("server cert");
        let agent = ca.issue("agent", &[]).expect("agent cert");
        let (ca_file, cert, key) = (dir.join("ca.pem"), dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&ca_file, ca.pem()).expect("write CA");
        std::fs::write(&cert, &server.cert_pem).expect("write cert");
        std::fs::write(&key, &server.key_pem).expect("write key");
        TestTls {
            ca,
            ca_file,
            cert,
            key,
            agent,
        }
    }

    /// An HTTPS client that trusts the test CA.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca.pem().as_bytes()).expect("CA pem"),
            )
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    }

    /// Where agents reach `grpc` over TLS, with the agent's certificate
    /// or none.
    pub fn agent_addr(
        &self,
        grpc: std::net::SocketAddr,
        with_cert: bool,
    ) -> lifeline_sim::agent::LifelineAddr {
        let client =
            with_cert.then_some((self.agent.cert_pem.as_str(), self.agent.key_pem.as_str()));
        lifeline_sim::agent::LifelineAddr::tls(grpc, self.ca.pem(), client)
    }
}
