//! No import cycle in `src/`: between files (one module each), and between the top-level rooms
//! (`api`, `core`, `pod_cache`, `controller`, ...). Read from the code's own paths: every
//! `crate::…` and `super::…` path outside test modules names the file it reaches into, and a
//! loop of such references fails here with the files and the names that tie it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod common;

/// Each source file's module path (`src/core/sync.rs` → `["core", "sync"]`).
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let files = common::files_under(src, "rs");
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            // The crate root and the binary hold no logic another file could loop back through.
            (!(parts == ["lib"] || parts == ["main"])).then_some((parts, f))
        })
        .collect()
}

/// The code of a file without its `#[cfg(test)]` modules and comments.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        // A test module in a file of its own (`mod tests;`): only the declaration to skip, and
        // its file is left out of the graph ([`test_files`]).
        if t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|l| l.trim_start().starts_with("mod ") && l.trim_end().ends_with(';'))
        {
            lines.next();
            continue;
        }
        if t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|l| l.trim_start().starts_with("mod ")) {
            // Skip the module: up to the line closing it at the same indentation.
            let indent = line.len() - t.len();
            for l in lines.by_ref() {
                if l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}') {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" //").next().unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Every path the code names from `crate::` or `super::`, braces of `use` groups expanded, as
/// absolute module paths ending in the last segment named.
fn referenced_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let bytes = flat.as_bytes();
    let mut i = 0;
    while i < flat.len() {
        let rest = &flat[i..];
        let starts_path = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':'));
        if !starts_path {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let (base, mut j) = if rest.starts_with("crate::") {
            (Vec::new(), "crate::".len())
        } else {
            // A file's module path names the module itself (`mod.rs` its folder), so each
            // `super` drops one segment.
            let mut base = module.to_vec();
            let mut j = 0;
            while rest[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
            (base, j)
        };
        let (tail, used) = path_tail(&rest[j..]);
        j += used;
        for t in expand(&tail) {
            let mut p = base.clone();
            p.extend(t);
            out.push(p);
        }
        i += j.max(1);
    }
    out
}

/// The path text after its prefix: segments and `{…}` groups, up to what ends it.
fn path_tail(s: &str) -> (String, usize) {
    let mut depth = 0;
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return (s[..k].to_string(), k),
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => return (s[..k].to_string(), k),
            _ => {}
        }
    }
    (s.to_string(), s.len())
}

/// `a::{b, c::{d, e}}` → `[a b] [a c d] [a c e]`; `self` in a group is the group's own path.
fn expand(s: &str) -> Vec<Vec<String>> {
    let s = s.trim().trim_end_matches("::");
    let Some(open) = s.find('{') else {
        let parts: Vec<String> = s.split("::").map(|p| p.trim().to_string()).filter(|p| !p.is_empty() && p != "self").collect();
        return vec![parts];
    };
    let prefix: Vec<String> = s[..open].split("::").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
    let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|i| {
            let i = i.trim().split(" as ").next().unwrap_or_default();
            expand(i).into_iter().map(|t| prefix.iter().cloned().chain(t).collect::<Vec<_>>()).collect::<Vec<_>>()
        })
        .collect()
}

/// The file a path reaches into: the longest prefix of it that is a module file.
fn target<'a>(path: &[String], files: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a Vec<String>> {
    (1..=path.len()).rev().find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| k))
}

type Graph = BTreeMap<Vec<String>, BTreeMap<Vec<String>, BTreeSet<String>>>;

/// The modules declared `#[cfg(test)] mod name;`: test code in a file of its own.
fn test_files(files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<Vec<String>> {
    let mut tests = BTreeSet::new();
    for (module, file) in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines = text.lines().map(str::trim).peekable();
        while let Some(line) = lines.next() {
            if line.starts_with("#[cfg(test)]")
                && let Some(name) = lines.peek().and_then(|l| l.strip_prefix("mod ")).and_then(|l| l.strip_suffix(';'))
            {
                tests.insert(module.iter().cloned().chain([name.to_string()]).collect());
            }
        }
    }
    tests
}

