//! Every key the config structs take is named in the example files
//! (commented or not), and every key the example files name is taken: an
//! operator reading `lifeline.example.toml` or `deploy/lifeline-agent.toml`
//! sees every knob, and none that does nothing.
//!
//! The structs' keys come from serde itself: a deserializer that answers
//! no value but records the fields each struct asks for, walking down one
//! field at a time. The files' keys come from their lines: table headers
//! and `key = …`, with or without a leading `#`.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;

use serde::de::value::Error as E;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess};
use serde::de::{Deserializer, Visitor};

/// Walks down `path` through a type's fields; at its end, a struct's
/// fields are recorded (as `prefix.field`). Anything else is a leaf.
struct Probe<'r> {
    found: &'r RefCell<BTreeSet<String>>,
    prefix: String,
    path: Vec<String>,
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, E> {
        Err(de::Error::custom("a leaf"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, E> {
        let Some((key, rest)) = self.path.split_first() else {
            let mut found = self.found.borrow_mut();
            for f in fields {
                found.insert(join(&self.prefix, f));
            }
            return v.visit_map(Down {
                key: None,
                next: None,
            });
        };
        let next = Probe {
            found: self.found,
            prefix: join(&self.prefix, key),
            path: rest.to_vec(),
        };
        v.visit_map(Down {
            key: Some(key.clone()),
            next: Some(next),
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_some(self)
    }

    // An array of tables (`[[auth_servers]]`): its element's keys are the
    // array's.
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_seq(One(Some(self)))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, E> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct map tuple tuple_struct enum
        identifier ignored_any
    }
}

/// A map of at most one key, whose value is probed further.
struct Down<'r> {
    key: Option<String>,
    next: Option<Probe<'r>>,
}

impl<'de> MapAccess<'de> for Down<'_> {
    type Error = E;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, E> {
        match self.key.take() {
            Some(k) => seed
                .deserialize(IntoDeserializer::<E>::into_deserializer(k))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, E> {
        match self.next.take() {
            Some(p) => seed.deserialize(p),
            None => Err(de::Error::custom("no value")),
        }
    }
}

/// A sequence of one element, probed further.
struct One<'r>(Option<Probe<'r>>);

impl<'de> SeqAccess<'de> for One<'_> {
    type Error = E;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, E> {
        match self.0.take() {
            Some(p) => seed.deserialize(p).map(Some),
            None => Ok(None),
        }
    }
}

/// Every key `T` takes, nested ones as `table.key`.
fn keys_of<T: DeserializeOwned>() -> BTreeSet<String> {
    let found = RefCell::new(BTreeSet::new());
    let mut seen = BTreeSet::new();
    let mut queue = vec![String::new()];
    while let Some(p) = queue.pop() {
        let path = if p.is_empty() {
            Vec::new()
        } else {
            p.split('.').map(str::to_string).collect()
        };
        // Only what the walk records matters, not the value it ends in.
        let _ = T::deserialize(Probe {
            found: &found,
            prefix: String::new(),
            path,
        });
        for k in found.borrow().iter() {
            if seen.insert(k.clone()) {
                queue.push(k.clone());
            }
        }
    }
    seen
}

/// Every key a TOML file names, commented out or not, with every table
/// that holds one.
fn keys_named_in(text: &str) -> BTreeSet<String> {
    let header =
        regex::Regex::new(r"^#?\s*\[\[?\s*([a-z_][a-z0-9_.]*)\s*\]\]?\s*(#.*)?$").expect("regex");
    let key = regex::Regex::new(r"^#?\s*([a-z_][a-z0-9_]*)\s*=\s*(.*)$").expect("regex");
    let inner = regex::Regex::new(r"([a-z_][a-z0-9_]*)\s*=").expect("regex");
    let mut table = String::new();
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(h) = header.captures(line) {
            table = h[1].to_string();
        } else if let Some(k) = key.captures(line) {
            let name = join(&table, &k[1]);
            // An inline table names its own keys.
            if k[2].starts_with('{') {
                for i in inner.captures_iter(&k[2]) {
                    keys.insert(join(&name, &i[1]));
                }
            }
            keys.insert(name);
        } else {
            continue;
        }
    }
    // Each table that holds a key is named by it.
    let parents: Vec<String> = keys
        .iter()
        .chain(std::iter::once(&table))
        .flat_map(|k| {
            let parts: Vec<&str> = k.split('.').collect();
            (1..parts.len())
                .map(|n| parts[..n].join("."))
                .collect::<Vec<_>>()
        })
        .collect();
    keys.extend(parents);
    keys
}

fn file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What one side has and the other lacks, said plainly.
fn compare(taken: &BTreeSet<String>, named: &BTreeSet<String>, file: &str) {
    let unnamed: Vec<&String> = taken.difference(named).collect();
    let unknown: Vec<&String> = named.difference(taken).collect();
    assert!(
        unnamed.is_empty() && unknown.is_empty(),
        "{file}: keys the config takes but the file never names: {unnamed:?}; keys the file names that the config does not take: {unknown:?}"
    );
}

#[test]
fn the_walk_finds_nested_and_repeated_tables() {
    let keys = keys_of::<lifeline::Config>();
    for k in [
        "server.listen",
        "auth_servers.addr",
        "signals.max_restarts_in_flight.cap",
        "notify.webhooks.secret_file",
        "access.tokens.roles",
        "storage.url",
    ] {
        assert!(keys.contains(k), "{k} missing from {keys:?}");
    }
    assert!(!keys.contains("explicit"), "a skipped field is not a key");
}

#[test]
fn every_key_of_lifeline_is_in_the_example_and_none_else() {
    compare(
        &keys_of::<lifeline::Config>(),
        &keys_named_in(&file("lifeline.example.toml")),
        "lifeline.example.toml",
    );
}

#[test]
fn every_key_of_the_sidecar_is_in_its_example_and_none_else() {
    compare(
        &keys_of::<lifeline_agent::config::FileConfig>(),
        &keys_named_in(&file("deploy/lifeline-agent.toml")),
        "deploy/lifeline-agent.toml",
    );
}

/// `rel` names only keys in `taken`.
fn names_only(rel: &str, taken: &BTreeSet<String>) {
    let unknown: Vec<String> = keys_named_in(&file(rel))
        .difference(taken)
        .cloned()
        .collect();
    assert!(unknown.is_empty(), "{rel} names {unknown:?}");
}

fn path(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The kube agents' sidecar config names only keys the sidecar takes, and
/// its values parse.
#[test]
fn the_kube_agent_config_names_only_real_keys() {
    let rel = "deploy/kubernetes/kube-agent/lifeline-agent.toml";
    names_only(rel, &keys_of::<lifeline_agent::config::FileConfig>());
    if let Err(e) = lifeline_agent::config::FileConfig::load(Some(&path(rel))) {
        panic!("{rel}: {e}");
    }
}

/// The configs the package and the Kubernetes base install name only keys
/// Lifeline takes (and load).
#[test]
fn the_installed_configs_name_only_real_keys() {
    let taken = keys_of::<lifeline::Config>();
    for rel in [
        "deploy/lifeline.toml",
        "deploy/kubernetes/base/lifeline.toml",
    ] {
        names_only(rel, &taken);
        if let Err(e) = lifeline::Config::load(Some(&path(rel)), |_| None) {
            panic!("{rel}: {e}");
        }
    }
}
