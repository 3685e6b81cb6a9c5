//! Every relative link in the user-facing pages (README, CHANGELOG, docs/, the charts' READMEs,
//! the bench history) names a file that exists and, for a Markdown page, a heading it has, as
//! GitHub renders heading anchors: a moved page or a renamed heading fails here, not for a reader.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod common;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "e2e/bench/HISTORY.md", "e2e/README.md"]
        .iter()
        .map(|p| root().join(p))
        .filter(|p| p.exists())
        .collect();
    out.extend(common::files_under(&root().join("docs"), "md"));
    for chart in std::fs::read_dir(root().join("charts")).unwrap() {
        let readme = chart.unwrap().path().join("README.md");
        if readme.exists() {
            out.push(readme);
        }
    }
    out
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces as hyphens,
/// a repeated heading numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')).filter(|h| h.starts_with(' ')) else { continue };
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        out.insert(candidate);
    }
    out
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ']).unwrap_or(rest.len());
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 10, "found only {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').map_or((link.as_str(), None), |(p, a)| (p, Some(a)));
            let target = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            let is_page = target.extension().is_some_and(|e| e == "md");
            if let Some(anchor) = anchor.filter(|a| is_page && !anchors(&std::fs::read_to_string(&target).unwrap()).contains(*a)) {
                broken.push(format!("{}: {link} (no heading {anchor})", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    let page = "# Title\n## `kubectl kruise`\n## Install, upgrade and uninstall with Helm\n## Title\n```\n# not a heading\n```\n";
    let want: BTreeSet<String> = ["title", "kubectl-kruise", "install-upgrade-and-uninstall-with-helm", "title-1"].map(String::from).into();
    assert_eq!(anchors(page), want);
    assert_eq!(links("see [a](docs/a.md#b) and [c](https://x) `[d](e)`"), ["docs/a.md#b", "https://x", "e"]);
}
