//! Generated files are checked, never trusted: the committed CRD, its chart copy and the
//! admission policy must equal what the types generate now.

use std::path::Path;

use cloneset_operator::api::crd::{
    CRD_FILES, CRD_V1BETA1_FILE, DELETION_PROTECTION_FILE, POLICY_FILES, generated_crd_file, generated_crd_with_v1beta1_file,
    generated_deletion_protection_file, generated_policy_file,
};

fn check(path: &str, expected: &str) {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let actual = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}; run `make crds`"));
    assert!(actual == expected, "{path} is out of date with src/api; run `make crds` and commit the result");
}

#[test]
fn crd_files_match_the_types() {
    let expected = generated_crd_file().unwrap();
    for path in CRD_FILES {
        check(path, &expected);
    }
}

#[test]
fn the_two_version_crd_file_matches_the_types() {
    check(CRD_V1BETA1_FILE, &generated_crd_with_v1beta1_file().unwrap());
}

#[test]
fn admission_policy_file_matches_the_rules() {
    let expected = generated_policy_file().unwrap();
    for path in POLICY_FILES {
        check(path, &expected);
    }
}

#[test]
fn deletion_protection_policy_file_matches_the_rules() {
    check(DELETION_PROTECTION_FILE, &generated_deletion_protection_file().unwrap());
}
