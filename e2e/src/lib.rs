//! End-to-end support for cloneset-operator: a real local control plane ([`cluster`]), its nodes
//! ([`nodes`]: simulated and real, side by side), and helpers for tests against them ([`testenv`]).

pub mod addresses;
pub mod bench;
pub mod chaos;
pub mod chart;
pub mod cluster;
pub mod freezing_proxy;
pub mod host;
pub mod image;
pub mod nodes;
pub mod rbac;
pub mod registry;
pub mod testenv;
pub mod workload;

use k8s_openapi::api::core::v1::Node;

/// Whether a Node reports `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod readme_map {
    /// Every `file::test` the map in e2e/README.md names is a test in `tests/<file>.rs`, and every
    /// `file::*` a file there: a renamed or removed test fails here, not in a reader's search.
    #[test]
    fn the_map_names_only_tests_that_exist() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        let mut named = 0;
        for entry in readme.split('`').skip(1).step_by(2) {
            let Some((file, test)) = entry.split_once("::") else { continue };
            if !file.chars().all(|c| c.is_ascii_lowercase() || c == '_') || file == "file" {
                continue;
            }
            let source = std::fs::read_to_string(dir.join("tests").join(format!("{file}.rs")))
                .unwrap_or_else(|_| panic!("e2e/README.md names tests/{file}.rs, which does not exist"));
            if test != "*" {
                assert!(source.contains(&format!("fn {test}(")), "e2e/README.md names {file}::{test}, which is not a test there");
            }
            named += 1;
        }
        assert!(named > 50, "the map names {named} tests");
    }
}
