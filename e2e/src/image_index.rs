//! A multi-platform image from one image per platform: the archives [`crate::image`] writes (one
//! per architecture, each built on its own machine) merged into one OCI image-layout archive whose
//! tag names an image index over them, which `skopeo copy --all` pushes as one reference and a
//! node pulls its own platform from. The same archives give the same bytes.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::image::{digest, layout_tar};

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The files of a tar, by path.
fn files(tar_bytes: &[u8]) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for entry in tar::Archive::new(tar_bytes).entries()? {
        let mut entry = entry?;
        if entry.header().entry_type().is_file() {
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data)?;
            out.insert(entry.path()?.display().to_string(), data);
        }
    }
    Ok(out)
}

/// One archive holding the images of `archives` (one image each, of distinct platforms) under an
/// image index tagged as `name` is (and named `name` for containerd), entries stamped `mtime`.
pub fn merge(archives: &[Vec<u8>], name: &str, mtime: u64) -> anyhow::Result<Vec<u8>> {
    let tag = crate::image::tag_of(name);
    let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut manifests: BTreeMap<(String, String), Value> = BTreeMap::new();
    for (n, bytes) in archives.iter().enumerate() {
        let files = files(bytes).with_context(|| format!("reading image archive {n}"))?;
        for (path, data) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/") {
                if digest(data) != format!("sha256:{hex}") {
                    bail!("image archive {n}: {path} does not hold what its name says");
                }
                blobs.insert(format!("sha256:{hex}"), data.clone());
            }
        }
        let index: Value = serde_json::from_slice(files.get("index.json").context("no index.json")?)?;
        let [entry] = index["manifests"].as_array().map(Vec::as_slice).unwrap_or_default() else {
            bail!("image archive {n} holds {} images, not one", index["manifests"].as_array().map_or(0, Vec::len));
        };
        let blob = |d: &Value| blobs.get(d.as_str().unwrap_or_default()).with_context(|| format!("image archive {n}: no blob {d}"));
        let manifest: Value = serde_json::from_slice(blob(&entry["digest"])?)?;
        let config: Value = serde_json::from_slice(blob(&manifest["config"]["digest"])?)?;
        let platform =
            (config["os"].as_str().unwrap_or_default().to_string(), config["architecture"].as_str().unwrap_or_default().to_string());
        let descriptor = json!({
            "mediaType": MANIFEST,
            "digest": entry["digest"],
            "size": entry["size"],
            "platform": {"os": platform.0, "architecture": platform.1},
        });
        if manifests.insert(platform.clone(), descriptor).is_some() {
            bail!("two images for {}/{}", platform.0, platform.1);
        }
    }
    let index =
        serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests.into_values().collect::<Vec<_>>()}))?;
    let layout = json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": INDEX,
            "digest": digest(&index),
            "size": index.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": name},
        }],
    });
    blobs.insert(digest(&index), index);
    Ok(layout_tar(&layout, blobs, mtime))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{BinaryVersion, archive, build_for, operator_image};

    fn image(architecture: &str) -> Vec<u8> {
        let version = BinaryVersion { version: "0.1.0".into(), revision: "1a2b3c4d5e6f".into() };
        let spec = operator_image("docker.io/library/cloneset-operator:0.1.0", format!("binary for {architecture}").into_bytes(), &version);
        archive(&build_for(&spec, architecture), 0)
    }

    #[test]
    fn the_index_names_each_platforms_image_and_every_blob_is_kept() {
        let (amd64, arm64) = (image("amd64"), image("arm64"));
        let merged = merge(&[arm64.clone(), amd64.clone()], "docker.io/library/cloneset-operator:0.1.0", 0).unwrap();
        assert_eq!(merged, merge(&[amd64.clone(), arm64.clone()], "docker.io/library/cloneset-operator:0.1.0", 0).unwrap());
        let files = files(&merged).unwrap();
        let layout: Value = serde_json::from_slice(&files["index.json"]).unwrap();
        assert_eq!(layout["manifests"][0]["mediaType"], INDEX);
        assert_eq!(layout["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "0.1.0");
        let hex = layout["manifests"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:");
        let index: Value = serde_json::from_slice(&files[&format!("blobs/sha256/{hex}")]).unwrap();
        let platforms: Vec<&str> =
            index["manifests"].as_array().unwrap().iter().map(|m| m["platform"]["architecture"].as_str().unwrap()).collect();
        assert_eq!(platforms, ["amd64", "arm64"]);
        for single in [&amd64, &arm64] {
            let own: Value = serde_json::from_slice(&super::files(single).unwrap()["index.json"]).unwrap();
            assert!(index["manifests"].as_array().unwrap().iter().any(|m| m["digest"] == own["manifests"][0]["digest"]));
            for path in super::files(single).unwrap().keys().filter(|p| p.starts_with("blobs/")) {
                assert!(files.contains_key(path), "{path} is kept");
            }
        }
    }

    #[test]
    fn two_images_of_one_platform_are_refused() {
        let err = merge(&[image("amd64"), image("amd64")], "x:0.1.0", 0).unwrap_err();
        assert!(format!("{err:#}").contains("two images for linux/amd64"), "{err:#}");
    }
}
