//! Container images built here without Docker: layers as deterministic tar files, an OCI image
//! config and manifest, written as an OCI image-layout archive (`oci-layout`, `index.json`,
//! `blobs/sha256/...` in one tar) that `skopeo copy oci-archive:...`, `ctr images import` and
//! `docker load` accept. The same inputs give the same bytes: entries sorted, every time stamp
//! 0 (or `SOURCE_DATE_EPOCH`), owners numeric, no creation time in the config.
//!
//! Two uses: the operator's image ([`operator_image`]: the static binary as non-root 65532, no
//! shell), and the test images real nodes pull ([`test_images`]: stand-ins for `nginx:1.27`,
//! `nginx:1.28`, `nginx:alpine` (also tagged `mainline-alpine`), Kubernetes' e2e-test-images
//! nginx, httpd, redis and busybox, an image that exits, one that starts slowly, and the pause image,
//! from Debian's static busybox and a pause program of our own).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// One file-system entry of a layer.
#[derive(Clone, Debug)]
pub enum Entry {
    Dir { path: String, mode: u32 },
    File { path: String, mode: u32, data: Vec<u8> },
    Symlink { path: String, target: String },
}

impl Entry {
    fn path(&self) -> &str {
        match self {
            Entry::Dir { path, .. } | Entry::File { path, .. } | Entry::Symlink { path, .. } => path,
        }
    }
}

/// A layer's bytes: an uncompressed tar of `entries`, sorted by path, owned by root, time 0.
pub fn layer_tar(entries: &[Entry], mtime: u64) -> Vec<u8> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path().cmp(b.path()));
    let mut builder = tar::Builder::new(Vec::new());
    for entry in sorted {
        let mut header = tar::Header::new_ustar();
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        let path = entry.path().trim_start_matches('/');
        let result = match entry {
            Entry::Dir { mode, .. } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_size(0);
                builder.append_data(&mut header, format!("{path}/"), std::io::empty())
            }
            Entry::File { mode, data, .. } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_size(data.len() as u64);
                builder.append_data(&mut header, path, data.as_slice())
            }
            Entry::Symlink { target, .. } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, path, target)
            }
        };
        result.expect("writing a tar into memory cannot fail");
    }
    builder.into_inner().expect("writing a tar into memory cannot fail")
}

/// `sha256:<hex>` of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// What runs, and as whom.
#[derive(Clone, Debug, Default)]
pub struct RunConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub exposed_ports: Vec<String>,
    /// The image's labels (`org.opencontainers.image.*`), also its manifest's annotations.
    pub labels: BTreeMap<String, String>,
}

/// An image to build: its full reference (`docker.io/library/nginx:1.27`) and layers, bottom first.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    pub reference: String,
    pub config: RunConfig,
    pub layers: Vec<Vec<u8>>,
}

/// An image's blobs, ready to be written.
#[derive(Clone, Debug)]
pub struct BuiltImage {
    pub reference: String,
    pub manifest: Vec<u8>,
    pub config: Vec<u8>,
    pub layers: Vec<Vec<u8>>,
}

impl BuiltImage {
    pub fn manifest_digest(&self) -> String {
        digest(&self.manifest)
    }

    /// The tag, the part of the reference after the last `:` that follows the last `/`.
    pub fn tag(&self) -> &str {
        tag_of(&self.reference)
    }
}

/// A reference's tag (`latest` when it names none).
pub fn tag_of(reference: &str) -> &str {
    reference.rsplit_once(':').filter(|(_, t)| !t.contains('/')).map_or("latest", |(_, t)| t)
}

/// The OCI architecture name of the machine this runs on.
pub fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds the config and manifest of an image for this machine's architecture.
pub fn build(spec: &ImageSpec) -> BuiltImage {
    build_for(spec, host_architecture())
}

