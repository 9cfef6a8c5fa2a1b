//! A node's heartbeat read where it lies in the watch's bytes, and a
//! listing's nodes where they lie in its pages.
//!
//! Nearly every event of a large cluster's watch is a node saying again
//! what it said last time, with a later expiry. Decoding it into Teleport's
//! types makes about ten strings only for the host to find that nothing
//! but the expiry moved. Here the event's bytes are walked once with
//! prost's wire primitives, and the fields a heartbeat carries are
//! borrowed from them. The host takes the expiry in place when the rest
//! matches what it last heard (`Hosts::node_heartbeat` in `hosts.rs`).
//! A `ListResources` page of nodes is read the same way: each node's
//! fields are borrowed from the page, and only those a host keeps become
//! strings.
//!
//! This only ever does what decoding would have done. Anything unusual
//! reads as `None`, and the event (or the page's entry) is then decoded as
//! before: another resource or operation, a message field given twice
//! (prost would merge the two), a wire type prost would refuse, text that
//! is not UTF-8. Every string field the generated type decodes is checked
//! as prost checks it, and unknown fields are skipped as prost skips them.
//! Tests hold the two readings equal over valid and damaged messages.
//!
//! Owns: reading the bytes. Must not touch: what a heartbeat means (hosts,
//! convert).

use std::ops::Range;

use prost::bytes::{Buf, Bytes};
use prost::Message;
use smallvec::SmallVec;
use tonic::codec::{DecodeBuf, Decoder};
use tonic::Status;

use super::call::Call;
use super::wire::{delimited, key, skip, text, varint};
use crate::proto::teleport::auth as tp;

/// One message of the watch: a node's PUT kept as its bytes with where
/// its fields lie, anything else decoded.
pub enum Watched {
    NodePut(NodeBytes),
    Event(tp::Event),
}

/// A node's PUT as the bytes it came in and the places of the fields read
/// from them, so that the source reads it without walking it again.
pub struct NodeBytes {
    bytes: Bytes,
    name: Range<usize>,
    sub_kind: Range<usize>,
    hostname: Range<usize>,
    version: Range<usize>,
    proxies: SmallVec<[Range<usize>; 4]>,
    expires: Option<prost_types::Timestamp>,
}

impl NodeBytes {
    /// `put`, walked from `base`, with its fields placed by their offsets
    /// in it; `bytes` holds what `base` held.
    fn new(base: &[u8], put: &NodePut<'_>, bytes: Bytes) -> NodeBytes {
        let at = |s: &str| {
            let start = (s.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
            start..start.saturating_add(s.len())
        };
        NodeBytes {
            name: at(put.name),
            sub_kind: at(put.sub_kind),
            hostname: at(put.hostname),
            version: at(put.version),
            proxies: put.proxies.iter().map(|p| at(p)).collect(),
            expires: put.expires,
            bytes,
        }
    }

    /// The fields again, borrowed (each was UTF-8 when walked, and is
    /// checked again rather than assumed).
    pub fn read(&self) -> Option<NodePut<'_>> {
        let text = |r: &Range<usize>| {
            // An empty field may not lie in the bytes at all.
            if r.is_empty() {
                return Some("");
            }
            std::str::from_utf8(self.bytes.get(r.clone())?).ok()
        };
        Some(NodePut {
            name: text(&self.name)?,
            sub_kind: text(&self.sub_kind)?,
            expires: self.expires,
            hostname: text(&self.hostname)?,
            version: text(&self.version)?,
            proxies: self.proxies.iter().map(text).collect::<Option<_>>()?,
        })
    }

