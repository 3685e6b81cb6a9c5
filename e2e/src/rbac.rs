//! The operator's permissions held against its calls: the RBAC rules the chart renders, the
//! requests kube-apiserver's audit log records from the chart's ServiceAccounts, and the two
//! compared both ways. A call no rule grants fails, a grant no call uses fails, and so does any
//! request of the operator's that the apiserver refused.
//!
//! The test cluster writes the audit log ([`AUDIT_POLICY`]); `local-cluster rbac-audit` runs the
//! comparison over a whole e2e run (the last step of `make test`'s e2e stage).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The test cluster's audit policy: every request of a ServiceAccount outside kube-system (the
/// controller-manager's) at Metadata level, once its response is known; nothing else.
pub const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    userGroups: ["system:serviceaccounts:kube-system"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"#;

/// One kind of API call: an API group, a resource (`pods`, or `pods/status` for a subresource),
/// a verb, and for rules limited to named objects the name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub name: Option<String>,
}

impl Access {
    pub fn new(group: &str, resource: &str, verb: &str) -> Self {
        Self { group: group.into(), resource: resource.into(), verb: verb.into(), name: None }
    }

    /// Whether this grant allows `call` (RBAC's matching: same group, resource and verb, and the
    /// same name when the grant names one).
    fn allows(&self, call: &Access) -> bool {
        self.group == call.group
            && self.resource == call.resource
            && self.verb == call.verb
            && self.name.as_ref().is_none_or(|n| call.name.as_ref() == Some(n))
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if let Some(n) = &self.name {
            write!(f, " [{n}]")?;
        }
        Ok(())
    }
}

/// Grants the operator holds without calling them: the apiserver checks them on its behalf. The
/// test cluster runs that admission plugin, so an e2e test fails without either.
pub const INDIRECT_GRANTS: &[(&str, &str, &str, &str)] = &[
    (
        "apps.kruise.io",
        "clonesets/finalizers",
        "update",
        "the OwnerReferencesPermissionEnforcement admission plugin asks for it when the operator creates a pod, PVC or \
         revision whose owner reference blocks its CloneSet's deletion",
    ),
    (
        "",
        "pods/finalizers",
        "update",
        "the OwnerReferencesPermissionEnforcement admission plugin asks for it when the operator hands a PVC to its dead \
         pod (disablePVCReuse) with an owner reference that blocks the pod's deletion",
    ),
];

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// Every access the ClusterRoles and Roles among `docs` (rendered manifests) grant, whatever
/// their scope: the chart grants the same calls cluster-wide or in one namespace.
pub fn grants(docs: &[Value]) -> anyhow::Result<BTreeSet<Access>> {
    let mut out = BTreeSet::new();
    for role in docs.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role") {
        for rule in role["rules"].as_array().context("a role without rules")? {
            if rule.get("nonResourceURLs").is_some() {
                bail!("a rule on non-resource URLs: {rule}");
            }
            let names = strings(&rule["resourceNames"]);
            let names: Vec<Option<String>> = if names.is_empty() { vec![None] } else { names.into_iter().map(Some).collect() };
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        for name in &names {
                            out.insert(Access { group: group.clone(), resource: resource.clone(), verb: verb.clone(), name: name.clone() });
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// One request of the operator's, as the audit log records it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    pub access: Access,
    pub user: String,
    pub namespace: Option<String>,
    pub code: u16,
    /// Whether the authorizer refused it (`authorization.k8s.io/decision: forbid`); a 403 from
    /// admission (a quota, a policy, a namespace being deleted) is not the RBAC's doing.
    pub refused: bool,
    /// When the apiserver received it (RFC 3339, in UTC: ordered as text).
    pub at: String,
}

/// The requests of the chart's ServiceAccounts (`is_operator`) among the audit log's lines, with
/// the paths of their requests to non-resource URLs (`/version`, discovery) apart.
pub fn calls(audit_log: &str, is_operator: impl Fn(&str) -> bool) -> anyhow::Result<(Vec<Call>, BTreeSet<String>)> {
    let mut out = Vec::new();
    let mut non_resource = BTreeSet::new();
    for (i, line) in audit_log.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let ev: Value = serde_json::from_str(line).with_context(|| format!("audit log line {}", i + 1))?;
        let user = ev["user"]["username"].as_str().unwrap_or_default();
        if !is_operator(user) {
            continue;
        }
        let code = ev["responseStatus"]["code"].as_u64().unwrap_or(0) as u16;
        let Some(obj) = ev.get("objectRef").filter(|o| o["resource"].is_string()) else {
            non_resource.insert(ev["requestURI"].as_str().unwrap_or_default().split('?').next().unwrap_or_default().to_string());
            continue;
        };
        let resource = match obj["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", obj["resource"].as_str().unwrap_or_default()),
            None => obj["resource"].as_str().unwrap_or_default().to_string(),
        };
        let access = Access {
            group: obj["apiGroup"].as_str().unwrap_or_default().to_string(),
            resource,
            verb: ev["verb"].as_str().unwrap_or_default().to_string(),
            name: obj["name"].as_str().map(String::from),
        };
        let refused = ev["annotations"]["authorization.k8s.io/decision"] == "forbid";
        let at = ev["requestReceivedTimestamp"].as_str().unwrap_or_default().to_string();
        out.push(Call { access, user: user.to_string(), namespace: obj["namespace"].as_str().map(String::from), code, refused, at });
    }
    Ok((out, non_resource))
}

