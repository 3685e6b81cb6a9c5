//! `local-cluster up|down|status`: the project's own local control plane.

use std::path::PathBuf;

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
        /// Use the simulated-kubelet settings the e2e tests are written against.
        #[arg(long)]
        test_profile: bool,
    },
    /// Build (once) the pinned Kubernetes and install etcd when missing, without starting
    /// anything: after it, `up` needs no network.
    Prepare,
    /// Stop every process this directory's `up` started; logs are kept.
    Down,
    /// Exit 0 and print the kubeconfig path when the cluster is running.
    Status,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)?;
    let dir = args.dir.canonicalize()?;
    match args.command {
        Cmd::Up { sim_args, test_profile } => {
            let mut opts = if test_profile { e2e::testenv::test_up_options(&dir) } else { UpOptions::new(&dir) };
            opts.sim_kubelet_args.extend(sim_args);
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
        Cmd::Prepare => {
            let bins = cluster::prepare(&UpOptions::new(&dir).k8s_version)?;
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