    /// The bytes it was read from: the whole event (a listed node's
    /// are its page's).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

/// `WatchEvents` as the generated client calls it, its events as
/// [`Watched`]. Every decoding error is the generated decoder's.
pub type WatchCodec = Call<tp::Watch, WatchDecoder>;

#[derive(Default)]
pub struct WatchDecoder;

impl Decoder for WatchDecoder {
    type Item = Watched;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Watched>, Status> {
        // A message lies in one piece of tonic's buffer.
        let whole = buf.chunk().len() == buf.remaining();
        if whole {
            let chunk = buf.chunk();
            let node = node_put(chunk).map(|put| NodeBytes::new(chunk, &put, Bytes::new()));
            if let Some(node) = node {
                let bytes = buf.copy_to_bytes(buf.remaining());
                return Ok(Some(Watched::NodePut(NodeBytes { bytes, ..node })));
            }
        }
        tp::Event::decode(buf)
            .map(|e| Some(Watched::Event(e)))
            .map_err(|e| Status::internal(e.to_string()))
    }
}

/// Event fields (`proto.Event`).
const EVENT_TYPE: u32 = 1;
const EVENT_SERVER: u32 = 11;
/// The other members of `Event.Resource`: any of them ends the reading.
const EVENT_OTHER_RESOURCES: [u32; 6] = [2, 17, 26, 29, 32, 43];
/// `proto.Operation.PUT`.
const PUT: u64 = 1;

/// A node's PUT, borrowed from the event's bytes; nothing validated.
#[derive(Debug, Default, PartialEq)]
pub struct NodePut<'a> {
    pub name: &'a str,
    pub sub_kind: &'a str,
    /// `Metadata.Expires` as sent (Go's zero time included).
    pub expires: Option<prost_types::Timestamp>,
    pub hostname: &'a str,
    pub version: &'a str,
    pub proxies: SmallVec<[&'a str; 4]>,
}

/// `bytes` as a `ServerV2` PUT of kind `node`, or `None`.
pub fn node_put(bytes: &[u8]) -> Option<NodePut<'_>> {
    let mut buf = bytes;
    let mut op = 0u64;
    let mut server = None;
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            EVENT_TYPE => op = varint(&mut buf, wt)?,
            EVENT_SERVER if server.is_none() => server = Some(delimited(&mut buf, wt)?),
            EVENT_SERVER => return None,
            t if EVENT_OTHER_RESOURCES.contains(&t) => return None,
            _ => skip(&mut buf, wt)?,
        }
    }
    if op != PUT {
        return None;
    }
    let mut out = NodePut::default();
    let kind = server_v2(server?, &mut out)?;
    (kind == "node").then_some(out)
}

/// `ListResourcesResponse` fields.
const PAGE_RESOURCES: u32 = 1;
const PAGE_NEXT_KEY: u32 = 2;
const PAGE_TOTAL_COUNT: u32 = 3;
/// `PaginatedResource.Node`, and the oneof's other members.
const ENTRY_NODE: u32 = 3;
const ENTRY_OTHER_RESOURCES: [u32; 4] = [1, 2, 7, 8];

/// One entry of a `ListResources` page: a node as the bytes of its page
/// with where its fields lie, anything else decoded.
pub enum Entry {
    Node(NodeBytes),
    Decoded(Box<tp::PaginatedResource>),
}

/// A `ListResourcesResponse`'s entries, its nodes read in place. Decoding
/// the page fails exactly when prost's would, with prost's error: a page
/// whose outer fields the walk cannot read is decoded by prost whole.
pub fn page_entries(page: &Bytes) -> Result<Vec<Entry>, prost::DecodeError> {
    let whole = page.as_ref();
    let decoded = || {
        tp::ListResourcesResponse::decode(page.clone()).map(|p| {
            p.resources
                .into_iter()
                .map(|r| Entry::Decoded(Box::new(r)))
                .collect()
        })
    };
    let mut buf = whole;
    let mut out = Vec::new();
    while !buf.is_empty() {
        let Some((tag, wt)) = key(&mut buf) else {
            return decoded();
        };
        let read = match tag {
            PAGE_RESOURCES => {
                let Some(entry) = delimited(&mut buf, wt) else {
                    return decoded();
                };
                let entry = match listed_node(entry) {
                    Some(put) => Entry::Node(NodeBytes::new(whole, &put, page.clone())),
                    // An entry prost refuses fails the page: prost says how.
                    None => match tp::PaginatedResource::decode(entry) {
                        Ok(r) => Entry::Decoded(Box::new(r)),
                        Err(_) => return decoded(),
                    },
                };
                out.push(entry);
                continue;
            }
            PAGE_NEXT_KEY => text(&mut buf, wt).map(drop),
            PAGE_TOTAL_COUNT => varint(&mut buf, wt).map(drop),
            _ => skip(&mut buf, wt),
        };
        if read.is_none() {
            return decoded();
        }
    }
    Ok(out)
}

