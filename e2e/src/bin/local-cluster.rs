//! `local-cluster up|down|status`: the project's own local control plane.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use e2e::cluster::{self, UpOptions};

#[derive(Parser, Debug)]
#[command(about = "A real local Kubernetes control plane with simulated nodes")]
struct Args {
    /// State directory: PKI, kubeconfig, logs and the PIDs of the processes started.
    #[arg(long, env = "CLONESET_CLUSTER_DIR", default_value = "target/local-cluster")]
    dir: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build (once) and start the control plane; print `export KUBECONFIG=...` last.
    Up {
        /// Extra simulated-kubelet arguments, e.g. `--sim-arg=--max-grace-period=2s`.
        #[arg(long = "sim-arg", allow_hyphen_values = true)]
        sim_args: Vec<String>,
        /// Extra kube-apiserver arguments, after its own, e.g. `--apiserver-arg=--profiling=true`.
        #[arg(long = "apiserver-arg", allow_hyphen_values = true)]
        apiserver_args: Vec<String>,
        /// The test cluster: the simulated-kubelet settings the e2e tests are written against, an
        /// audit log of ServiceAccount requests (for `rbac-audit`) and the
        /// OwnerReferencesPermissionEnforcement admission plugin.
        #[arg(long)]
        test_profile: bool,
        /// Real nodes (kubelet, containerd, runc; needs root) to start beside the simulated ones.
        #[arg(long, default_value_t = 0)]
        real_nodes: usize,
    },
    /// Build (once) the pinned Kubernetes and install etcd when missing, without starting
    /// anything: after it, `up` needs no network.
    Prepare {
        /// Also what real nodes need (kubelet, kube-proxy, Debian's containerd and friends).
        #[arg(long, default_value_t = 0)]
        real_nodes: usize,
    },
    /// Build the operator's OCI image archive from a static binary (reproducibly).
    Image {
        #[arg(long)]
        binary: PathBuf,
        /// Full reference, e.g. docker.io/library/cloneset-operator:0.1.0.
        #[arg(long)]
        reference: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Merge image archives of one image each (one per architecture) into one archive whose
    /// `reference`'s tag names an image index over them (`skopeo copy --all` pushes it).
    ImageIndex {
        /// Full reference, e.g. docker.io/library/cloneset-operator:0.1.0.
        #[arg(long)]
        reference: String,
        #[arg(long)]
        out: PathBuf,
        archives: Vec<PathBuf>,
    },
    /// Copy an image archive's image into this control plane's registry as `reference`.
    Push {
        #[arg(long)]
        archive: PathBuf,
        #[arg(long)]
        reference: String,
    },
    /// Relay TCP connections from one address to another (how pods reach the apiserver).
    Forward {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        to: std::net::SocketAddr,
    },
    /// Print what is on the host that a run could leave behind (JSON); with `--compare FILE`,
    /// list what is there now and was not in FILE, and exit 1 if anything is.
    HostSnapshot {
        #[arg(long)]
        compare: Option<PathBuf>,
    },
    /// Hold the operator's requests in this control plane's audit log (an `up --test-profile`
    /// writes one) against the RBAC the chart grants: exit 1 if a request was not granted or
    /// refused, or a grant was never used.
    RbacAudit {
        /// Only some of the e2e tests ran: a grant none of them used is listed, not failed.
        #[arg(long)]
        subset: bool,
    },
    /// Print the e2e tests that do not hold on the Kubernetes release under test (K8S_VERSION),
    /// one a line: the test's name, a tab, why.
    VersionSkips,
    /// Stop every process this directory's `up` started; logs are kept.
    Down,
    /// Exit 0 and print the kubeconfig path when the cluster is running.
    Status,
}

/// What the chart grants, the same whether it watches every namespace or one (checked here).
fn chart_grants() -> anyhow::Result<std::collections::BTreeSet<e2e::rbac::Access>> {
    let rbac = ["--show-only", "templates/rbac.yaml"];
    let cluster_wide = e2e::rbac::grants(&e2e::chart::render("cloneset-operator", "cloneset-system", &rbac)?)?;
    let mut one = rbac.to_vec();
    one.extend(["--set", "manager.watchNamespace=apps"]);
    let one_namespace = e2e::rbac::grants(&e2e::chart::render("cloneset-operator", "cloneset-system", &one)?)?;
    if cluster_wide != one_namespace {
        anyhow::bail!(
            "the chart grants different calls with manager.watchNamespace: {:?} only cluster-wide, {:?} only in one namespace",
            cluster_wide.difference(&one_namespace).collect::<Vec<_>>(),
            one_namespace.difference(&cluster_wide).collect::<Vec<_>>()
        );
    }
    Ok(cluster_wide)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)?;
    let dir = args.dir.canonicalize()?;
    match args.command {
        Cmd::Up { sim_args, apiserver_args, test_profile, real_nodes } => {
            let mut opts = if test_profile { e2e::testenv::test_up_options(&dir) } else { UpOptions::new(&dir) };
            opts.sim_kubelet_args.extend(sim_args);
            opts.apiserver_args.extend(apiserver_args);
            opts.real_nodes = real_nodes;
            let (state, report) = cluster::up(&opts).await?;
            if report.reused_running_cluster {
                eprintln!("local-cluster: reusing the running control plane in {}", dir.display());
            } else {
                eprintln!(
                    "local-cluster: binaries ready in {:.1}s, control plane started in {:.1}s (logs: {})",
                    report.build.as_secs_f64(),
                    report.start.as_secs_f64(),
                    dir.join("logs").display()
                );
            }
            println!("export KUBECONFIG={}", state.kubeconfig.display());
        }
        Cmd::Image { binary, reference, out } => {
            let bytes = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
            e2e::image::check_static(&bytes).with_context(|| format!("{} cannot run in an image without libc", binary.display()))?;
            let version = e2e::image::BinaryVersion::of(&binary)?;
            let image = e2e::image::build(&e2e::image::operator_image(&reference, bytes, &version));
            let digest = e2e::image::write_archive(&out, &image)?;
            eprintln!("local-cluster: {reference} written to {} (manifest {digest})", out.display());
            eprintln!("  skopeo copy oci-archive:{}:{} docker://<registry>/cloneset-operator:{}", out.display(), image.tag(), image.tag());
        }
        Cmd::ImageIndex { reference, out, archives } => {
            let read = |a: &PathBuf| std::fs::read(a).with_context(|| format!("reading {}", a.display()));
            let archives = archives.iter().map(read).collect::<anyhow::Result<Vec<_>>>()?;
            let merged = e2e::image_index::merge(&archives, &reference, e2e::image::mtime_from_env())?;
            std::fs::write(&out, merged).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("local-cluster: {reference} for {} architectures written to {}", archives.len(), out.display());
        }
        Cmd::Push { archive, reference } => {
            let state = cluster::read_state(&dir)?.context("no control plane runs here: start it first")?;
            let real = state.real.context("this control plane has no registry: it runs without real nodes (--real-nodes 0)")?;
            let digest = e2e::registry::push(&archive, real.registry, &reference)?;
            eprintln!("local-cluster: {reference} is in the local registry ({digest})");
        }
        Cmd::Forward { listen, to } => e2e::nodes::network::forward(listen, to).await?,
        Cmd::HostSnapshot { compare } => {
            let now = e2e::host::Snapshot::take();
            let Some(before) = compare else {
                println!("{}", serde_json::to_string(&now)?);
                return Ok(());
            };
            let before: e2e::host::Snapshot = serde_json::from_slice(&std::fs::read(&before)?)?;
            let left = before.leftovers(&now);
            if !left.is_empty() {
                eprintln!("local-cluster: left on the host since the snapshot:");
                left.iter().for_each(|l| eprintln!("  {l}"));
                std::process::exit(1);
            }
            eprintln!("local-cluster: nothing left on the host since the snapshot");
        }
        Cmd::RbacAudit { subset } => {
            let log = cluster::audit_log(&dir);
            let text =
                std::fs::read_to_string(&log).with_context(|| format!("reading {} (written by `up --test-profile`)", log.display()))?;
            let grants = chart_grants()?;
            let (calls, non_resource) = e2e::rbac::calls(&text, e2e::chart::is_operator_account)?;
            let mut report = e2e::rbac::compare(&grants, &calls);
            // Asked of the running apiserver: a grant it cannot be called with here is said, not failed.
            if let Some(state) = cluster::read_state(&dir)?
                && !cluster::client_for(&state.kubeconfig)
                    .await?
                    .list_core_api_resources("v1")
                    .await?
                    .resources
                    .iter()
                    .any(|r| r.name == "pods/resize")
            {
                report.not_served("pods/resize", "its InPlacePodVerticalScaling feature gate is off");
            }
            eprint!("local-cluster: the chart's RBAC against the operator's requests in {}: {report}", log.display());
            eprintln!(
                "  non-resource paths (discovery, allowed to every account): {}",
                non_resource.into_iter().collect::<Vec<_>>().join(" ")
            );
            if report.requests == 0 {
                anyhow::bail!("no request of the operator's in the audit log: nothing was checked");
            }
            if subset && report.ungranted.is_empty() && report.forbidden.is_empty() && !report.unused.is_empty() {
                eprintln!("local-cluster: only some e2e tests ran, so the grants listed as never called are not failed here");
            } else if !report.is_clean() {
                anyhow::bail!("the chart's RBAC and the operator's calls differ (above)");
            }
        }
        Cmd::VersionSkips => {
            for (test, why) in e2e::versions::skipped_on(&e2e::versions::under_test()) {
                println!("{test}\t{why}");
            }
        }
        Cmd::Prepare { real_nodes } => {
            let bins = cluster::prepare(&UpOptions::new(&dir).k8s_version, real_nodes > 0)?;
            eprintln!("local-cluster: Kubernetes in {}, etcd at {}", bins.kubernetes.display(), bins.etcd.display());
        }
        Cmd::Down => {
            if cluster::down(&dir)? {
                eprintln!("local-cluster: stopped; logs kept in {}", dir.join("logs").display());
            } else {
                eprintln!("local-cluster: nothing running in {}", dir.display());
            }
        }
        Cmd::Status => match cluster::read_state(&dir)? {
            Some(state)
                if cluster::all_alive(&state)
                    && cluster::wait_ready(&state.kubeconfig, std::time::Duration::from_secs(3)).await.is_ok() =>
            {
                println!("{}", state.kubeconfig.display());
            }
            _ => {
                eprintln!("local-cluster: not running in {}", dir.display());
                std::process::exit(1);
            }
        },
    }
    Ok(())
}
