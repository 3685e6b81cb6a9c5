//! What the workspace's own test files share; each is a crate of its own and takes this in
//! with `mod common;`.

use std::path::{Path, PathBuf};

/// Every file below `dir` (at any depth) whose name ends in `.{extension}`, sorted.
pub fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