/// A `PaginatedResource` holding a `ServerV2` of kind `node` and no other
/// member of its oneof, or `None`.
fn listed_node(mut buf: &[u8]) -> Option<NodePut<'_>> {
    let mut server = None;
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            ENTRY_NODE if server.is_none() => server = Some(delimited(&mut buf, wt)?),
            ENTRY_NODE => return None,
            t if ENTRY_OTHER_RESOURCES.contains(&t) => return None,
            _ => skip(&mut buf, wt)?,
        }
    }
    let mut out = NodePut::default();
    let kind = server_v2(server?, &mut out)?;
    (kind == "node").then_some(out)
}

/// `ServerV2`: its kind, the rest into `out`.
fn server_v2<'a>(mut buf: &'a [u8], out: &mut NodePut<'a>) -> Option<&'a str> {
    let mut kind = "";
    let (mut meta, mut spec) = (false, false);
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            1 => kind = text(&mut buf, wt)?,
            2 => out.sub_kind = text(&mut buf, wt)?,
            3 => {
                text(&mut buf, wt)?;
            }
            4 if !meta => {
                meta = true;
                metadata(delimited(&mut buf, wt)?, out)?;
            }
            5 if !spec => {
                spec = true;
                server_spec(delimited(&mut buf, wt)?, out)?;
            }
            4 | 5 => return None,
            _ => skip(&mut buf, wt)?,
        }
    }
    Some(kind)
}

/// `Metadata`: name, labels (checked, not kept), expiry.
fn metadata<'a>(mut buf: &'a [u8], out: &mut NodePut<'a>) -> Option<()> {
    let mut expires = false;
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            1 => out.name = text(&mut buf, wt)?,
            2 | 3 | 8 => {
                text(&mut buf, wt)?;
            }
            5 => label(delimited(&mut buf, wt)?)?,
            6 if !expires => {
                expires = true;
                out.expires = Some(timestamp(delimited(&mut buf, wt)?)?);
            }
            6 => return None,
            _ => skip(&mut buf, wt)?,
        }
    }
    Some(())
}

/// One `Labels` map entry: a string key and a string value.
fn label(mut buf: &[u8]) -> Option<()> {
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            1 | 2 => {
                text(&mut buf, wt)?;
            }
            _ => skip(&mut buf, wt)?,
        }
    }
    Some(())
}

/// `google.protobuf.Timestamp`, as prost reads its int64 and int32.
fn timestamp(mut buf: &[u8]) -> Option<prost_types::Timestamp> {
    let mut t = prost_types::Timestamp::default();
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            1 => t.seconds = varint(&mut buf, wt)? as i64,
            2 => t.nanos = varint(&mut buf, wt)? as i32,
            _ => skip(&mut buf, wt)?,
        }
    }
    Some(t)
}

