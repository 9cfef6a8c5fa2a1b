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
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::de::value::Error as E;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess};
use serde::de::{Deserializer, Visitor};

/// What the walk learns of a key: the struct that holds it, and what it
/// takes when it is no table (`boolean`, `integer`, `one of …`, …).
#[derive(Clone, Debug, Default)]
struct Found {
    owner: &'static str,
    takes: Option<String>,
}

/// Walks down `path` through a type's fields; at its end, a struct's
/// fields are recorded (as `prefix.field`), and anything else is a leaf
/// whose kind is recorded for `prefix`.
struct Probe<'r> {
    found: &'r RefCell<BTreeMap<String, Found>>,
    prefix: String,
    path: Vec<String>,
    /// Inside an array at the path's end: the leaf is its element.
    element: bool,
}

impl Probe<'_> {
    /// At the path's end, records what `prefix` takes; always refuses
    /// (the walk needs no value).
    fn leaf<T>(self, takes: &str) -> Result<T, E> {
        if self.path.is_empty() {
            let takes = if self.element {
                format!("array of {takes}")
            } else {
                takes.to_string()
            };
            self.found
                .borrow_mut()
                .entry(self.prefix)
                .or_default()
                .takes = Some(takes);
        }
        Err(de::Error::custom("a leaf"))
    }
}

