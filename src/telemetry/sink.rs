//! A minimal OTLP/gRPC trace receiver: the collector `lifeline-bench ingest`
//! exports to, and the one the tests read spans back from. It runs on its
//! own thread and runtime, so a test may block on a flush while it answers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use tonic::{Request, Response, Status};

/// One received span, flattened.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    total: u64,
}

struct Service {
    keep: usize,
    state: Arc<Mutex<Received>>,
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        req: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut flat = Vec::new();
        let mut n = 0u64;
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| attrs(&r.attributes).remove("service.name"))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    n += 1;
                    flat.push(ReceivedSpan {
                        service: service.clone(),
                        name: s.name,
                        trace_id: hex::encode(&s.trace_id),
                        span_id: hex::encode(&s.span_id),
                        parent_span_id: hex::encode(&s.parent_span_id),
                        attributes: attrs(&s.attributes),
                    });
                }
            }
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.total += n;
        let room = self.keep.saturating_sub(st.spans.len());
        st.spans.extend(flat.into_iter().take(room));
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running receiver on loopback. Stops when dropped.
pub struct Sink {
    pub addr: SocketAddr,
    state: Arc<Mutex<Received>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sink {
    /// Listens on 127.0.0.1 (a free port); keeps the first `keep` spans
    /// and counts all of them.
    pub fn start(keep: usize) -> std::io::Result<Sink> {
        Sink::serve(keep, None)
    }

    /// The same over TLS with this certificate and key (PEM): export to
    /// `https://localhost:<port>`.
    pub fn start_tls(keep: usize, cert_pem: &str, key_pem: &str) -> std::io::Result<Sink> {
        let tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(cert_pem, key_pem));
        Sink::serve(keep, Some(tls))
    }

    fn serve(keep: usize, tls: Option<tonic::transport::ServerTlsConfig>) -> std::io::Result<Sink> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(Received::default()));
        let svc = Service {
            keep,
            state: state.clone(),
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("otlp-sink".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                    let mut server = tonic::transport::Server::builder();
                    if let Some(tls) = tls {
                        server = match server.tls_config(tls) {
                            Ok(s) => s,
                            Err(_) => return,
                        };
                    }
                    let _ = server
                        .add_service(TraceServiceServer::new(svc))
                        .serve_with_incoming_shutdown(incoming, async {
                            let _ = stop_rx.await;
                        })
                        .await;
                });
            })?;
        Ok(Sink {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans kept so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spans
            .clone()
    }

    /// Spans received so far, kept or not.
    pub fn received(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