/// `ServerSpecV2`: hostname, version, `ProxyIDs`; its other strings checked.
fn server_spec<'a>(mut buf: &'a [u8], out: &mut NodePut<'a>) -> Option<()> {
    while !buf.is_empty() {
        let (tag, wt) = key(&mut buf)?;
        match tag {
            3 => out.hostname = text(&mut buf, wt)?,
            7 => out.version = text(&mut buf, wt)?,
            12 => out.proxies.push(text(&mut buf, wt)?),
            1 | 11 | 13 => {
                text(&mut buf, wt)?;
            }
            6 => {
                varint(&mut buf, wt)?;
            }
            _ => skip(&mut buf, wt)?,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::teleport::{auth as tp, types};
    use prost::encoding::WireType;
    use prost::Message;
    use rand::{Rng, SeedableRng};

    fn node(name: &str, proxies: &[&str]) -> tp::Event {
        tp::Event {
            r#type: tp::Operation::Put as i32,
            resource: Some(tp::event::Resource::Server(Box::new(types::ServerV2 {
                kind: "node".into(),
                sub_kind: String::new(),
                version: "v2".into(),
                metadata: Some(types::Metadata {
                    name: name.into(),
                    namespace: "default".into(),
                    description: "d".into(),
                    labels: [("env".to_string(), "prod".to_string())].into(),
                    expires: Some(prost_types::Timestamp {
                        seconds: 1_800_000_000,
                        nanos: 5,
                    }),
                    revision: "r1".into(),
                }),
                spec: Some(types::ServerSpecV2 {
                    addr: "10.0.0.1:3022".into(),
                    hostname: format!("{name}.example"),
                    use_tunnel: true,
                    version: "16.4.2".into(),
                    peer_addr: String::new(),
                    proxy_i_ds: proxies.iter().map(|p| p.to_string()).collect(),
                    public_addrs: vec!["a.example:3022".into()],
                }),
            }))),
        }
    }

    /// `base` with one kind of damage: a byte replaced (0), cut short (1),
    /// a byte inserted (2), or three bits flipped (3).
    fn damaged(base: &[u8], how: usize, rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
        let mut b = base.to_vec();
        match how {
            0 => {
                let i = rng.random_range(0..b.len());
                b[i] = rng.random();
            }
            1 => b.truncate(rng.random_range(0..b.len())),
            2 => {
                let i = rng.random_range(0..b.len());
                b.insert(i, rng.random());
            }
            _ => {
                for _ in 0..3 {
                    let i = rng.random_range(0..b.len());
                    b[i] ^= 1 << rng.random_range(0..8);
                }
            }
        }
        b
    }

    /// Name, SubKind, expiry, hostname, version, proxies.
    type Read = (
        String,
        String,
        Option<prost_types::Timestamp>,
        String,
        String,
        Vec<String>,
    );

    /// What decoding the bytes says of a node PUT, in the same form.
    fn decoded(bytes: &[u8]) -> Option<Read> {
        let ev = tp::Event::decode(bytes).ok()?;
        if ev.r#type != tp::Operation::Put as i32 {
            return None;
        }
        let Some(tp::event::Resource::Server(s)) = ev.resource else {
            return None;
        };
        if s.kind != "node" {
            return None;
        }
        let m = s.metadata.unwrap_or_default();
        let sp = s.spec.unwrap_or_default();
        Some((
            m.name,
            s.sub_kind,
            m.expires,
            sp.hostname,
            sp.version,
            sp.proxy_i_ds,
        ))
    }

    fn read(bytes: &[u8]) -> Option<Read> {
        node_put(bytes).map(|n| {
            (
                n.name.into(),
                n.sub_kind.into(),
                n.expires,
                n.hostname.into(),
                n.version.into(),
                n.proxies.iter().map(|p| p.to_string()).collect(),
            )
        })
    }

    #[test]
    fn a_node_put_reads_as_decoding_reads_it() {
        let bytes = node("host-1", &["p1", "p2"]).encode_to_vec();
        let n = node_put(&bytes).unwrap();
        assert_eq!(n.name, "host-1");
        assert_eq!(n.hostname, "host-1.example");
        assert_eq!(n.version, "16.4.2");
        assert_eq!(n.proxies.as_slice(), ["p1", "p2"]);
        assert_eq!(
            n.expires.map(|t| (t.seconds, t.nanos)),
            Some((1_800_000_000, 5))
        );
        assert_eq!(read(&bytes), decoded(&bytes));
    }

    #[test]
    fn anything_but_a_node_put_reads_as_none() {
        let mut proxy = node("p", &[]);
        if let Some(tp::event::Resource::Server(s)) = proxy.resource.as_mut() {
            s.kind = "proxy".into();
        }
        let mut delete = node("h", &[]);
        delete.r#type = tp::Operation::Delete as i32;
        let app = tp::Event {
            r#type: tp::Operation::Put as i32,
            resource: Some(tp::event::Resource::AppServer(Box::default())),
        };
        for ev in [proxy, delete, app] {
            assert_eq!(node_put(&ev.encode_to_vec()), None, "{ev:?}");
        }
        // A Metadata given twice is merged by prost: left to it.
        let mut bytes = node("h", &[]).encode_to_vec();
        let again = types::ServerV2 {
            metadata: Some(types::Metadata::default()),
            ..Default::default()
        };
        let mut twice = Vec::new();
        prost::encoding::message::encode(11, &again, &mut twice);
        bytes.extend(twice);
        assert_eq!(node_put(&bytes), None);
    }

    /// Damaged and shuffled messages: whenever the walk reads a node PUT,
    /// decoding the same bytes succeeds and reads the same.
    #[test]
    fn the_walk_never_reads_what_decoding_would_not() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let base = node("host-7", &["p1", "p2", "p3"]).encode_to_vec();
        let (mut walked, mut agreed) = (0, 0);
        for round in 0..20_000 {
            let b = damaged(&base, round % 4, &mut rng);
            let fast = read(&b);
            if fast.is_some() {
                walked += 1;
                assert_eq!(fast, decoded(&b), "bytes {b:?}");
                agreed += 1;
            }
        }
        // The damage leaves many messages readable: the check has teeth.
        assert!(walked > 1_000, "{walked}");
        assert_eq!(walked, agreed);
    }

    /// A page of these servers, each as a `PaginatedResource.Node`.
    fn page_of(servers: Vec<types::ServerV2>) -> tp::ListResourcesResponse {
        tp::ListResourcesResponse {
            resources: servers
                .into_iter()
                .map(|s| tp::PaginatedResource {
                    resource: Some(tp::paginated_resource::Resource::Node(s)),
                })
                .collect(),
            next_key: "host-9".into(),
            total_count: 0,
        }
    }

    fn server(name: &str, proxies: &[&str]) -> types::ServerV2 {
        match node(name, proxies).resource {
            Some(tp::event::Resource::Server(s)) => *s,
            _ => unreachable!(),
        }
    }

    /// Each entry in one form: a node's fields as `read` gives them,
    /// anything else as decoded.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Node(Read),
        Other(Box<tp::PaginatedResource>),
    }

    fn fields(s: types::ServerV2) -> Read {
        let m = s.metadata.unwrap_or_default();
        let sp = s.spec.unwrap_or_default();
        (
            m.name,
            s.sub_kind,
            m.expires,
            sp.hostname,
            sp.version,
            sp.proxy_i_ds,
        )
    }

    /// The page as decoding reads it, nodes of kind `node` as fields.
    fn page_decoded(bytes: &[u8]) -> Option<Vec<Seen>> {
        let page = tp::ListResourcesResponse::decode(bytes).ok()?;
        Some(
            page.resources
                .into_iter()
                .map(|r| match r.resource {
                    Some(tp::paginated_resource::Resource::Node(s)) if s.kind == "node" => {
                        Seen::Node(fields(s))
                    }
                    _ => Seen::Other(Box::new(r)),
                })
                .collect(),
        )
    }

    fn page_walked(bytes: &[u8]) -> Option<Vec<Seen>> {
        let entries = page_entries(&Bytes::copy_from_slice(bytes)).ok()?;
        Some(
            entries
                .into_iter()
                .map(|e| match e {
                    Entry::Node(n) => {
                        let p = n.read().unwrap();
                        Seen::Node((
                            p.name.into(),
                            p.sub_kind.into(),
                            p.expires,
                            p.hostname.into(),
                            p.version.into(),
                            p.proxies.iter().map(|x| x.to_string()).collect(),
                        ))
                    }
                    Entry::Decoded(r) => match r.resource {
                        Some(tp::paginated_resource::Resource::Node(s)) if s.kind == "node" => {
                            Seen::Node(fields(s))
                        }
                        _ => Seen::Other(r),
                    },
                })
                .collect(),
        )
    }

    #[test]
    fn a_page_reads_as_decoding_reads_it_its_nodes_in_place() {
        let mut agentless = server("openssh-1", &[]);
        agentless.sub_kind = "openssh".into();
        let mut proxy = server("p1", &[]);
        proxy.kind = "proxy".into();
        let mut page = page_of(vec![server("host-1", &["p1", "p2"]), agentless, proxy]);
        page.resources.push(tp::PaginatedResource::default());
        page.resources.push(tp::PaginatedResource {
            resource: Some(tp::paginated_resource::Resource::AppServer(
                Default::default(),
            )),
        });
        let bytes = page.encode_to_vec();
        let entries = page_entries(&Bytes::from(bytes.clone())).unwrap();
        // Both nodes in place (the agentless one too: what it means is
        // for convert); the proxy, the empty entry and the app decoded.
        let kinds: Vec<bool> = entries
            .iter()
            .map(|e| matches!(e, Entry::Node(_)))
            .collect();
        assert_eq!(kinds, [true, true, false, false, false]);
        assert_eq!(page_walked(&bytes), page_decoded(&bytes));
        // A Node given twice in one entry is merged by prost: decoded.
        let mut twice = page_of(vec![server("host-2", &[])]).encode_to_vec();
        let mut entry = Vec::new();
        let again = tp::PaginatedResource {
            resource: Some(tp::paginated_resource::Resource::Node(server(
                "host-3",
                &[],
            ))),
        };
        let mut inner = again.encode_to_vec();
        inner.extend(again.encode_to_vec());
        prost::encoding::encode_key(1, WireType::LengthDelimited, &mut entry);
        prost::encoding::encode_varint(inner.len() as u64, &mut entry);
        entry.extend(inner);
        twice.extend(entry);
        let entries = page_entries(&Bytes::from(twice.clone())).unwrap();
        assert!(matches!(entries[1], Entry::Decoded(_)));
        assert_eq!(page_walked(&twice), page_decoded(&twice));
    }

    /// Damaged pages: the walk fails exactly when decoding does, and reads
    /// what it reads.
    #[test]
    fn a_damaged_page_reads_as_decoding_reads_it() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
        let base = page_of(vec![
            server("host-1", &["p1"]),
            server("host-2", &["p1", "p2"]),
            server("host-3", &[]),
        ])
        .encode_to_vec();
        let (mut ok, mut refused, mut in_place) = (0, 0, 0);
        for round in 0..20_000 {
            let b = damaged(&base, round % 3, &mut rng);
            let walked = page_walked(&b);
            assert_eq!(walked, page_decoded(&b), "bytes {b:?}");
            match page_entries(&Bytes::from(b.clone())) {
                Ok(e) => in_place += e.iter().filter(|e| matches!(e, Entry::Node(_))).count(),
                // Prost's own error, word for word.
                Err(e) => assert_eq!(
                    e.to_string(),
                    tp::ListResourcesResponse::decode(b.as_slice())
                        .unwrap_err()
                        .to_string()
                ),
            }
            match walked {
                Some(_) => ok += 1,
                None => refused += 1,
            }
        }
        assert!(
            ok > 1_000 && refused > 1_000,
            "{ok} read, {refused} refused"
        );
        assert!(in_place > 3_000, "{in_place} nodes read in place");
    }
}
