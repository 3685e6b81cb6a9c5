//! When a replica's own certificate is renewed, and when a renewal is served: decided from the
//! certificate served, the one waiting, the CRD's bundle as last read, and `now`. The renewal is
//! served only once the apiserver can trust it, so no conversion meets an unknown CA.

use std::time::Duration;

use super::certs::{self, Issued};

/// How long a new CA sits in the bundle before its certificate is served: the apiserver reads
/// the CRD from its watch, a moment after our write.
pub(super) const BUNDLE_SETTLE: Duration = Duration::from_secs(5);

/// The certificate served and the renewal waiting to be.
#[derive(Debug, Default)]
pub(super) struct Rotation {
    serving: Option<Issued>,
    /// The renewal, and when its CA was first seen in the bundle (unix seconds).
    next: Option<(Issued, Option<i64>)>,
}

impl Rotation {
    /// Whether to issue a certificate at `now`: none waits, and none is served or the served one
    /// is due for renewal.
    pub(super) fn due(&self, now: i64) -> bool {
        self.next.is_none() && self.serving.as_ref().is_none_or(|s| now >= s.renew_at())
    }

    /// A new certificate, to be served once the bundle holds its CA.
    pub(super) fn issued(&mut self, issued: Issued) {
        self.next = Some((issued, None));
    }

    /// The CAs the bundle must hold: the served certificate's and the waiting one's.
    pub(super) fn cas(&self) -> Vec<&str> {
        self.serving.iter().chain(self.next.as_ref().map(|(n, _)| n)).map(|c| c.ca_pem.as_str()).collect()
    }

    /// The waiting certificate, taken to be served, if `bundle` (read at `now`) lets it be: the
    /// first one as soon as the bundle holds its CA (nothing is served before it), a renewal
    /// [`BUNDLE_SETTLE`] after that. Hand it back with [`Rotation::serving`] once it is served.
    pub(super) fn take_to_serve(&mut self, bundle: &[u8], now: i64) -> Option<Issued> {
        let (issued, seen) = self.next.as_mut()?;
        if !certs::contains(bundle, &issued.ca_pem) {
            return None;
        }
        let seen_at = *seen.get_or_insert(now);
        if self.serving.is_some() && now - seen_at < BUNDLE_SETTLE.as_secs() as i64 {
            return None;
        }
        self.next.take().map(|(issued, _)| issued)
    }

    /// The certificate now served.
    pub(super) fn serving(&mut self, issued: Issued) {
        self.serving = Some(issued);
    }

    /// Whether `bundle` holds the CA of the certificate served.
    pub(super) fn trusted(&self, bundle: &[u8]) -> bool {
        self.serving.as_ref().is_some_and(|s| certs::contains(bundle, &s.ca_pem))
    }

    /// Whether a certificate is served.
    pub(super) fn serves(&self) -> bool {
        self.serving.is_some()
    }

    /// Whether a certificate waits for the bundle.
    pub(super) fn waiting(&self) -> bool {
        self.next.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000;
    const VALIDITY: Duration = Duration::from_secs(3_000);

    fn issue(now: i64) -> Issued {
        certs::issue(&["webhook.ns.svc".into()], now, VALIDITY, "pod-a").unwrap()
    }

    /// The bundle a CRD holds with these CAs.
    fn bundle(cas: &[&str]) -> Vec<u8> {
        certs::next_bundle(b"", cas, T0).unwrap_or_default().into_bytes()
    }

    #[test]
    fn the_first_certificate_is_served_once_the_bundle_holds_its_ca() {
        let mut r = Rotation::default();
        assert!(r.due(T0));
        r.issued(issue(T0));
        assert!(!r.due(T0), "one waits already");
        assert_eq!(r.take_to_serve(b"", T0).map(|i| i.ca_pem), None, "not before the bundle holds its CA");
        let held = bundle(&r.cas());
        let first = r.take_to_serve(&held, T0).expect("served at once, no settling");
        assert!(!r.trusted(&held), "nothing is served until it is handed back");
        r.serving(first);
        assert!(r.trusted(&held) && !r.trusted(b"") && !r.waiting());
    }

    #[test]
    fn a_renewal_is_served_only_after_its_ca_settled_in_the_bundle() {
        let mut r = Rotation::default();
        r.issued(issue(T0));
        let first = r.take_to_serve(&bundle(&r.cas()), T0).unwrap();
        let renew_at = first.renew_at();
        r.serving(first.clone());
        assert!(!r.due(renew_at - 1));
        assert!(r.due(renew_at));
        r.issued(issue(renew_at));
        assert_eq!(r.cas().len(), 2, "both CAs stay in the bundle while the renewal waits");
        assert!(r.take_to_serve(&bundle(&[&first.ca_pem]), renew_at + 60).is_none(), "its CA is not in the bundle yet");
        let both = bundle(&r.cas());
        let settle = BUNDLE_SETTLE.as_secs() as i64;
        let seen = renew_at + 61;
        assert!(r.take_to_serve(&both, seen).is_none(), "first seen now");
        assert!(r.take_to_serve(&both, seen + settle - 1).is_none(), "still settling");
        assert!(r.trusted(&both), "the old certificate is served meanwhile");
        let renewal = r.take_to_serve(&both, seen + settle).expect("settled");
        assert_ne!(renewal.ca_pem, first.ca_pem);
        r.serving(renewal.clone());
        assert_eq!(r.cas(), [renewal.ca_pem.as_str()], "the old CA is no longer kept in the bundle");
        assert!(!r.due(seen + settle));
    }
}