/// What the comparison found.
#[derive(Debug, Default)]
pub struct Report {
    /// Kinds of request no grant allows, with one example each.
    pub ungranted: BTreeMap<Access, Call>,
    /// Grants no request used (and not in [`INDIRECT_GRANTS`]).
    pub unused: BTreeSet<Access>,
    /// Kinds of request the authorizer refused while the account's other requests were allowed,
    /// with one example each.
    pub forbidden: BTreeMap<Access, Call>,
    /// Requests refused before the account's first allowed request or after its last: its
    /// permissions not bound yet (a chart's pods may start before its RoleBinding is in effect)
    /// or already removed (`helm uninstall` deletes the RoleBinding while the pods stop).
    pub refused_at_the_edges: usize,
    /// Grants no request used because this apiserver does not serve what they grant, and why
    /// (said in the report, not counted as unused): [`Report::not_served`].
    pub not_served: BTreeMap<Access, String>,
    /// How many requests each grant allowed.
    pub used: BTreeMap<Access, usize>,
    pub requests: usize,
    pub accounts: usize,
}

impl Report {
    /// Takes an unused grant of `resource` out of the unused ones: this apiserver does not serve
    /// it (`why`), so no request could use it. A grant that was used stays as it is.
    pub fn not_served(&mut self, resource: &str, why: &str) {
        let gone: Vec<Access> = self.unused.iter().filter(|a| a.resource == resource).cloned().collect();
        for access in gone {
            self.unused.remove(&access);
            self.not_served.insert(access, why.to_string());
        }
    }

    pub fn is_clean(&self) -> bool {
        self.ungranted.is_empty() && self.unused.is_empty() && self.forbidden.is_empty()
    }
}

