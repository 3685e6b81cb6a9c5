//! `cloneset-operator migrate --to-kruise`: CloneSets created under this operator, handed back to
//! a controller that hashes the template *as stored* (Kruise's manager), keep their revision and
//! their pods. The stand-in for Kruise's controller is this operator with Kruise's
//! `TemplateNoDefaults` gate, which makes it hash the stored template exactly as Kruise's
//! controller does (the difference between the two is Kruise's webhook, which is not running
//! here). Without the command, the same stand-in makes a new revision and recreates the pods: the
//! control half of the test, which shows the test can fail.

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use cloneset_operator::api::CloneSet;
use cloneset_operator::core::{gojson, revision};
use e2e::testenv::{Operator, OperatorOptions, wait_until};
use e2e::workload::{Env, T, env, manifest, rolled_out, st};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt as _};
use serde_json::json;

const REPLICAS: i32 = 3;

/// Runs `cloneset-operator migrate --to-kruise --namespace=<ns>` and extra flags.
async fn migrate_to_kruise(ns: &str, extra: &[&str]) -> Output {
    let bin = e2e::cluster::sibling_binary("cloneset-operator").unwrap();
    let kubeconfig = e2e::testenv::kubeconfig().await.unwrap();
    let mut args: Vec<String> =
        vec!["migrate".into(), "--to-kruise".into(), format!("--namespace={ns}"), format!("--leader-election-namespace={ns}")];
    args.extend(extra.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || Command::new(bin).args(&args).env("KUBECONFIG", kubeconfig).stdin(Stdio::null()).output().unwrap())
        .await
        .unwrap()
}

fn stdout(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Pod name → uid of the CloneSet's pods.
async fn pod_uids(pods: &Api<Pod>) -> BTreeMap<String, String> {
    pods.list(&ListParams::default()).await.unwrap().items.iter().map(|p| (p.name_any(), p.uid().unwrap_or_default())).collect()
}

/// A namespace with CloneSet `web` (3 pods; a template with a port and a volume, stored as written,
/// which Kruise's webhook would have filled in at several places) rolled out
/// by this operator, which is then stopped.
async fn created_under_this_operator(prefix: &str) -> (Env, String) {
    let mut e = env(prefix).await;
    let mut cs = manifest("web", REPLICAS, "nginx:1.27", json!({}));
    let mut template = serde_json::to_value(&cs.spec.template).unwrap();
    template["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080}]);
    template["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": "web"}}]);
    cs.spec.template = serde_json::from_value(template).unwrap();
    e.create(&cs).await;
    let cs = e.wait_status("web", "rolled out", |cs| rolled_out(cs, REPLICAS)).await;
    let update = st(&cs).update_revision;
    e.operator.stop();
    (e, update)
}

/// Starts the stand-in for Kruise's controller and waits until it has reconciled and is idle;
/// returns it with the CloneSet as it left it.
async fn kruises_rule_over(e: &Env) -> (Operator, CloneSet) {
    let op = Operator::start_with(&e.ns.name, OperatorOptions::args(&["--feature-gates=TemplateNoDefaults=true"])).await.unwrap();
    wait_until(T, "the CloneSet reconciled and the queue empty", || async {
        Ok(e2e::bench::reconciled_and_idle(&op.metrics().await?, 1.0))
    })
    .await
    .unwrap();
    let cs = e.clonesets.get("web").await.unwrap();
    (op, cs)
}