/// Builds the config and manifest of an image for `architecture` (OCI's name for it).
pub fn build_for(spec: &ImageSpec, architecture: &str) -> BuiltImage {
    let mut config = serde_json::Map::new();
    let run = &spec.config;
    let strings = |v: &[String]| Value::from(v.to_vec());
    if !run.entrypoint.is_empty() {
        config.insert("Entrypoint".into(), strings(&run.entrypoint));
    }
    if !run.cmd.is_empty() {
        config.insert("Cmd".into(), strings(&run.cmd));
    }
    if !run.env.is_empty() {
        config.insert("Env".into(), strings(&run.env));
    }
    if let Some(user) = &run.user {
        config.insert("User".into(), user.clone().into());
    }
    if !run.exposed_ports.is_empty() {
        config.insert("ExposedPorts".into(), run.exposed_ports.iter().map(|p| (p.clone(), json!({}))).collect());
    }
    if !run.labels.is_empty() {
        config.insert("Labels".into(), json!(run.labels));
    }
    config.insert("WorkingDir".into(), "/".into());
    let image_config = json!({
        "architecture": architecture,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": spec.layers.iter().map(|l| digest(l)).collect::<Vec<_>>()},
    });
    let config_bytes = serde_json::to_vec(&image_config).expect("JSON");
    let mut manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(&config_bytes), "size": config_bytes.len()},
        "layers": spec.layers.iter().map(|l| json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(l), "size": l.len(),
        })).collect::<Vec<_>>(),
    });
    if !run.labels.is_empty() {
        manifest["annotations"] = json!(run.labels);
    }
    BuiltImage {
        reference: spec.reference.clone(),
        manifest: serde_json::to_vec(&manifest).expect("JSON"),
        config: config_bytes,
        layers: spec.layers.clone(),
    }
}

/// The OCI image-layout archive of one image, named by its tag and its full reference.
pub fn archive(image: &BuiltImage, mtime: u64) -> Vec<u8> {
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": image.manifest_digest(),
            "size": image.manifest.len(),
            "annotations": {
                "org.opencontainers.image.ref.name": image.tag(),
                "io.containerd.image.name": image.reference,
            },
        }],
    });
    let blobs = [&image.manifest, &image.config].into_iter().chain(&image.layers).map(|b| (digest(b), b.clone())).collect();
    layout_tar(&index, blobs, mtime)
}

/// An OCI image-layout archive: `oci-layout`, the top `index` and the `blobs` by digest.
pub fn layout_tar(index: &Value, blobs: BTreeMap<String, Vec<u8>>, mtime: u64) -> Vec<u8> {
    let mut entries = vec![
        Entry::File { path: "oci-layout".into(), mode: 0o644, data: br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec() },
        Entry::File { path: "index.json".into(), mode: 0o644, data: serde_json::to_vec(index).expect("JSON") },
        Entry::Dir { path: "blobs".into(), mode: 0o755 },
        Entry::Dir { path: "blobs/sha256".into(), mode: 0o755 },
    ];
    for (d, data) in blobs {
        entries.push(Entry::File { path: format!("blobs/sha256/{}", &d["sha256:".len()..]), mode: 0o644, data });
    }
    layer_tar(&entries, mtime)
}

/// The time stamp every entry gets: `SOURCE_DATE_EPOCH` when set (reproducible builds'
/// convention), else 0.
pub fn mtime_from_env() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Writes an image's archive to `path` (atomically); returns its manifest digest.
pub fn write_archive(path: &Path, image: &BuiltImage) -> anyhow::Result<String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, archive(image, mtime_from_env())).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)?;
    Ok(image.manifest_digest())
}

// ---------------------------------------------------------------------------------------------
// The operator's image

/// `/etc/passwd` and `/etc/group` with root and distroless's `nonroot` (65532).
fn accounts() -> Vec<Entry> {
    vec![
        Entry::Dir { path: "etc".into(), mode: 0o755 },
        Entry::File {
            path: "etc/passwd".into(),
            mode: 0o644,
            data: b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n".to_vec(),
        },
        Entry::File { path: "etc/group".into(), mode: 0o644, data: b"root:x:0:\nnonroot:x:65532:\n".to_vec() },
        Entry::Dir { path: "home".into(), mode: 0o755 },
        Entry::Dir { path: "home/nonroot".into(), mode: 0o700 },
        Entry::Dir { path: "tmp".into(), mode: 0o1777 },
    ]
}