/// Holds `calls` against `grants` both ways (see the module's documentation).
pub fn compare(grants: &BTreeSet<Access>, calls: &[Call]) -> Report {
    let indirect: BTreeSet<Access> = INDIRECT_GRANTS.iter().map(|(g, r, v, _)| Access::new(g, r, v)).collect();
    let mut report = Report { requests: calls.len(), ..Report::default() };
    let mut used = BTreeSet::new();
    // Each account's allowed requests, first and last.
    let mut allowed: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for call in calls.iter().filter(|c| !c.refused) {
        let span = allowed.entry(call.user.as_str()).or_insert((call.at.as_str(), call.at.as_str()));
        span.0 = span.0.min(call.at.as_str());
        span.1 = span.1.max(call.at.as_str());
    }
    let accounts: BTreeSet<&str> = calls.iter().map(|c| c.user.as_str()).collect();
    report.accounts = accounts.len();
    for call in calls {
        // Reported by kind of call; the example keeps the object's name.
        let kind = Access { name: None, ..call.access.clone() };
        if call.refused {
            match allowed.get(call.user.as_str()) {
                Some((first, last)) if call.at.as_str() > *first && call.at.as_str() < *last => {
                    report.forbidden.entry(kind.clone()).or_insert_with(|| call.clone());
                }
                _ => report.refused_at_the_edges += 1,
            }
        }
        let allowed_by: Vec<&Access> = grants.iter().filter(|g| g.allows(&call.access)).collect();
        if allowed_by.is_empty() {
            report.ungranted.entry(kind).or_insert_with(|| call.clone());
        }
        for g in allowed_by {
            used.insert(g.clone());
            *report.used.entry(g.clone()).or_default() += 1;
        }
    }
    report.unused = grants.iter().filter(|g| !used.contains(*g) && !indirect.contains(*g)).cloned().collect();
    report
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} requests from {} operator ServiceAccounts", self.requests, self.accounts)?;
        for (access, n) in &self.used {
            writeln!(f, "  granted and used: {access} ({n} requests)")?;
        }
        for (g, r, v, why) in INDIRECT_GRANTS {
            writeln!(f, "  granted, checked by the apiserver: {} ({why})", Access::new(g, r, v))?;
        }
        for (access, why) in &self.not_served {
            writeln!(f, "  granted, never called: not served by this apiserver: {access} ({why})")?;
        }
        for (access, call) in &self.ungranted {
            let ns = call.namespace.as_deref().unwrap_or("(cluster)");
            writeln!(f, "  CALLED BUT NOT GRANTED: {access}, e.g. {} by {} in {ns} (answered {})", call.access, call.user, call.code)?;
        }
        for access in &self.unused {
            writeln!(f, "  GRANTED BUT NEVER CALLED: {access}")?;
        }
        for (access, call) in &self.forbidden {
            let ns = call.namespace.as_deref().unwrap_or("(cluster)");
            writeln!(f, "  REFUSED BY RBAC: {access}, e.g. for {} in {ns} at {}", call.user, call.at)?;
        }
        if self.refused_at_the_edges > 0 {
            writeln!(
                f,
                "  refused before an account's permissions were bound or after they were removed (not counted): {}",
                self.refused_at_the_edges
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(kind: &str, rules: Value) -> Value {
        json!({"kind": kind, "metadata": {"name": "r"}, "rules": rules})
    }

    fn event(user: &str, verb: &str, group: &str, resource: &str, sub: Option<&str>, name: Option<&str>, code: u16) -> String {
        static SECOND: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(10);
        let n = SECOND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let at = format!("2026-12-01T10:{:02}:{:02}.000000Z", n / 60, n % 60);
        let mut obj = json!({"resource": resource, "apiGroup": group, "namespace": "ns"});
        if let Some(s) = sub {
            obj["subresource"] = json!(s);
        }
        if let Some(n) = name {
            obj["name"] = json!(n);
        }
        let decision = if code == 403 { "forbid" } else { "allow" };
        json!({"kind": "Event", "stage": "ResponseComplete", "verb": verb, "user": {"username": user},
               "objectRef": obj, "responseStatus": {"code": code}, "requestURI": "/x", "requestReceivedTimestamp": at,
               "annotations": {"authorization.k8s.io/decision": decision}})
        .to_string()
    }

    const OP: &str = "system:serviceaccount:ns:ns-cloneset-operator";

    fn docs() -> Vec<Value> {
        vec![
            role(
                "ClusterRole",
                json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                                       {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kruise-manager"], "verbs": ["get"]},
                                       {"apiGroups": ["apps.kruise.io"], "resources": ["clonesets/finalizers"], "verbs": ["update"]}]),
            ),
            role("Role", json!([{"apiGroups": [""], "resources": ["pods", "pods/resize"], "verbs": ["patch"]}])),
            json!({"kind": "ServiceAccount", "metadata": {"name": "x"}}),
        ]
    }

    fn log(lines: &[String]) -> (Vec<Call>, BTreeSet<String>) {
        calls(&lines.join("\n"), crate::chart::is_operator_account).unwrap()
    }

    #[test]
    fn every_rule_expands_to_its_accesses() {
        let g = grants(&docs()).unwrap();
        assert_eq!(g.len(), 6);
        assert!(g.contains(&Access::new("", "pods/resize", "patch")));
        assert!(g.contains(&Access { name: Some("kruise-manager".into()), ..Access::new("coordination.k8s.io", "leases", "get") }));
        assert!(grants(&[role("Role", json!([{"nonResourceURLs": ["/x"], "verbs": ["get"]}]))]).is_err());
    }

    #[test]
    fn every_grant_used_and_every_call_granted_is_clean() {
        let (c, non_resource) = log(&[
            event(OP, "list", "", "nodes", None, None, 200),
            event(OP, "watch", "", "nodes", None, None, 200),
            event(OP, "get", "coordination.k8s.io", "leases", None, Some("kruise-manager"), 404),
            event(OP, "patch", "", "pods", None, Some("web-a"), 200),
            event(OP, "patch", "", "pods", Some("resize"), Some("web-a"), 200),
            event("system:serviceaccount:ns:other", "get", "", "secrets", None, Some("s"), 403),
            json!({"verb": "get", "user": {"username": OP}, "requestURI": "/version?timeout=32s", "responseStatus": {"code": 200}})
                .to_string(),
        ]);
        assert_eq!(c.len(), 5, "only the operator's account, only resource requests");
        assert_eq!(non_resource, BTreeSet::from(["/version".to_string()]));
        let report = compare(&grants(&docs()).unwrap(), &c);
        assert!(report.is_clean(), "{report}");
    }

    #[test]
    fn a_removed_grant_and_an_ungranted_call_both_fail() {
        let (c, _) = log(&[
            event(OP, "list", "", "nodes", None, None, 200),
            event(OP, "get", "coordination.k8s.io", "leases", None, Some("kruise-manager"), 200),
            event(OP, "patch", "", "pods", Some("resize"), Some("web-a"), 403),
            event(OP, "get", "coordination.k8s.io", "leases", None, Some("somebody-else"), 403),
            event(OP, "patch", "", "pods", None, Some("web-a"), 200),
        ]);
        let report = compare(&grants(&docs()).unwrap(), &c);
        // Nothing watched nodes: a grant nobody uses.
        assert_eq!(report.unused, BTreeSet::from([Access::new("", "nodes", "watch")]));
        // The other Lease is not granted (its name differs), and was refused.
        let get_lease = Access::new("coordination.k8s.io", "leases", "get");
        assert_eq!(report.ungranted.keys().collect::<Vec<_>>(), [&get_lease]);
        assert_eq!(report.ungranted[&get_lease].access.name.as_deref(), Some("somebody-else"));
        assert_eq!(report.forbidden.len(), 2, "{report}");
        assert!(!report.is_clean());

        // The chart without pods/resize: the resize call is ungranted.
        let mut without = docs();
        without[1] = role("Role", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]));
        let report = compare(&grants(&without).unwrap(), &c);
        assert!(report.ungranted.contains_key(&Access::new("", "pods/resize", "patch")), "{report}");
    }

    #[test]
    fn refusals_outside_the_accounts_life_and_by_admission_are_not_the_rbacs() {
        let by_admission =
            |ev: String| ev.replace(r#""authorization.k8s.io/decision":"forbid""#, r#""authorization.k8s.io/decision":"allow""#);
        let (c, _) = log(&[
            // Before the RoleBinding is in effect, then allowed, then a quota's or policy's 403,
            // then after `helm uninstall` removed the binding.
            event(OP, "get", "coordination.k8s.io", "leases", None, Some("kruise-manager"), 403),
            event(OP, "list", "", "nodes", None, None, 200),
            event(OP, "watch", "", "nodes", None, None, 200),
            event(OP, "patch", "", "pods/resize", None, None, 200)
                .replace(r#""resource":"pods/resize""#, r#""resource":"pods","subresource":"resize""#),
            by_admission(event(OP, "patch", "", "pods", None, Some("web-b"), 403)),
            event(OP, "get", "coordination.k8s.io", "leases", None, Some("kruise-manager"), 200),
            event(OP, "patch", "", "pods", None, Some("web-a"), 403),
        ]);
        let report = compare(&grants(&docs()).unwrap(), &c);
        assert!(report.forbidden.is_empty(), "{report}");
        assert_eq!(report.refused_at_the_edges, 2);
        assert!(report.is_clean(), "{report}");
    }

    #[test]
    fn an_indirect_grant_is_never_reported_unused() {
        let report = compare(&grants(&docs()).unwrap(), &[]);
        assert!(!report.unused.contains(&Access::new("apps.kruise.io", "clonesets/finalizers", "update")));
        assert_eq!(report.unused.len(), 5);
    }

    /// Where the apiserver does not serve pods/resize, its unused grant is said as such, not
    /// failed; anything else unused still fails.
    #[test]
    fn a_grant_of_what_the_apiserver_does_not_serve_is_reported_apart() {
        let (c, _) = log(&[event(OP, "list", "", "nodes", None, None, 200), event(OP, "watch", "", "nodes", None, None, 200)]);
        let mut report = compare(&grants(&docs()).unwrap(), &c);
        report.not_served("pods/resize", "no resize here");
        assert!(!report.unused.contains(&Access::new("", "pods/resize", "patch")));
        assert!(report.to_string().contains("not served by this apiserver: "), "{report}");
        assert!(!report.is_clean(), "pods patch and the lease are still unused: {report}");
    }
}