/// File → file it references → the paths that reference it.
fn file_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = modules(&src);
    let tests = test_files(&files);
    assert!(
        tests.iter().any(|t| t.ends_with(&["reconcile_requests".to_string()])),
        "test modules in files of their own are found: {tests:?}"
    );
    files.retain(|module, _| !tests.contains(module));
    let mut graph = Graph::new();
    for (module, file) in &files {
        let code = production_code(&std::fs::read_to_string(file).unwrap());
        for path in referenced_paths(&code, module) {
            if let Some(to) = target(&path, &files).filter(|to| *to != module && !to.starts_with(module)) {
                graph.entry(module.clone()).or_default().entry(to.clone()).or_default().insert(path.join("::"));
            }
        }
    }
    graph
}

/// One cycle of `graph`, if it has any (depth-first search).
fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(n: &N, g: &BTreeMap<N, BTreeSet<N>>, state: &mut BTreeMap<N, bool>, stack: &mut Vec<N>) -> Option<Vec<N>> {
        match state.get(n) {
            Some(true) => return None,
            Some(false) => {
                let at = stack.iter().position(|s| s == n).unwrap();
                return Some(stack[at..].to_vec());
            }
            None => {}
        }
        state.insert(n.clone(), false);
        stack.push(n.clone());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph.keys().find_map(|n| visit(n, graph, &mut state, &mut Vec::new()))
}

fn describe(cycle: &[Vec<String>], graph: &Graph) -> String {
    let mut out = String::new();
    for (k, from) in cycle.iter().enumerate() {
        let to = &cycle[(k + 1) % cycle.len()];
        let names: Vec<&String> = graph.get(from).and_then(|m| m.get(to)).into_iter().flatten().collect();
        let more = names.len().saturating_sub(4);
        let shown = &names[..names.len().min(4)];
        out.push_str(&format!("\n  {} -> {}: {shown:?}", from.join("::"), to.join("::")));
        if more > 0 {
            out.push_str(&format!(" and {more} more"));
        }
    }
    out
}

#[test]
fn no_file_imports_in_a_loop() {
    let graph = file_graph();
    let edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = graph.iter().map(|(k, v)| (k.clone(), v.keys().cloned().collect())).collect();
    if let Some(cycle) = find_cycle(&edges) {
        panic!("files import each other in a loop:{}", describe(&cycle, &graph));
    }
}

#[test]
fn no_room_imports_in_a_loop() {
    let graph = file_graph();
    let mut rooms: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut ties = Graph::new();
    for (from, tos) in &graph {
        for (to, names) in tos {
            let (a, b) = (from[..1].to_vec(), to[..1].to_vec());
            if a != b {
                rooms.entry(a.clone()).or_default().insert(b.clone());
                ties.entry(a.clone())
                    .or_default()
                    .entry(b)
                    .or_default()
                    .extend(names.iter().map(|n| format!("{} uses {n}", from.join("::"))));
            }
        }
    }
    if let Some(cycle) = find_cycle(&rooms) {
        panic!("top-level modules import each other in a loop:{}", describe(&cycle, &ties));
    }
}

/// The check sees what it must: a group, an alias, `super`, an inline path, and no test module.
#[test]
fn the_reader_finds_every_kind_of_reference() {
    let code = production_code(
        "use crate::core::{env_metadata, pod_read::{self, PodRead}};\nuse super::queue::Queue as Q;\nfn f() { crate::api::keys::X; }\n\
         // crate::metrics::Gone\n#[cfg(test)]\nmod tests {\n    use crate::config::Config;\n}\n",
    );
    let module = vec!["controller".to_string(), "reconcile".to_string()];
    let paths: BTreeSet<String> = referenced_paths(&code, &module).into_iter().map(|p| p.join("::")).collect();
    let want: BTreeSet<String> =
        ["core::env_metadata", "core::pod_read", "core::pod_read::PodRead", "controller::queue::Queue", "api::keys::X"]
            .map(String::from)
            .into();
    assert_eq!(paths, want);
}
