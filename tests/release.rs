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

/// `e2e/previous-release` names the release the upgrade test starts from: the newest one before
/// this checkout (the top dated section of CHANGELOG.md while Unreleased lists changes, the one
/// below it when this commit is itself the release), at the commit that cut it, whose Cargo.toml
/// carries that version and whose CHANGELOG opens with it.
#[test]
fn the_upgrade_is_tested_from_the_newest_earlier_release() {
    let row = read("e2e/previous-release");
    let row = row.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty()).expect("e2e/previous-release names a release");
    let [version, commit] = row.split_whitespace().collect::<Vec<_>>()[..] else { panic!("{row:?}: not `<version> <commit>`") };
    let changelog = read("CHANGELOG.md");
    let unreleased = changelog.split("\n## [").nth(1).expect("an Unreleased section");
    let pending = unreleased.lines().skip(1).any(|l| l.starts_with("- "));
    let released: Vec<&str> =
        changelog.lines().filter_map(|l| l.strip_prefix("## [")).filter_map(|l| l.split_once("] - ")).map(|(v, _)| v).collect();
    let expected = if pending { released[0] } else { released[1] };
    assert_eq!(version, expected, "the newest release before this checkout (pending changes: {pending})");

    let show = |path: &str| {
        let out = std::process::Command::new("git")
            .args(["show", &format!("{commit}:{path}")])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git show {commit}:{path}: {} (a shallow clone lacks it)", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let cargo = show("Cargo.toml");
    assert!(cargo.lines().any(|l| l == format!("version = \"{version}\"")), "{commit}'s Cargo.toml is not version {version}");
    let then = show("CHANGELOG.md");
    let top = then.lines().find(|l| l.starts_with("## [")).unwrap_or_default();
    assert!(top.starts_with(&format!("## [{version}] - ")), "{commit} is not where {version} was cut: its CHANGELOG opens with {top:?}");
}
