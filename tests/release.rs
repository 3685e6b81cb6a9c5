//! One release, one version: Cargo.toml's version is the charts' `version` and `appVersion`, the
//! binary's `--version`, the image tag `make image` builds and the top entry of CHANGELOG.md.

use std::path::Path;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of `key: value` at the start of a line of Chart.yaml, unquoted.
fn chart_field(chart: &str, key: &str) -> String {
    let line = chart.lines().find_map(|l| l.strip_prefix(&format!("{key}:"))).unwrap_or_else(|| panic!("Chart.yaml has no {key}"));
    line.trim().trim_matches('"').to_string()
}

#[test]
fn the_chart_and_the_binary_have_one_version() {
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(cloneset_operator::build_info::VERSION, version);
    for path in ["charts/cloneset-operator/Chart.yaml", "charts/cloneset-operator-migrate/Chart.yaml"] {
        let chart = read(path);
        assert_eq!(chart_field(&chart, "version"), version, "{path}: version");
        assert_eq!(chart_field(&chart, "appVersion"), version, "{path}: appVersion");
    }
    let (major, _) = version.split_once('.').unwrap();
    assert_eq!(major, "0", "0.x until the API is stable (see docs/development.md)");
}

/// CHANGELOG.md opens with `## [Unreleased]`, where changes since the last release collect, then
/// this version's dated section, then the earlier releases, newest first.
#[test]
fn the_changelog_opens_with_this_version() {
    let changelog = read("CHANGELOG.md");
    let sections: Vec<&str> = changelog.lines().filter(|l| l.starts_with("## [")).collect();
    assert_eq!(sections.first(), Some(&"## [Unreleased]"), "CHANGELOG.md's first section");
    let heading = format!("## [{}] - ", env!("CARGO_PKG_VERSION"));
    let first = sections.get(1).expect("a release section");
    assert!(first.starts_with(&heading), "CHANGELOG.md's first release is {first:?}, not {heading}<date>");
    let mut dates = Vec::new();
    for release in &sections[1..] {
        let date = release.rsplit_once("] - ").unwrap_or_else(|| panic!("{release:?}: no date")).1;
        assert!(
            date.len() == 10 && date.split('-').map(|p| p.parse::<u32>().is_ok()).filter(|ok| *ok).count() == 3,
            "{release:?}: a date, YYYY-MM-DD"
        );
        dates.push(date);
    }
    assert!(dates.windows(2).all(|w| w[0] >= w[1]), "releases newest first: {dates:?}");
}

#[test]
fn the_license_file_is_the_one_cargo_names() {
    assert_eq!(env!("CARGO_PKG_LICENSE"), "Apache-2.0");
    let license = read("LICENSE");
    assert!(license.trim_start().starts_with("Apache License\n") && license.contains("Version 2.0, January 2004"));
}