macro_rules! leaves {
    ($($method:ident => $takes:literal),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, E> {
            self.leaf($takes)
        })*
    };
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

    leaves! {
        deserialize_any => "a value",
        deserialize_bool => "boolean",
        deserialize_i8 => "integer", deserialize_i16 => "integer", deserialize_i32 => "integer",
        deserialize_i64 => "integer", deserialize_i128 => "integer",
        deserialize_u8 => "integer", deserialize_u16 => "integer", deserialize_u32 => "integer",
        deserialize_u64 => "integer", deserialize_u128 => "integer",
        deserialize_f32 => "number", deserialize_f64 => "number",
        deserialize_char => "string", deserialize_str => "string", deserialize_string => "string",
        deserialize_map => "table",
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _v: V,
    ) -> Result<V::Value, E> {
        let one_of: Vec<String> = variants.iter().map(|v| format!("`{v}`")).collect();
        self.leaf(&format!("one of {}", one_of.join(", ")))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, E> {
        let Some((key, rest)) = self.path.split_first() else {
            if self.element {
                self.found
                    .borrow_mut()
                    .entry(self.prefix.clone())
                    .or_default()
                    .takes = Some("array of tables".into());
            }
            let mut found = self.found.borrow_mut();
            for f in fields {
                found.entry(join(&self.prefix, f)).or_default().owner = name;
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
            element: false,
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
        let element = self.path.is_empty();
        v.visit_seq(One(Some(Probe { element, ..self })))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, E> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bytes byte_buf unit unit_struct tuple tuple_struct identifier ignored_any
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
    walk::<T>().into_keys().collect()
}

/// Every key `T` takes, with what the walk learned of it.
fn walk<T: DeserializeOwned>() -> BTreeMap<String, Found> {
    let found = RefCell::new(BTreeMap::new());
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
            element: false,
        });
        for k in found.borrow().keys() {
            if seen.insert(k.clone()) {
                queue.push(k.clone());
            }
        }
    }
    found.into_inner()
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

/// Each config struct's fields as the source documents them: (struct,
/// key) → (doc comment, whether it is a duration), read from
/// `src/config.rs` and `src/config/`. A field's key is its name, or its
/// `#[serde(rename = "…")]`.
fn field_docs() -> BTreeMap<(String, String), (String, bool)> {
    let strukt = regex::Regex::new(r"^pub struct (\w+)").expect("regex");
    let field = regex::Regex::new(r"^\s+(?:pub(?:\([a-z]+\))? )?(\w+): ").expect("regex");
    let rename = regex::Regex::new(r#"rename = "([^"]+)""#).expect("regex");
    let mut files = vec![path("src/config.rs")];
    let mut dir: Vec<_> = std::fs::read_dir(path("src/config"))
        .expect("src/config")
        .flatten()
        .map(|e| e.path())
        .collect();
    dir.sort();
    files.extend(dir);
    let mut out = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        let mut current: Option<String> = None;
        let mut doc: Vec<String> = Vec::new();
        let (mut duration, mut renamed) = (false, None::<String>);
        let mut in_attr = false;
        for line in text.lines() {
            if let Some(c) = strukt.captures(line) {
                current = Some(c[1].to_string());
                doc.clear();
                continue;
            }
            if line == "}" {
                current = None;
            }
            let Some(owner) = &current else { continue };
            let t = line.trim();
            if let Some(d) = t.strip_prefix("///") {
                doc.push(d.trim().to_string());
            } else if t.starts_with("#[") || in_attr {
                // An attribute, maybe over several lines.
                in_attr = !t.ends_with(']');
                duration |= t.contains("humantime_serde") || t.contains("duration_or_off");
                if let Some(r) = rename.captures(t) {
                    renamed = Some(r[1].to_string());
                }
            } else if let Some(c) = field.captures(line) {
                let key = renamed.take().unwrap_or_else(|| c[1].to_string());
                out.insert((owner.clone(), key), (doc.join(" "), duration));
                doc.clear();
                duration = false;
            } else {
                doc.clear();
                duration = false;
                renamed = None;
            }
        }
    }
    out
}

/// The default of `key` in the defaults' TOML, inline.
fn default_of(defaults: &toml::Value, key: &str) -> Option<String> {
    // A `[[clusters]]` entry takes what `[cluster]` takes, with the same
    // defaults; the defaults hold no entry to read them from.
    if let Some(rest) = key.strip_prefix("clusters.") {
        return default_of(defaults, &format!("cluster.{rest}"));
    }
    let mut v = defaults;
    for part in key.split('.') {
        v = v.get(part)?;
    }
    match v {
        toml::Value::Table(_) => None,
        toml::Value::String(s) if s.is_empty() => Some("`\"\"`".into()),
        other => Some(format!("`{other}`")),
    }
}

/// The configuration reference: every key the walk finds, under its
/// table, with what it takes, its default and its doc comment.
fn config_markdown() -> String {
    let found = walk::<lifeline::Config>();
    let docs = field_docs();
    let defaults = toml::Value::Table(
        toml::from_str(
            &lifeline::Config::load(None, |_| None)
                .expect("the defaults load")
                .to_toml()
                .expect("as TOML"),
        )
        .expect("TOML"),
    );
    let tables: BTreeSet<String> = found
        .keys()
        .filter_map(|k| k.rsplit_once('.').map(|(t, _)| t.to_string()))
        .collect();
    let mut by_table: BTreeMap<String, Vec<(&String, &Found)>> = BTreeMap::new();
    for (k, f) in &found {
        let plain_table = tables.contains(k) && f.takes.is_none();
        if plain_table {
            continue;
        }
        let table = k.rsplit_once('.').map_or("", |(t, _)| t).to_string();
        by_table.entry(table).or_default().push((k, f));
    }
    let cell = |t: &str| t.replace('|', "\\|");
    let mut out = String::new();
    for (table, keys) in by_table {
        // An array of tables is written `[[name]]`, as in the file.
        let array = found
            .get(&table)
            .is_some_and(|f| f.takes.as_deref() == Some("array of tables"));
        let heading = match (table.is_empty(), array) {
            (true, _) => "The top level".to_string(),
            (false, true) => format!("`[[{table}]]`"),
            (false, false) => format!("`[{table}]`"),
        };
        out.push_str(&format!(
            "\n### {heading}\n\n| key | takes | default | what it is |\n|---|---|---|---|\n"
        ));
        for (k, f) in keys {
            let leaf = k.rsplit('.').next().unwrap_or(k);
            let (doc, duration) = docs
                .get(&(f.owner.to_string(), leaf.to_string()))
                .cloned()
                .unwrap_or_default();
            let takes = match (&f.takes, duration) {
                (_, true) => "duration (`30s`, `5m`, `1h`)".to_string(),
                (Some(t), false) => t.clone(),
                (None, false) => "table".to_string(),
            };
            let default = default_of(&defaults, k).unwrap_or_else(|| "none".into());
            out.push_str(&format!(
                "| `{leaf}` | {takes} | {default} | {} |\n",
                cell(&doc)
            ));
        }
    }
    out
}

/// The configuration reference in the book is the walk's keys with their
/// types, defaults and doc comments (`LIFELINE_BLESS=1` writes it again),
/// and every key of it has a doc comment.
#[test]
fn the_configuration_reference_is_every_key_with_its_doc() {
    let page = config_markdown();
    let undocumented: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("| `") && l.ends_with("|  |"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys without a doc comment in src/config: {undocumented:#?}"
    );
    let differ = crate::book::region("reference/config.md", "config-keys", &page);
    assert!(
        differ.is_empty(),
        "{differ} differs from the configuration's keys; write it again with LIFELINE_BLESS=1 cargo test --test it config_keys::"
    );
}
