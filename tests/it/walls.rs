//! The walls between rooms, read from the source: no room imports a room
//! that imports it back (directly or round a circle), the HTTP edge's
//! modules form no circle either, and the simulator speaks only the wire.
//!
//! A room is a top-level module of `src/` (`fleet`, `signals`, …); an edge
//! is any `crate::room` path in its files. Plain text, no parser: a path in
//! a comment counts too, which errs on the strict side.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    crate::support::files_ending(dir, "rs", out);
}

/// Every `prefix::name` in `text`, as `name`.
fn paths_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(prefix).filter_map(move |(i, _)| {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &text[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

fn src() -> PathBuf {
    crate::support::repo().join("src")
}

/// The module a file belongs to, `depth` levels below `base`: `fleet` for
/// `src/fleet.rs` and `src/fleet/shell.rs`.
fn module_of(file: &Path, base: &Path) -> Option<String> {
    let rel = file.strip_prefix(base).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Room → rooms it names.
fn room_graph() -> Graph {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut g = Graph::new();
    for f in files {
        let Some(room) = module_of(&f, &src()) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("source is readable");
        let deps = g.entry(room.clone()).or_default();
        for dep in paths_after(&text, "crate::") {
            if dep != room {
                deps.insert(dep.to_string());
            }
        }
    }
    g
}

/// The modules of a room (`src/<room>/*`) → the ones they name.
fn room_modules(room: &str) -> Graph {
    let base = src().join(room);
    let full = format!("crate::{room}::");
    let mut files = Vec::new();
    rust_files(&base, &mut files);
    let mut g = Graph::new();
    for f in files {
        let Some(module) = module_of(&f, &base) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("source is readable");
        let deps = g.entry(module.clone()).or_default();
        let named = paths_after(&text, &full).chain(
            // `super::x` from a direct child of the room names a sibling.
            (f.parent() == Some(base.as_path()))
                .then(|| paths_after(&text, "super::"))
                .into_iter()
                .flatten(),
        );
        for dep in named {
            if dep != module && base.join(format!("{dep}.rs")).exists() {
                deps.insert(dep.to_string());
            }
        }
    }
    g
}

/// A circle in `g`, if there is one, as the path that closes it.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &Graph,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut done, &mut Vec::new()))
}

/// Guards the walls: a room that imports a room importing it back is one
/// room split in two, and neither half can be replaced alone.
#[test]
fn rooms_import_each_other_in_one_direction_only() {
    let g = room_graph();
    assert!(g.contains_key("fleet") && g["signals"].contains("fleet"));
    if let Some(c) = find_cycle(&g) {
        panic!("import circle among rooms: {}", c.join(" → "));
    }
}

#[test]
fn the_http_edge_has_no_import_circle() {
    let g = room_modules("http");
    assert!(g["auth"].contains("caller"), "{g:?}");
    if let Some(c) = find_cycle(&g) {
        panic!("import circle in src/http: {}", c.join(" → "));
    }
}

/// Guards the fleet's layers: the model is the pure core, read by the
/// views and driven by the shell; it names none of them, nor the store,
/// holds no channel and starts no task.
#[test]
fn the_fleet_model_names_nothing_above_it() {
    let g = room_modules("fleet");
    assert!(g["shell"].contains("model"), "{g:?}");
    if let Some(c) = find_cycle(&g) {
        panic!("import circle in src/fleet: {}", c.join(" → "));
    }
    let above = ["view", "published", "shell", "handle", "outbox", "board"];
    let named: Vec<&String> = g["model"]
        .iter()
        .filter(|m| above.contains(&m.as_str()))
        .collect();
    assert!(named.is_empty(), "the fleet model names {named:?}");
    let mut files = Vec::new();
    rust_files(&src().join("fleet/model"), &mut files);
    files.push(src().join("fleet/model.rs"));
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        // `super::super::` from a model file would reach past the model.
        // The model speaks its own language (`domain::record`): the store
        // maps it to rows, the model never names the store.
        for bad in [
            "crate::store",
            "tokio::",
            "crate::stats",
            "Clock",
            "std::time::Instant",
            "super::super::",
        ] {
            assert!(!text.contains(bad), "{} names {bad}", f.display());
        }
    }
}

/// Guards the seam between the hub and the other replicas: the signals
/// room reaches them only through its `Peers` trait, so it names no lease
/// SQL, holds no pool of its own and knows nothing of the replica room.
#[test]
fn the_hub_reaches_other_replicas_only_through_its_seam() {
    let mut files = Vec::new();
    rust_files(&src().join("signals"), &mut files);
    files.push(src().join("signals.rs"));
    assert!(files.len() > 3, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        for bad in [
            "store::lease::",
            "PgPool",
            "crate::replica",
            "LISTEN",
            "pg_notify",
        ] {
            assert!(!text.contains(bad), "{} names {bad}", f.display());
        }
    }
}

/// Guards the simulator's independence: it is the test double that catches
/// Lifeline's bugs, so it must not reuse Lifeline's rules or helpers (a bug
/// in them would be mirrored, not caught). It may use the generated wire
/// types, the injectable clock every part shares, the names of kinds and
/// the name its agents' spans export under. Only `demo.rs`, where the demo
/// starts a Lifeline beside its cluster, reaches further.
#[test]
fn the_simulator_speaks_only_the_wire() {
    const ALLOWED: [&str; 5] = [
        "proto",
        "clock",
        "domain::Kind",
        "domain::UnknownKind",
        "telemetry::otlp::SIM_SERVICE",
    ];
    let sim = crate::support::repo().join("crates/lifeline-sim/src");
    let mut files = Vec::new();
    rust_files(&sim, &mut files);
    files.retain(|f| !f.ends_with("demo.rs"));
    assert!(files.len() > 10, "the simulator's files: {files:?}");
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        for (i, _) in text.match_indices("lifeline::") {
            if text[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &text[i + "lifeline::".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let ok = ALLOWED
                .iter()
                .any(|a| path == *a || path.starts_with(&format!("{a}::")));
            if !ok {
                found.push(format!("{}: lifeline::{path}", f.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the simulator imports Lifeline's own code:\n{}",
        found.join("\n")
    );
}

/// The server library builds without the simulator and the benches: its
/// manifest does not depend on them and its source never names them
/// (`.ci/run` also builds `cargo build -p lifeline --lib` alone).
#[test]
fn the_server_depends_on_neither_the_simulator_nor_the_benches() {
    let manifest = std::fs::read_to_string(crate::support::repo().join("Cargo.toml"))
        .expect("Cargo.toml is readable");
    let deps = manifest
        .split("\n[")
        .filter(|section| {
            section.starts_with("dependencies]") || section.starts_with("dev-dependencies]")
        })
        .collect::<Vec<_>>()
        .join("\n");
    for krate in ["lifeline-sim", "lifeline-bench", "lifeline-cli"] {
        assert!(
            !deps.contains(krate),
            "the server's manifest depends on {krate}"
        );
    }
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source is readable");
        for krate in ["lifeline_sim", "lifeline_bench"] {
            assert!(!text.contains(krate), "{} names {krate}", f.display());
        }
    }
}

/// The `lifeline` command links none of the benches: they are the
/// `lifeline-bench` binary's (`src/bench.rs`), and nothing the `lifeline`
/// binary is made of names them, so its object files carry none of them.
#[test]
fn the_shipped_command_names_no_bench() {
    let cli = crate::support::repo().join("crates/lifeline-cli/src");
    let mut files = Vec::new();
    rust_files(&cli, &mut files);
    assert!(files.len() > 3, "{files:?}");
    for f in files.iter().filter(|f| !f.ends_with("bench.rs")) {
        let text = std::fs::read_to_string(f).expect("source is readable");
        assert!(
            !text.contains("lifeline_bench"),
            "{} names lifeline_bench",
            f.display()
        );
    }
}

/// The modules directly inside `dir` (a room, or a folder within one) →
/// the siblings they name: `crate::<dir>::x`, or `super::x` from a file
/// directly inside, `super::super::x` from one a folder further down.
fn folder_modules(dir: &Path) -> Graph {
    folder_modules_in(dir, &src())
}

/// [`folder_modules`] for a folder of the crate whose source is `root`.
fn folder_modules_in(dir: &Path, root: &Path) -> Graph {
    let rel = dir.strip_prefix(root).expect("a folder of the crate");
    let crate_path = std::iter::once("crate".to_string())
        .chain(
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        )
        .collect::<Vec<_>>()
        .join("::")
        + "::";
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut g = Graph::new();
    for f in files {
        let Some(module) = module_of(&f, dir) else {
            continue;
        };
        let depth = f.strip_prefix(dir).map_or(0, |r| r.components().count());
        let text = std::fs::read_to_string(&f).expect("source is readable");
        let deps = g.entry(module.clone()).or_default();
        let relative = match depth {
            // From a file at a crate's root, `super::` is the crate root,
            // whose modules are that file's siblings all the same.
            1 => Some("super::"),
            2 => Some("super::super::"),
            _ => None,
        };
        let named = paths_after(&text, &crate_path)
            .chain(relative.into_iter().flat_map(|r| paths_after(&text, r)));
        // The crate's root file declares the modules; it is no module.
        if f.parent() == Some(root) && (f.ends_with("lib.rs") || f.ends_with("main.rs")) {
            continue;
        }
        for dep in named {
            if dep != module && (dir.join(format!("{dep}.rs")).exists() || dir.join(dep).is_dir()) {
                deps.insert(dep.to_string());
            }
        }
    }
    g
}

/// Guards every room's inside: within any folder of `src/`, its modules
/// name each other in one direction only (a circle is one module split in
/// two files).
#[test]
fn no_folder_inside_a_room_has_an_import_circle() {
    let mut dirs = Vec::new();
    fn folders(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                out.push(e.path());
                folders(&e.path(), out);
            }
        }
    }
    folders(&src(), &mut dirs);
    assert!(
        dirs.iter().any(|d| d.ends_with("ingest/teleport")),
        "{dirs:?}"
    );
    let mut circles = Vec::new();
    for d in dirs {
        if let Some(c) = find_cycle(&folder_modules(&d)) {
            circles.push(format!(
                "{}: {}",
                d.strip_prefix(src()).unwrap_or(&d).display(),
                c.join(" → ")
            ));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found_and_named() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g).map(|c| c.join(" → ")),
        Some("a → b → c → a".to_string())
    );
}

/// Guards the crates' insides too (the sidecar, the CLI, the simulator,
/// the benches): within each crate, and within any folder of one, the
/// modules name each other in one direction only.
#[test]
fn no_crate_has_an_import_circle() {
    let crates = crate::support::repo().join("crates");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    roots.sort();
    assert!(roots.len() >= 4, "{roots:?}");
    let mut circles = Vec::new();
    let mut looked = 0;
    for root in &roots {
        let mut dirs = vec![root.clone()];
        fn folders(d: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    out.push(e.path());
                    folders(&e.path(), out);
                }
            }
        }
        folders(root, &mut dirs);
        for d in dirs {
            looked += 1;
            if let Some(c) = find_cycle(&folder_modules_in(&d, root)) {
                circles.push(format!(
                    "{}: {}",
                    d.strip_prefix(&crates).unwrap_or(&d).display(),
                    c.join(" → ")
                ));
            }
        }
    }
    assert!(looked > roots.len(), "the crates' folders were read");
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}
