//! What this binary is: its version (Cargo.toml's; the chart's `version` and `appVersion` and the
//! image tag follow it) and the source revision it was built from, for `--version`, the
//! `cloneset_operator_build_info` metric and the image's labels.

/// The release, `0.MINOR.PATCH` (see the versioning policy in `docs/development.md`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit it was built from (`git describe --always --dirty`, which the Makefile passes in
/// `CLONESET_OPERATOR_REVISION`), or `unknown` for a build outside `make`.
pub(crate) const REVISION: &str = match option_env!("CLONESET_OPERATOR_REVISION") {
    Some(r) if !r.is_empty() => r,
    _ => "unknown",
};

/// `--version`'s line after the program's name: `0.2.0 (revision 1a2b3c4d5e6f)`.
pub fn version_line() -> &'static str {
    static LINE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("{VERSION} (revision {REVISION})"));
    LINE.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_the_release_and_the_revision() {
        assert_eq!(version_line(), format!("{} (revision {REVISION})", env!("CARGO_PKG_VERSION")));
        assert!(!REVISION.is_empty());
    }
}
