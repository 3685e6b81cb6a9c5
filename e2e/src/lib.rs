//! End-to-end support for cloneset-operator: a real local control plane ([`cluster`]), its nodes
//! ([`nodes`]: simulated and real, side by side), and helpers for tests against them ([`testenv`]).

pub mod addresses;
pub mod bench;
pub mod chaos;
pub mod chart;
pub mod cluster;
pub mod freezing_proxy;
pub mod helm_release;
pub mod host;
pub mod image;
pub mod image_index;
pub mod nodes;
pub mod rbac;
pub mod real_node;
pub mod registry;
pub mod testenv;
pub mod versions;
pub mod workload;

use k8s_openapi::api::core::v1::Node;

/// Whether a Node reports `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every `.rs` file below `dir`, at any depth, sorted: for the tests that read the test files.
#[cfg(test)]
fn rust_files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod readme_map {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn crate_dir() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// The test binaries `Cargo.toml` declares: name and file.
    fn declared_tests() -> BTreeMap<String, PathBuf> {
        let manifest = std::fs::read_to_string(crate_dir().join("Cargo.toml")).unwrap();
        let mut tests = BTreeMap::new();
        for entry in manifest.split("[[test]]").skip(1) {
            let field = |key: &str| {
                let line =
                    entry.lines().find(|l| l.starts_with(&format!("{key} = "))).unwrap_or_else(|| panic!("a [[test]] without {key}"));
                line.split('"').nth(1).unwrap().to_string()
            };
            tests.insert(field("name"), crate_dir().join(field("path")));
        }
        tests
    }

    /// Cargo finds no test file in a folder by itself: one not declared would never run.
    #[test]
    fn every_test_file_is_a_declared_test_binary() {
        let declared = declared_tests();
        let files = crate::rust_files_under(&crate_dir().join("tests"));
        for file in &files {
            assert!(declared.values().any(|p| p == file), "{} is not a [[test]] in e2e/Cargo.toml: it never runs", file.display());
        }
        for (name, path) in &declared {
            assert!(path.is_file(), "e2e/Cargo.toml declares {name} at {}, which does not exist", path.display());
            assert_eq!(path.file_stem().unwrap().to_str(), Some(name.as_str()), "a test binary is named as its file");
        }
        assert_eq!(files.len(), declared.len());
    }

    /// Every `file::test` the map in e2e/README.md names is a test in that test file, and every
    /// `file::*` a file there; every test file is in the README's table of folders. A renamed or
    /// removed test fails here, not in a reader's search.
    #[test]
    fn the_map_names_only_tests_that_exist() {
        let readme = std::fs::read_to_string(crate_dir().join("README.md")).unwrap();
        let declared = declared_tests();
        let quoted: Vec<&str> = readme.split('`').skip(1).step_by(2).collect();
        let mut named = 0;
        for entry in &quoted {
            let Some((file, test)) = entry.split_once("::") else { continue };
            if !file.chars().all(|c| c.is_ascii_lowercase() || c == '_') || file == "file" {
                continue;
            }
            let path = declared.get(file).unwrap_or_else(|| panic!("e2e/README.md names {file}, which is no test file"));
            let source = std::fs::read_to_string(path).unwrap();
            if test != "*" {
                assert!(source.contains(&format!("fn {test}(")), "e2e/README.md names {file}::{test}, which is not a test there");
            }
            named += 1;
        }
        assert!(named > 50, "the map names {named} tests");
        for name in declared.keys() {
            assert!(quoted.contains(&name.as_str()), "e2e/README.md's table of folders does not list {name}");
        }
    }
}