#[tokio::test]
async fn after_migrate_to_kruise_a_controller_hashing_the_stored_template_keeps_the_revision_and_every_pod() {
    let (e, update) = created_under_this_operator("back").await;
    let pods_before = pod_uids(&e.pods).await;
    assert_eq!(pods_before.len(), REPLICAS as usize);
    let revisions: Api<ControllerRevision> = e.ns.api();
    let update_data = gojson::encode_value(&revisions.get(&update).await.unwrap().data.unwrap().0);
    let before = e.clonesets.get("web").await.unwrap();
    let stored = serde_json::to_value(&before.spec.template).unwrap();
    assert_ne!(revision::revision_data(&stored), update_data, "the template is stored as written, the revision has defaults");

    // While this operator leads, the command refuses and writes nothing.
    let leader = Operator::start_with(
        &e.ns.name,
        OperatorOptions::args(&["--enable-leader-election=true", &format!("--leader-election-namespace={}", e.ns.name)]),
    )
    .await
    .unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = e.ns.api();
    wait_until(T, "this operator holds its Lease", || async {
        Ok(leases
            .get_opt(cloneset_operator::leader::LEASE_NAME)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .is_some_and(|h| !h.is_empty()))
    })
    .await
    .unwrap();
    let refused = migrate_to_kruise(&e.ns.name, &["--lease-timeout=2s"]).await;
    assert!(!refused.status.success(), "ran while the operator leads:\n{}", stdout(&refused));
    assert!(stdout(&refused).contains("this operator still leads"), "{}", stdout(&refused));
    let mut leader = leader;
    leader.stop();

    // A dry run says what it would do and changes nothing.
    let dry = migrate_to_kruise(&e.ns.name, &["--dry-run"]).await;
    assert!(dry.status.success(), "{}", stdout(&dry));
    assert!(
        stdout(&dry).contains(&format!(
            "CloneSet {}/web: would store its template with Kruise's defaults; Kruise's manager keeps update revision {update}",
            e.ns.name
        )),
        "{}",
        stdout(&dry)
    );
    let unchanged = e.clonesets.get("web").await.unwrap();
    assert_eq!(unchanged.resource_version(), before.resource_version(), "the dry run wrote");

    let out = migrate_to_kruise(&e.ns.name, &[]).await;
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("CloneSet {}/web: stored its template with Kruise's defaults", e.ns.name)), "{}", stdout(&out));
    // What Kruise's controller hashes is now the update revision's data, byte for byte.
    let after = e.clonesets.get("web").await.unwrap();
    assert_eq!(revision::revision_data(&serde_json::to_value(&after.spec.template).unwrap()), update_data);
    assert_eq!(after.spec.template.spec.as_ref().unwrap().dns_policy.as_deref(), Some("ClusterFirst"));
    let again = migrate_to_kruise(&e.ns.name, &[]).await;
    assert!(stdout(&again).contains("nothing to change"), "a second run changed something:\n{}", stdout(&again));

    let (op, cs) = kruises_rule_over(&e).await;
    let writes = e2e::bench::Requests::from_metrics(&op.metrics().await.unwrap());
    // The one status write is the new observedGeneration (the spec changed): Kruise writes it too.
    let pod_writes = writes.pod_create + writes.pod_patch + writes.pod_update + writes.pod_delete + writes.pod_status;
    assert_eq!((pod_writes, writes.other_writes), (0.0, 0.0), "the stand-in for Kruise wrote: {writes:?}\n{}", op.log_tail(30));
    assert_eq!(st(&cs).observed_generation, cs.metadata.generation.unwrap());
    assert_eq!(st(&cs).update_revision, update, "a new revision under Kruise's rule");
    assert_eq!(revisions.list(&ListParams::default()).await.unwrap().items.len(), 1);
    assert_eq!(pod_uids(&e.pods).await, pods_before, "a pod was recreated");
}

#[tokio::test]
async fn without_migrate_to_kruise_a_controller_hashing_the_stored_template_makes_a_new_revision() {
    // The control: what the README warned of, and what the command prevents.
    let (e, update) = created_under_this_operator("noback").await;
    let pods_before = pod_uids(&e.pods).await;
    let (op, _) = kruises_rule_over(&e).await;
    let cs = e.wait_status("web", "rolled to a new revision", |cs| rolled_out(cs, REPLICAS) && st(cs).update_revision != update).await;
    assert_ne!(st(&cs).update_revision, update);
    wait_until(T, "every pod recreated", || async {
        let pods_after = pod_uids(&e.pods).await;
        Ok(pods_after.len() == REPLICAS as usize && pods_after.keys().all(|p| !pods_before.contains_key(p)))
    })
    .await
    .unwrap();
    drop(op);
}