/// The operator's image: one layer with the static binary at `/cloneset-operator` and the
/// accounts, run as 65532:65532, no shell.
pub fn operator_image(reference: &str, binary: Vec<u8>, build: &BinaryVersion) -> ImageSpec {
    let mut entries = accounts();
    entries.push(Entry::File { path: "cloneset-operator".into(), mode: 0o755, data: binary });
    let labels = [
        ("org.opencontainers.image.title", "cloneset-operator"),
        ("org.opencontainers.image.description", "An OpenKruise-compatible CloneSet operator"),
        // The workspace's Cargo.toml says both, for the crates and the image alike.
        ("org.opencontainers.image.licenses", env!("CARGO_PKG_LICENSE")),
        ("org.opencontainers.image.source", env!("CARGO_PKG_REPOSITORY")),
        ("org.opencontainers.image.version", build.version.as_str()),
        ("org.opencontainers.image.revision", build.revision.as_str()),
    ];
    ImageSpec {
        reference: reference.into(),
        config: RunConfig {
            entrypoint: vec!["/cloneset-operator".into()],
            env: vec!["PATH=/".into()],
            user: Some("65532:65532".into()),
            labels: labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        },
        layers: vec![layer_tar(&entries, mtime_from_env())],
    }
}

/// What an operator binary says of itself (`--version`): its release and source revision, for
/// its image's labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryVersion {
    pub version: String,
    pub revision: String,
}

impl BinaryVersion {
    /// Runs `binary --version` (`cloneset-operator 0.2.0 (revision 1a2b3c)`).
    pub fn of(binary: &Path) -> anyhow::Result<Self> {
        let out = std::process::Command::new(binary)
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", binary.display()))?;
        let line = String::from_utf8_lossy(&out.stdout);
        Self::parse(line.trim()).with_context(|| format!("{} --version printed {line:?}", binary.display()))
    }

    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("cloneset-operator ")?;
        let (version, revision) = rest.split_once(" (revision ")?;
        Some(Self { version: version.to_string(), revision: revision.strip_suffix(')')?.to_string() })
    }
}

