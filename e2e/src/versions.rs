//! The Kubernetes releases the project supports and the test bed builds (`e2e/kubernetes-versions`,
//! which the build scripts read too), and which one a run is under.

use anyhow::bail;

/// The file every part of the project reads the supported releases from.
pub const FILE: &str = include_str!("../kubernetes-versions");

/// One supported Kubernetes minor and what the test bed runs for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// `(1, 32)`.
    pub minor: (u32, u32),
    /// The patch release built for it, `v1.32.13`.
    pub kubernetes: String,
    /// The etcd release it runs with.
    pub etcd: String,
}

/// The supported releases, oldest first.
pub fn supported() -> Vec<Release> {
    parse(FILE).expect("e2e/kubernetes-versions is well-formed (checked by a unit test)")
}

fn parse(text: &str) -> anyhow::Result<Vec<Release>> {
    let mut out: Vec<Release> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [minor, kubernetes, etcd] = fields[..] else { bail!("expected `minor kubernetes etcd`: {line:?}") };
        let Some(minor) = minor_of(minor) else { bail!("not a minor version: {line:?}") };
        if minor_of(kubernetes) != Some(minor) {
            bail!("{kubernetes} is not a release of {}.{}", minor.0, minor.1);
        }
        if out.last().is_some_and(|prev| prev.minor >= minor) {
            bail!("releases must be listed oldest first, once each: {line:?}");
        }
        out.push(Release { minor, kubernetes: kubernetes.into(), etcd: etcd.into() });
    }
    if out.is_empty() {
        bail!("no release listed");
    }
    Ok(out)
}

/// `(major, minor)` of `1.32`, `v1.32` or `v1.32.13` (and `v1.32.13-rc.0`).
pub fn minor_of(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.strip_prefix('v').unwrap_or(version).split(['.', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The oldest supported release.
pub fn oldest() -> Release {
    supported().remove(0)
}

/// The newest supported release, the test bed's default.
pub fn newest() -> Release {
    supported().pop().expect("at least one release")
}

/// The release to build for `asked`: the newest when empty, the pinned patch of a listed minor
/// (`1.33`, `v1.33`), else `asked` itself (a full version, built as given).
pub fn resolve(asked: &str) -> String {
    let asked = asked.trim();
    if asked.is_empty() {
        return newest().kubernetes;
    }
    let is_minor = asked.strip_prefix('v').unwrap_or(asked).split('.').count() == 2;
    match supported().into_iter().find(|r| is_minor && Some(r.minor) == minor_of(asked)) {
        Some(r) => r.kubernetes,
        None => asked.to_string(),
    }
}

/// The etcd release for Kubernetes `version`: its minor's, or the newest supported release's.
pub fn etcd_for(version: &str) -> String {
    let minor = minor_of(version);
    supported().into_iter().find(|r| Some(r.minor) == minor).unwrap_or_else(newest).etcd
}

/// The Kubernetes release this run is under: `K8S_VERSION` resolved, the newest supported when unset.
pub fn under_test() -> String {
    resolve(&std::env::var("K8S_VERSION").unwrap_or_default())
}

/// The minors an e2e test holds on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Minors {
    /// This one and every newer one.
    From((u32, u32)),
    /// This one and every older one.
    Through((u32, u32)),
    /// This one only.
    Only((u32, u32)),
    /// Every one but this.
    Except((u32, u32)),
}

impl Minors {
    pub fn includes(self, minor: (u32, u32)) -> bool {
        match self {
            Minors::From(m) => minor >= m,
            Minors::Through(m) => minor <= m,
            Minors::Only(m) => minor == m,
            Minors::Except(m) => minor != m,
        }
    }
}

impl std::fmt::Display for Minors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Minors::From((a, b)) => write!(f, "Kubernetes {a}.{b} and newer"),
            Minors::Through((a, b)) => write!(f, "Kubernetes {a}.{b} and older"),
            Minors::Only((a, b)) => write!(f, "Kubernetes {a}.{b} only"),
            Minors::Except((a, b)) => write!(f, "every Kubernetes minor but {a}.{b}"),
        }
    }
}

/// An e2e test whose expectation holds on some supported releases only: the e2e stage skips it
/// on the others and prints why (`local-cluster version-skips`).
#[derive(Clone, Copy, Debug)]
pub struct VersionDependent {
    /// The test function's name (unique across e2e/tests).
    pub test: &'static str,
    pub runs_on: Minors,
    /// What it depends on, in the apiserver's terms.
    pub because: &'static str,
}

const RESIZE_SERVED: &str =
    "pods/resize is served only while the apiserver's InPlacePodVerticalScaling gate is on (off by default before 1.33)";
const NO_MEMORY_DECREASE: &str =
    "Kubernetes 1.33 alone refuses to lower a memory limit in place unless the container's memory resizePolicy is RestartContainer";
const MUTATING_POLICY: &str =
    "the test injects a fault with a MutatingAdmissionPolicy, served as admissionregistration.k8s.io/v1 from 1.36";
const STREAMING: &str = "streaming lists (the WatchList gate) are on by default in 1.32 and from 1.34, off in 1.33";
/// Where the apiserver serves streaming lists by default ([`STREAMING`]).
pub const STREAMING_LISTS_SERVED: Minors = Minors::Except((1, 33));

/// Whether the apiserver of `version` serves streaming lists by default.
pub fn serves_streaming_lists(version: &str) -> bool {
    minor_of(version).is_some_and(|m| STREAMING_LISTS_SERVED.includes(m))
}

