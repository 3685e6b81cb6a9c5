//! The cluster's PKI (one CA, serving and client certificates) and the kubeconfigs made from it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::addresses::Plan;
use crate::host::which;

pub(super) struct Pki {
    pub(super) dir: PathBuf,
}

impl Pki {
    /// Creates the CA, the service-account key and the control plane's certificates once; later
    /// calls reuse them, so a printed kubeconfig stays valid across restarts. Only the apiserver's
    /// serving certificate changes, when the address plan does.
    pub(super) fn ensure(dir: &Path, plan: Plan) -> anyhow::Result<Self> {
        fs::create_dir_all(dir)?;
        let pki = Self { dir: dir.to_path_buf() };
        if !dir.join("complete").exists() {
            which("openssl").context("openssl is needed to create the local cluster's certificates")?;
            pki.openssl(&["genrsa", "-out", "ca.key", "2048"])?;
            pki.openssl(&[
                "req",
                "-x509",
                "-new",
                "-nodes",
                "-key",
                "ca.key",
                "-subj",
                "/CN=cloneset-operator-local-ca",
                "-days",
                "3650",
                "-out",
                "ca.crt",
            ])?;
            pki.openssl(&["genrsa", "-out", "sa.key", "2048"])?;
            pki.openssl(&["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
            fs::write(dir.join("complete"), b"")?;
        }
        let mut serving = vec!["IP:127.0.0.1".to_string(), "DNS:localhost".into(), format!("IP:{}", plan.kubernetes_service_ip())];
        if let Plan::Bridged(b) = plan {
            serving.push(format!("IP:{}", b.bridge_ip()));
        }
        serving.extend(["DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc"].map(String::from));
        pki.certificate("apiserver", "/CN=kube-apiserver", &Pki::serving(&serving))?;
        for (name, subject) in [
            ("admin", "/O=system:masters/CN=cloneset-admin"),
            ("controller-manager", "/CN=system:kube-controller-manager"),
            ("scheduler", "/CN=system:kube-scheduler"),
            // The apiserver's identity towards real kubelets (logs, exec, port-forward).
            ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
            ("kube-proxy", "/CN=system:kube-proxy"),
        ] {
            pki.certificate(name, subject, Pki::CLIENT)?;
        }
        Ok(pki)
    }

    pub(super) const CLIENT: &str = "extendedKeyUsage=clientAuth\n";

    pub(super) fn serving(alt_names: &[String]) -> String {
        format!("subjectAltName={}\nextendedKeyUsage=serverAuth\n", alt_names.join(","))
    }

    /// Signs `name.crt` unless it exists with exactly these extensions.
    pub(super) fn certificate(&self, name: &str, subject: &str, extensions: &str) -> anyhow::Result<()> {
        let current = fs::read_to_string(self.dir.join(format!("{name}.ext"))).ok();
        if current.as_deref() == Some(extensions) && self.dir.join(format!("{name}.crt")).is_file() {
            return Ok(());
        }
        self.sign(name, subject, extensions)
    }

    pub(super) fn sign(&self, name: &str, subject: &str, extensions: &str) -> anyhow::Result<()> {
        let (key, csr, crt, ext) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
        fs::write(self.dir.join(&ext), extensions)?;
        self.openssl(&["genrsa", "-out", &key, "2048"])?;
        self.openssl(&["req", "-new", "-key", &key, "-subj", subject, "-out", &csr])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            &crt,
            "-extfile",
            &ext,
        ])
    }

    pub(super) fn openssl(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("openssl").args(args).current_dir(&self.dir).output().context("running openssl")?;
        if !out.status.success() {
            bail!("openssl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

pub(super) fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, user: &str) -> anyhow::Result<()> {
    let d = pki.dir.canonicalize()?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cloneset-local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: cloneset-local\n  context:\n    cluster: cloneset-local\n    user: {user}\ncurrent-context: cloneset-local\n",
        ca = d.join("ca.crt").display(),
        crt = d.join(format!("{user}.crt")).display(),
        key = d.join(format!("{user}.key")).display(),
    );
    fs::write(path, text)?;
    Ok(())
}