/// Fails unless `binary` is a statically linked ELF executable (no program interpreter), since
/// the image has no libc to load it with.
pub fn check_static(binary: &[u8]) -> anyhow::Result<()> {
    if binary.len() < 64 || &binary[..4] != b"\x7fELF" || binary[4] != 2 {
        bail!("not a 64-bit ELF executable");
    }
    let u16_at = |o: usize| u16::from_le_bytes([binary[o], binary[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(binary[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        if at + 4 > binary.len() {
            bail!("truncated ELF program headers");
        }
        // PT_INTERP = 3: a dynamic loader is asked for.
        if u32::from_le_bytes(binary[at..at + 4].try_into().expect("4 bytes")) == 3 {
            bail!("dynamically linked: it needs a loader and a libc the image does not have (build with crt-static)");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Test images

/// The busybox applets the test images' scripts use. (Not wget: Debian's static busybox crashes
/// in it without glibc's NSS libraries, which an image this small does not have.)
const APPLETS: &[&str] = &["sh", "sleep", "httpd", "cat", "echo", "nc", "ip", "true", "false", "kill", "ls", "ps", "env"];

/// Serves a page on `PORT` (80) until SIGTERM (then exits 0, as nginx does), after an optional
/// `START_DELAY` in seconds.
const SERVE_SCRIPT: &str = r#"#!/bin/sh
# A stand-in for nginx: serves /usr/share/nginx/html on $PORT (80); exits 0 on SIGTERM.
trap 'kill $child 2>/dev/null; exit 0' TERM INT
if [ "${START_DELAY:-0}" != 0 ]; then
  echo "starting in ${START_DELAY}s"
  sleep "$START_DELAY" & child=$!
  wait $child
fi
httpd -f -p "${PORT:-80}" -h /usr/share/nginx/html & child=$!
echo "serving on :${PORT:-80}"
wait $child
"#;

/// Prints a line and exits 1 after `EXIT_AFTER` seconds.
const EXIT_SCRIPT: &str = r#"#!/bin/sh
echo "exiting with status 1 in ${EXIT_AFTER:-1}s"
sleep "${EXIT_AFTER:-1}"
exit 1
"#;

/// How the simulated kubelet is told to run the test images as real nodes do: the images whose
/// own process ends (`--exits IMAGE=AFTER:CODE`, matching their scripts), the tags that share
/// a digest (`--same-digest`), and where and from when each serving image listens (`--serves`,
/// read from the images' own configs: the exposed port, and `START_DELAY`).
pub fn simulated_kubelet_args() -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--exits=docker.io/library/cloneset-e2e-exits:1=1s:1".into(),
        "--exits=registry.k8s.io/e2e-test-images/busybox:1.36.1-1=0s:0".into(),
        "--same-digest=docker.io/library/nginx:mainline-alpine=docker.io/library/nginx:alpine".into(),
    ];
    for image in test_images(Vec::new(), Vec::new()) {
        let ports: Vec<&str> = image.config.exposed_ports.iter().filter_map(|p| p.strip_suffix("/tcp")).collect();
        if ports.is_empty() {
            continue;
        }
        let after = image.config.env.iter().find_map(|e| e.strip_prefix("START_DELAY=")).map_or(String::new(), |d| format!("@{d}s"));
        args.push(format!("--serves={}={}{after}", image.reference, ports.join(",")));
    }
    args
}

/// Our own pause program: holds the pod sandbox's namespaces, reaps orphans, exits 0 on
/// SIGINT or SIGTERM.
pub const PAUSE_C: &str = r#"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, 0);
  sigaction(SIGTERM, &sa, 0);
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, 0);
  for (;;) pause();
}
"#;

/// The layer every busybox-based test image shares: `/bin/busybox` and its applets.
fn busybox_layer(busybox: Vec<u8>, mtime: u64) -> Vec<u8> {
    let mut entries =
        vec![Entry::Dir { path: "bin".into(), mode: 0o755 }, Entry::File { path: "bin/busybox".into(), mode: 0o755, data: busybox }];
    entries.extend(APPLETS.iter().map(|a| Entry::Symlink { path: format!("bin/{a}"), target: "busybox".into() }));
    entries.push(Entry::Dir { path: "tmp".into(), mode: 0o1777 });
    layer_tar(&entries, mtime)
}

fn script_layer(script: &str, page: Option<&str>, mtime: u64) -> Vec<u8> {
    let mut entries = vec![Entry::File { path: "docker-entrypoint.sh".into(), mode: 0o755, data: script.as_bytes().to_vec() }];
    if let Some(page) = page {
        for dir in ["usr", "usr/share", "usr/share/nginx", "usr/share/nginx/html"] {
            entries.push(Entry::Dir { path: dir.into(), mode: 0o755 });
        }
        entries.push(Entry::File { path: "usr/share/nginx/html/index.html".into(), mode: 0o644, data: format!("{page}\n").into_bytes() });
    }
    layer_tar(&entries, mtime)
}

/// The test images: references and specs. `busybox` is a static busybox; `pause` our pause
/// program, compiled statically.
pub fn test_images(busybox: Vec<u8>, pause: Vec<u8>) -> Vec<ImageSpec> {
    let mtime = mtime_from_env();
    let base = busybox_layer(busybox, mtime);
    let script = |reference: &str, script: &str, page: Option<&str>, env: &[&str]| ImageSpec {
        reference: reference.into(),
        config: RunConfig {
            entrypoint: vec!["/docker-entrypoint.sh".into()],
            env: std::iter::once("PATH=/bin").chain(env.iter().copied()).map(String::from).collect(),
            // SERVE_SCRIPT listens on $PORT (80 unless the image sets it).
            exposed_ports: match page {
                Some(_) => vec![format!("{}/tcp", env.iter().find_map(|e| e.strip_prefix("PORT=")).unwrap_or("80"))],
                None => vec![],
            },
            ..Default::default()
        },
        layers: vec![base.clone(), script_layer(script, page, mtime)],
    };
    let pause_layer = layer_tar(&[Entry::File { path: "pause".into(), mode: 0o755, data: pause }], mtime);
    vec![
        script("docker.io/library/nginx:1.27", SERVE_SCRIPT, Some("nginx 1.27"), &[]),
        script("docker.io/library/nginx:1.28", SERVE_SCRIPT, Some("nginx 1.28"), &[]),
        script("docker.io/library/nginx:alpine", SERVE_SCRIPT, Some("nginx alpine"), &[]),
        // Two tags of one image, as Docker Hub serves `alpine` and `mainline-alpine`: same digest.
        script("docker.io/library/nginx:mainline-alpine", SERVE_SCRIPT, Some("nginx alpine"), &[]),
        // The names Kubernetes' own e2e images go by (`test/utils/image`), which suites written
        // for Kubernetes (Kruise's among them) pull.
        script("registry.k8s.io/e2e-test-images/nginx:1.14-4", SERVE_SCRIPT, Some("nginx 1.14"), &[]),
        script("registry.k8s.io/e2e-test-images/nginx:1.15-4", SERVE_SCRIPT, Some("nginx 1.15"), &[]),
        script("registry.k8s.io/e2e-test-images/redis:5.0.5-3", SERVE_SCRIPT, Some("redis 5.0.5"), &["PORT=6379"]),
        script("registry.k8s.io/e2e-test-images/httpd:2.4.38-4", SERVE_SCRIPT, Some("httpd 2.4.38"), &[]),
        script("registry.k8s.io/e2e-test-images/httpd:2.4.39-4", SERVE_SCRIPT, Some("httpd 2.4.39"), &[]),
        // Like the real busybox image: no entrypoint, `sh` as the command, which exits at once
        // without a terminal.
        ImageSpec {
            reference: "registry.k8s.io/e2e-test-images/busybox:1.36.1-1".into(),
            config: RunConfig { cmd: vec!["sh".into()], env: vec!["PATH=/bin".into()], ..Default::default() },
            layers: vec![base.clone()],
        },
        script("docker.io/library/cloneset-e2e-exits:1", EXIT_SCRIPT, None, &["EXIT_AFTER=1"]),
        script("docker.io/library/cloneset-e2e-slow-start:1", SERVE_SCRIPT, Some("slow start"), &["START_DELAY=5"]),
        ImageSpec {
            reference: crate::nodes::real::PAUSE_IMAGE.into(),
            config: RunConfig { entrypoint: vec!["/pause".into()], user: Some("65535:65535".into()), ..Default::default() },
            layers: vec![pause_layer],
        },
    ]
}

/// Compiles [`PAUSE_C`] statically with the system's C compiler into `dir`.
pub fn compile_pause(dir: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::create_dir_all(dir)?;
    let (source, out) = (dir.join("pause.c"), dir.join("pause"));
    std::fs::write(&source, PAUSE_C)?;
    crate::host::run("gcc", &["-static", "-Os", "-s", "-o", &out.display().to_string(), &source.display().to_string()])
        .context("compiling the pause program (gcc with a static libc)")?;
    Ok(std::fs::read(out)?)
}

/// Where the registry digests of the published test images are recorded.
fn digests_file(dir: &Path) -> PathBuf {
    dir.join("published.json")
}

/// Builds the test images into `dir` and copies them into the registry; records each
/// reference's registry digest (what a kubelet reports as its imageID).
pub fn publish_test_images(dir: &Path, registry: SocketAddr) -> anyhow::Result<()> {
    let busybox = std::fs::read("/bin/busybox").context("reading /bin/busybox (Debian's busybox-static)")?;
    check_static(&busybox).context("/bin/busybox must be Debian's busybox-static")?;
    let pause = compile_pause(dir)?;
    let mut digests = BTreeMap::new();
    for spec in test_images(busybox, pause) {
        let image = build(&spec);
        let file = dir.join(format!("{}.oci.tar", spec.reference.replace(['/', ':'], "_")));
        write_archive(&file, &image)?;
        digests.insert(spec.reference.clone(), crate::registry::push(&file, registry, &spec.reference)?);
    }
    std::fs::write(digests_file(dir), serde_json::to_vec_pretty(&digests)?)?;
    Ok(())
}

/// The registry digest of each published test image, by full reference.
pub fn published_digests(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let path = digests_file(dir);
    Ok(serde_json::from_slice(&std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries_of(tar_bytes: &[u8]) -> Vec<(String, u64, u64, u32, u64)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (e.path().unwrap().display().to_string(), h.mtime().unwrap(), h.uid().unwrap(), h.mode().unwrap(), h.size().unwrap())
            })
            .collect()
    }

    fn json_of(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    fn test_version() -> BinaryVersion {
        BinaryVersion { version: "0.1.0".into(), revision: "1a2b3c4d5e6f".into() }
    }

    #[test]
    fn the_operator_image_is_labelled_with_its_version_and_revision() {
        assert_eq!(
            BinaryVersion::parse("cloneset-operator 0.2.0 (revision 1a2b3c4d5e6f-dirty)"),
            Some(BinaryVersion { version: "0.2.0".into(), revision: "1a2b3c4d5e6f-dirty".into() })
        );
        assert_eq!(BinaryVersion::parse("cloneset-operator 0.2.0"), None);
        let image = build(&operator_image("docker.io/library/cloneset-operator:0.1.0", b"bin".to_vec(), &test_version()));
        let labels = &json_of(&image.config)["config"]["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], "0.1.0");
        assert_eq!(labels["org.opencontainers.image.revision"], "1a2b3c4d5e6f");
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        assert!(labels["org.opencontainers.image.source"].as_str().is_some_and(|s| s.starts_with("https://")), "{labels}");
        assert_eq!(&json_of(&image.manifest)["annotations"], labels, "the manifest says the same");
    }

    /// What makes an image reproducible: the same bytes from the same inputs.
    #[test]
    fn the_same_inputs_give_the_same_archive() {
        let a =
            archive(&build(&operator_image("docker.io/library/cloneset-operator:0.1.0", b"\x7fELF binary".to_vec(), &test_version())), 0);
        let b =
            archive(&build(&operator_image("docker.io/library/cloneset-operator:0.1.0", b"\x7fELF binary".to_vec(), &test_version())), 0);
        assert_eq!(a, b);
        let entries = entries_of(&a);
        let paths: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted, "entries are sorted");
        assert!(entries.iter().all(|e| e.1 == 0 && e.2 == 0), "time 0, owner root: {entries:?}");
        assert!(paths.contains(&"oci-layout") && paths.contains(&"index.json"));
    }

    #[test]
    fn the_operator_runs_as_nonroot_without_a_shell() {
        let image = build(&operator_image("docker.io/library/cloneset-operator:0.1.0", b"bin".to_vec(), &test_version()));
        let config = json_of(&image.config);
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"], json!(["/cloneset-operator"]));
        assert_eq!(config["architecture"], host_architecture());
        assert!(config.get("created").is_none(), "no creation time: it would change every build");
        let files: Vec<(String, u64, u64, u32, u64)> = entries_of(&image.layers[0]);
        assert!(files.iter().any(|f| f.0 == "cloneset-operator" && f.3 == 0o755));
        assert!(files.iter().any(|f| f.0 == "tmp/" && f.3 == 0o1777));
        assert!(!files.iter().any(|f| f.0.starts_with("bin")), "no shell or tools: {files:?}");
        let passwd = files.iter().find(|f| f.0 == "etc/passwd").unwrap();
        assert!(passwd.4 > 0);
        assert_eq!(image.tag(), "0.1.0");
    }

    #[test]
    fn digests_in_the_manifest_and_index_name_the_blobs() {
        let image = build(&operator_image("docker.io/library/cloneset-operator:0.1.0", b"bin".to_vec(), &test_version()));
        let manifest = json_of(&image.manifest);
        assert_eq!(manifest["config"]["digest"], digest(&image.config));
        assert_eq!(manifest["config"]["size"], image.config.len());
        assert_eq!(manifest["layers"][0]["digest"], digest(&image.layers[0]));
        let config = json_of(&image.config);
        assert_eq!(config["rootfs"]["diff_ids"][0], digest(&image.layers[0]), "uncompressed: diff_id is the layer digest");
        let bytes = archive(&image, 0);
        let mut files = BTreeMap::new();
        for e in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            let mut e = e.unwrap();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            files.insert(e.path().unwrap().display().to_string(), data);
        }
        let index = json_of(&files["index.json"]);
        assert_eq!(index["manifests"][0]["digest"], image.manifest_digest());
        assert_eq!(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "0.1.0");
        assert_eq!(index["manifests"][0]["annotations"]["io.containerd.image.name"], "docker.io/library/cloneset-operator:0.1.0");
        for (path, data) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(digest(data), format!("sha256:{hex}"), "{path}");
            }
        }
    }

    #[test]
    fn the_stand_ins_differ_but_share_the_busybox_layer() {
        let images: Vec<BuiltImage> = test_images(b"busybox".to_vec(), b"pause".to_vec()).iter().map(build).collect();
        let by_ref = |r: &str| images.iter().find(|i| i.reference == r).unwrap();
        let nginx = ["docker.io/library/nginx:1.27", "docker.io/library/nginx:1.28", "docker.io/library/nginx:alpine"].map(by_ref);
        let digests: std::collections::BTreeSet<String> = nginx.iter().map(|i| i.manifest_digest()).collect();
        assert_eq!(digests.len(), 3, "three distinct digests");
        assert!(nginx.iter().all(|i| i.layers[0] == nginx[0].layers[0]), "one shared busybox layer");
        let pause = by_ref(crate::nodes::real::PAUSE_IMAGE);
        assert_eq!(json_of(&pause.config)["config"]["Entrypoint"], json!(["/pause"]));
        assert_eq!(by_ref("docker.io/library/nginx:mainline-alpine").manifest_digest(), nginx[2].manifest_digest(), "two tags, one image");
        let busybox = json_of(&by_ref("registry.k8s.io/e2e-test-images/busybox:1.36.1-1").config);
        assert_eq!((&busybox["config"]["Cmd"], &busybox["config"]["Entrypoint"]), (&json!(["sh"]), &Value::Null));
        let exits = json_of(&by_ref("docker.io/library/cloneset-e2e-exits:1").config);
        assert!(exits["config"]["Env"].as_array().unwrap().contains(&json!("EXIT_AFTER=1")));
    }

    /// What the simulated kubelet is told each image serves is what the image does: its script
    /// serves on `PORT` after `START_DELAY`, and the exiting images serve nothing.
    #[test]
    fn the_simulated_kubelet_knows_where_each_test_image_listens() {
        let flags: Vec<String> = simulated_kubelet_args().iter().filter_map(|a| a.strip_prefix("--serves=").map(String::from)).collect();
        let serves = crate::nodes::simulated::parse_serves(&flags).unwrap();
        let of = |r: &str| serves.get(r).map(|s| (s.ports.clone(), s.after.as_secs()));
        assert_eq!(of("docker.io/library/nginx:1.27"), Some((vec![80], 0)));
        assert_eq!(of("registry.k8s.io/e2e-test-images/redis:5.0.5-3"), Some((vec![6379], 0)));
        assert_eq!(of("docker.io/library/cloneset-e2e-slow-start:1"), Some((vec![80], 5)));
        assert_eq!(of("docker.io/library/cloneset-e2e-exits:1"), None);
        assert_eq!(of("registry.k8s.io/e2e-test-images/busybox:1.36.1-1"), None);
        assert!(SERVE_SCRIPT.contains(r#"-p "${PORT:-80}""#) && SERVE_SCRIPT.contains(r#"sleep "$START_DELAY""#));
    }

    /// The simulated kubelet is told how the exiting test images end, and that matches their
    /// scripts: the real node runs the scripts, the simulated one the flags.
    #[test]
    fn the_simulated_kubelet_knows_how_the_exiting_images_end() {
        let flags: Vec<String> = simulated_kubelet_args().iter().filter_map(|a| a.strip_prefix("--exits=").map(String::from)).collect();
        let exits = crate::nodes::simulated::parse_exits(&flags).unwrap();
        let images: Vec<ImageSpec> = test_images(b"busybox".to_vec(), b"pause".to_vec());
        let script = exits["docker.io/library/cloneset-e2e-exits:1"];
        let spec = images.iter().find(|i| i.reference == "docker.io/library/cloneset-e2e-exits:1").unwrap();
        assert!(spec.config.env.contains(&format!("EXIT_AFTER={}", script.after.as_secs())));
        assert!(EXIT_SCRIPT.contains(&format!("exit {}", script.code)));
        let busybox = exits["registry.k8s.io/e2e-test-images/busybox:1.36.1-1"];
        assert_eq!((busybox.after, busybox.code), (std::time::Duration::ZERO, 0), "`sh` without a terminal ends at once, with 0");
        assert!(exits.keys().all(|r| images.iter().any(|i| &i.reference == r)), "every exiting image is served");
    }

    #[test]
    fn only_static_executables_are_accepted() {
        // An ELF header with no program headers asks for no loader.
        let mut elf = vec![0u8; 64];
        elf[..5].copy_from_slice(b"\x7fELF\x02");
        assert!(check_static(&elf).is_ok());
        let ls = std::fs::read("/bin/ls").unwrap();
        assert!(check_static(&ls).unwrap_err().to_string().contains("dynamically linked"), "Debian's ls is dynamic");
        assert!(check_static(b"#!/bin/sh\n").is_err());
        assert_eq!((tag_of("registry.k8s.io/pause:3.10"), tag_of("localhost:5000/app")), ("3.10", "latest"));
    }
}
