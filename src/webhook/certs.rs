//! The webhook's own certificates, when cert-manager does not provide them: each replica makes a
//! CA of its own and a serving certificate signed by it, and adds the CA to the CRD's `caBundle`
//! beside the other replicas' (so no replica needs a Secret, and none waits for another). A CA
//! leaves the bundle when it expires; a replica rotates before that. Pure functions of the
//! current bundle and `now`, except for the key generation in [`issue`].

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A serving certificate and the CA that signed it.
#[derive(Clone, Debug)]
pub struct Issued {
    /// PEM of the CA, as it goes into the `caBundle`.
    pub ca_pem: String,
    pub cert_der: CertificateDer<'static>,
    /// The certificate and key as PEM, as a Secret holds them (`tls.crt`, `tls.key`).
    pub cert_pem: String,
    pub key_pem: String,
    pub key_der: Vec<u8>,
    /// Unix seconds.
    pub issued_at: i64,
    pub not_after: i64,
}

impl Issued {
    pub(crate) fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// When to make the next one: two thirds into its life, as cert-manager renews.
    pub(crate) fn renew_at(&self) -> i64 {
        self.issued_at + (self.not_after - self.issued_at) * 2 / 3
    }
}

/// Clock skew the certificates tolerate between this process and the apiserver.
const BACKDATE: i64 = 3600;

/// A new CA and a serving certificate for `hosts` (DNS names or IP addresses), valid from `now`
/// (less a margin for skew) for `validity`.
pub fn issue(hosts: &[String], now: i64, validity: Duration, name: &str) -> anyhow::Result<Issued> {
    let not_after = now + validity.as_secs() as i64;
    let window = |p: &mut CertificateParams| -> anyhow::Result<()> {
        p.not_before = time::OffsetDateTime::from_unix_timestamp(now - BACKDATE)?;
        p.not_after = time::OffsetDateTime::from_unix_timestamp(not_after)?;
        Ok(())
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, format!("cloneset-operator webhook CA ({name})"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    window(&mut ca)?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(hosts.to_vec())?;
    leaf.distinguished_name.push(DnType::CommonName, hosts.first().cloned().unwrap_or_else(|| "cloneset-operator-webhook".into()));
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    window(&mut leaf)?;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Issued {
        ca_pem: ca_cert.pem(),
        cert_der: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
        issued_at: now,
        not_after,
    })
}

/// One certificate of a bundle, with its expiry (unix seconds; `i64::MAX` when unreadable, so
/// an entry someone else put there is never removed by us).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub pem: String,
    pub not_after: i64,
}

/// The certificates of a PEM bundle, in order.
pub(crate) fn parse_bundle(pem: &[u8]) -> Vec<Entry> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|der| {
            let not_after = x509_parser::parse_x509_certificate(&der).map_or(i64::MAX, |(_, c)| c.validity().not_after.timestamp());
            Entry { pem: to_pem(&der), not_after }
        })
        .collect()
}

fn to_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The bundle to write: `current` without expired certificates, plus each of `ours` it lacks.
/// `None` when that is what `current` already holds.
pub(crate) fn next_bundle(current: &[u8], ours: &[&str], now: i64) -> Option<String> {
    let entries = parse_bundle(current);
    let mut kept: Vec<Entry> = entries.iter().filter(|e| e.not_after > now).cloned().collect();
    for pem in ours {
        let Some(mine) = parse_bundle(pem.as_bytes()).into_iter().next() else { continue };
        if !kept.iter().any(|e| e.pem == mine.pem) {
            kept.push(mine);
        }
    }
    (kept != entries).then(|| kept.into_iter().map(|e| e.pem).collect())
}

/// Whether `bundle` holds the CA `pem`.
pub(crate) fn contains(bundle: &[u8], pem: &str) -> bool {
    let Some(mine) = parse_bundle(pem.as_bytes()).into_iter().next() else { return false };
    parse_bundle(bundle).iter().any(|e| e.pem == mine.pem)
}

/// Reads a serving certificate chain and key from PEM (cert-manager's `tls.crt` / `tls.key`).
pub(crate) fn read_pem_pair(cert: &[u8], key: &[u8]) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain: Vec<_> = CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(|e| format!("tls.crt: {e}"))?;
    if chain.is_empty() {
        return Err("tls.crt holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("tls.key: {e}"))?;
    Ok((chain, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;

    #[test]
    fn a_serving_certificate_names_its_hosts_and_is_signed_by_its_ca() {
        let hosts = vec!["svc.ns.svc".to_string(), "127.0.0.1".to_string()];
        let now = 1_800_000_000;
        let issued = issue(&hosts, now, Duration::from_secs(90 * DAY), "pod-a").unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&issued.cert_der).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap().value.general_names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(sans.iter().any(|s| s.contains("svc.ns.svc")) && sans.iter().any(|s| s.contains("7f:00:00:01")), "{sans:?}");
        assert_eq!(cert.validity().not_after.timestamp(), now + 90 * DAY as i64);
        let ca = parse_bundle(issued.ca_pem.as_bytes());
        let ca_der = CertificateDer::from_pem_slice(issued.ca_pem.as_bytes()).unwrap();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        assert_eq!(cert.issuer(), ca_cert.subject());
        assert_eq!(ca.len(), 1);
        assert_eq!(issued.renew_at(), now + 60 * DAY as i64);
    }

    #[test]
    fn the_bundle_gains_our_ca_keeps_the_others_and_drops_the_expired() {
        let now = 1_800_000_000;
        let a = issue(&["a".into()], now - 10 * DAY as i64, Duration::from_secs(5 * DAY), "a").unwrap(); // expired
        let b = issue(&["b".into()], now, Duration::from_secs(5 * DAY), "b").unwrap();
        let c = issue(&["c".into()], now, Duration::from_secs(5 * DAY), "c").unwrap();
        let current = format!("{}{}", a.ca_pem, b.ca_pem);
        let next = next_bundle(current.as_bytes(), &[&c.ca_pem], now).unwrap();
        assert!(!contains(next.as_bytes(), &a.ca_pem) && contains(next.as_bytes(), &b.ca_pem) && contains(next.as_bytes(), &c.ca_pem));
        assert_eq!(next_bundle(next.as_bytes(), &[&c.ca_pem, &b.ca_pem], now), None, "nothing to change");
        assert!(next_bundle(b"", &[&b.ca_pem], now).is_some());
    }

    #[test]
    fn cert_manager_files_are_read_as_a_chain_and_a_key() {
        let issued = issue(&["x".into()], 1_800_000_000, Duration::from_secs(DAY), "x").unwrap();
        let cert_pem = to_pem(&issued.cert_der);
        let key = KeyPair::try_from(issued.key_der.as_slice()).unwrap().serialize_pem();
        let (chain, _) = read_pem_pair(cert_pem.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(chain.len(), 1);
        assert!(read_pem_pair(b"", key.as_bytes()).is_err());
    }
}
