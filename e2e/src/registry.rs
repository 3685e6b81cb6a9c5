//! The local registry real nodes pull from: Debian's `docker-registry` (distribution 2.8) on
//! 127.0.0.1 only, its storage in the control plane's directory. containerd resolves
//! `docker.io`, `registry.k8s.io` and every other registry to it and to nothing else
//! ([`crate::nodes::real`]), so an image reference keeps its meaning without the network:
//! `docker.io/library/nginx:1.27` is served as `library/nginx:1.27`, `registry.k8s.io/pause:3.10`
//! as `pause:3.10`. Images get in with `skopeo copy` from OCI archives ([`crate::oci`]).

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;

use crate::host::run;

/// The registry's configuration: loopback only, no authentication, deletes allowed.
pub fn config(storage: &Path, port: u16) -> String {
    format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: local-registry\n",
        storage.display()
    )
}

/// The repository and tag an image reference is served as (the registry host dropped, and
/// Docker Hub's implied `library/` and `:latest` spelled out).
pub fn repository_path(reference: &str) -> String {
    let (name, tag) = match reference.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
        Some((n, t)) => (n, t),
        None => (reference, "latest"),
    };
    let mut parts: Vec<&str> = name.split('/').collect();
    let first_is_host = parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost");
    let host = if first_is_host { parts.remove(0) } else { "docker.io" };
    if host == "docker.io" && parts.len() == 1 {
        parts.insert(0, "library");
    }
    format!("{}:{tag}", parts.join("/"))
}

/// Copies the one image of an OCI archive into the registry as `reference`; returns the
/// manifest digest the registry serves it under (what a kubelet reports as the imageID).
pub fn push(archive: &Path, registry: SocketAddr, reference: &str) -> anyhow::Result<String> {
    let dest = format!("docker://{registry}/{}", repository_path(reference));
    let src = format!("oci-archive:{}", archive.display());
    run("skopeo", &["copy", "--quiet", "--dest-tls-verify=false", &src, &dest]).with_context(|| format!("pushing {reference}"))?;
    let digest = run("skopeo", &["inspect", "--tls-verify=false", "--format", "{{.Digest}}", &dest])?;
    Ok(digest.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_keep_their_repository_without_the_registry_host() {
        assert_eq!(repository_path("nginx:1.27"), "library/nginx:1.27");
        assert_eq!(repository_path("docker.io/library/nginx:1.28"), "library/nginx:1.28");
        assert_eq!(repository_path("registry.k8s.io/pause:3.10"), "pause:3.10");
        assert_eq!(repository_path("cloneset-operator"), "library/cloneset-operator:latest");
        assert_eq!(repository_path("ghcr.io/org/app:v1"), "org/app:v1");
        assert_eq!(repository_path("localhost:5000/app:v2"), "app:v2");
        assert_eq!(repository_path("myorg/app"), "myorg/app:latest");
    }
}