/// Every e2e test that depends on the release under test.
pub const VERSION_DEPENDENT: &[VersionDependent] = &[
    VersionDependent { test: "vertical_scaling_gate_resizes_pods_in_place", runs_on: Minors::From((1, 33)), because: RESIZE_SERVED },
    VersionDependent {
        test: "a_resize_is_applied_without_restarting_the_container",
        runs_on: Minors::From((1, 33)),
        because: RESIZE_SERVED,
    },
    VersionDependent {
        test: "the_vertical_scaling_gate_resizes_the_real_container",
        runs_on: Minors::From((1, 33)),
        because: RESIZE_SERVED,
    },
    VersionDependent {
        test: "the_chart_runs_the_operators_own_image_on_a_real_node",
        runs_on: Minors::From((1, 33)),
        because: RESIZE_SERVED,
    },
    VersionDependent {
        test: "where_pods_resize_is_not_served_a_resources_change_recreates_or_holds",
        runs_on: Minors::Through((1, 32)),
        because: RESIZE_SERVED,
    },
    VersionDependent {
        test: "where_a_memory_limit_cannot_be_lowered_in_place_the_change_recreates_or_holds",
        runs_on: Minors::Only((1, 33)),
        because: NO_MEMORY_DECREASE,
    },
    VersionDependent {
        test: "a_memory_limit_is_lowered_in_place_where_the_cluster_allows_it",
        runs_on: Minors::From((1, 34)),
        because: NO_MEMORY_DECREASE,
    },
    VersionDependent {
        test: "caches_fill_from_a_streaming_list_and_from_pages_and_find_every_pod",
        runs_on: STREAMING_LISTS_SERVED,
        because: STREAMING,
    },
    VersionDependent {
        test: "leaked_scale_expectations_are_counted_per_cloneset",
        runs_on: Minors::From((1, 36)),
        because: MUTATING_POLICY,
    },
];

/// The tests not run on `version`, each with the reason to print.
pub fn skipped_on(version: &str) -> Vec<(&'static str, String)> {
    let Some(minor) = minor_of(version) else { return Vec::new() };
    VERSION_DEPENDENT
        .iter()
        .filter(|t| !t.runs_on.includes(minor))
        .map(|t| (t.test, format!("runs on {}: {}", t.runs_on, t.because)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_lists_each_minor_once_oldest_first_with_its_own_patch() {
        let all = parse(FILE).unwrap();
        assert!(all.len() >= 2, "an oldest and a newest");
        assert!(all.windows(2).all(|w| w[1].minor == (w[0].minor.0, w[0].minor.1 + 1)), "no minor skipped between oldest and newest");
    }

    #[test]
    fn a_minor_resolves_to_its_pinned_patch_and_a_full_version_to_itself() {
        let oldest = oldest();
        let minor = format!("{}.{}", oldest.minor.0, oldest.minor.1);
        assert_eq!(resolve(&minor), oldest.kubernetes);
        assert_eq!(resolve(&format!("v{minor}")), oldest.kubernetes);
        assert_eq!(resolve(""), newest().kubernetes);
        assert_eq!(resolve("v1.30.4"), "v1.30.4");
        assert_eq!(etcd_for(&oldest.kubernetes), oldest.etcd);
        assert_eq!(etcd_for("v1.99.0"), newest().etcd);
    }

    #[test]
    fn malformed_lines_are_refused() {
        assert!(parse("1.32 v1.33.1 v3.5.1\n").is_err(), "patch of another minor");
        assert!(parse("1.33 v1.33.1 v3.5.1\n1.32 v1.32.1 v3.5.1\n").is_err(), "newest first");
        assert!(parse("1.32 v1.32.1\n").is_err(), "no etcd");
        assert!(parse("# only a comment\n").is_err());
        assert_eq!(minor_of("v1.32.13"), Some((1, 32)));
        assert_eq!(minor_of("1.37"), Some((1, 37)));
        assert_eq!(minor_of("v1.36.0-rc.1"), Some((1, 36)));
    }

    /// Each version-dependent test exists under e2e/tests (by its function name), once, and runs
    /// on some supported release.
    #[test]
    fn every_version_dependent_test_exists_and_runs_somewhere() {
        let sources: String = crate::rust_files_under(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"))
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        for t in VERSION_DEPENDENT {
            assert_eq!(sources.matches(&format!("fn {}(", t.test)).count(), 1, "{}", t.test);
            assert!(supported().iter().any(|r| t.runs_on.includes(r.minor)), "{} runs nowhere", t.test);
        }
        let on_32 = skipped_on("v1.32.13");
        assert!(on_32.iter().any(|(t, why)| *t == "vertical_scaling_gate_resizes_pods_in_place" && why.contains("1.33 and newer")));
        assert!(skipped_on("v1.33.1").iter().all(|(t, _)| *t != "vertical_scaling_gate_resizes_pods_in_place"));
    }

    /// The charts' kubeVersion, the README and docs/compatibility.md state the supported range
    /// this file lists.
    #[test]
    fn the_charts_and_docs_state_the_supported_range() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (old, new) = (oldest().minor, newest().minor);
        for chart in ["cloneset-operator", "cloneset-operator-migrate"] {
            let text = std::fs::read_to_string(root.join("charts").join(chart).join("Chart.yaml")).unwrap();
            assert!(text.contains(&format!("kubeVersion: \">={}.{}.0-0\"", old.0, old.1)), "{chart}'s kubeVersion");
        }
        let range = format!("{}.{} to {}.{}", old.0, old.1, new.0, new.1);
        for doc in ["README.md", "docs/compatibility.md", "docs/install.md", "charts/cloneset-operator/README.md"] {
            assert!(std::fs::read_to_string(root.join(doc)).unwrap().contains(&range), "{doc} says Kubernetes {range}");
        }
    }
}
