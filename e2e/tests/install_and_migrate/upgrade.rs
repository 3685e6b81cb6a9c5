//! Upgrading a running installation: the previous release (`e2e/previous-release`, its operator
//! built from its commit and its chart, by `make previous-release`) installed with Helm and
//! managing CloneSets mid-canary, then `helm upgrade` to this checkout's chart and image, and
//! `helm rollback` to the previous release, each as a platform team runs it: a values file, the
//! manager pods on a real node, pulled from the local registry.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloneset_operator::api::CloneSet;
use e2e::chart::{chart_dir, repo_root};
use e2e::helm_release::{
    PreviousRelease, Release, adopt_policy, previous_release, push_operator_image, real_node_values, restore_test_api, this_operator,
    unique,
};
use e2e::testenv::{self, TestNamespace, install_api, wait_until, watch_until};
use e2e::workload::{Disturbances, in_place, manifest, new_image, rolled_out, st, watch_disturbances};
use futures::TryStreamExt as _;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt as _};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

/// The values file a platform team keeps for the release: the installation namespace, the image
/// pinned by its digest (the tag says which release it is), and the manager pods on the real node.
fn values_file(dir: &Path, ns: &str, tag: &str, digest: &str) -> String {
    let values = real_node_values(ns, json!({"tag": tag, "digest": digest}));
    let path = dir.join(format!("values-{tag}.yaml"));
    // JSON is YAML.
    std::fs::write(&path, serde_json::to_string_pretty(&values).unwrap()).unwrap();
    path.display().to_string()
}

/// Every holder the Lease named, in order (`""` when released), from a watch.
fn watch_holders(leases: Api<Lease>) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let holders = Arc::new(Mutex::new(Vec::new()));
    let out = holders.clone();
    let handle = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", cloneset_operator::leader::LEASE_NAME));
        let stream = watcher::watcher(leases, config);
        futures::pin_mut!(stream);
        while let Ok(Some(ev)) = stream.try_next().await {
            let (Event::Apply(l) | Event::InitApply(l)) = ev else { continue };
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            let mut h = out.lock().unwrap();
            if h.last() != Some(&holder) {
                h.push(holder);
            }
        }
    });
    (holders, handle)
}

/// The Lease's holders and the CloneSet pods' disturbances, watched across one change of manager.
struct Watches {
    holders: (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>),
    disturbances: (Arc<Mutex<Disturbances>>, tokio::task::JoinHandle<()>),
}

/// Starts both watches, and returns once the pod watch has listed the pods it compares with.
async fn watch_handover(leases: &Api<Lease>, work_pods: &Api<Pod>) -> Watches {
    let watches = Watches {
        holders: watch_holders(leases.clone()),
        disturbances: watch_disturbances(work_pods.clone(), "app in (inplace,recreate)"),
    };
    wait_until(T, "the pod watch to list the CloneSet pods", || async { Ok(watches.disturbances.0.lock().unwrap().pods().is_some()) })
        .await
        .unwrap();
    watches
}

/// The manager pods of the release that are not terminating.
async fn managers(pods: &Api<Pod>, release: &str) -> Vec<Pod> {
    let list = pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"))).await.unwrap();
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// The pod an identity (`<pod name>_<random>`) belongs to.
fn pod_of(identity: &str) -> &str {
    identity.rsplit_once('_').map_or(identity, |(pod, _)| pod)
}

/// Checks one change of the manager's version (`what`): the manager pods now run `digest`, a new one
/// leads, the Lease went from an old manager to a new one only through a release (never taken
/// over once expired, and never held by two at once), and, once the new leader has reconciled
/// both CloneSets, no CloneSet pod was disturbed.
async fn check_handover(
    what: &str,
    pods: &Api<Pod>,
    release: &str,
    digest: &str,
    before: &BTreeSet<String>,
    Watches { holders: (holders, lease_watch), disturbances: (disturbances, pod_watch) }: Watches,
) {
    let now = managers(pods, release).await;
    for p in &now {
        let image = p.spec.as_ref().unwrap().containers[0].image.clone().unwrap_or_default();
        assert!(image.ends_with(&format!("@{digest}")), "{what}: {} runs {image}, not {digest}", p.name_any());
        assert!(!before.contains(&p.name_any()), "{what}: {} was not replaced", p.name_any());
    }
    let names: BTreeSet<String> = now.iter().map(|p| p.name_any()).collect();
    wait_until(T, &format!("{what}: a new manager pod to lead"), || async {
        Ok(holders.lock().unwrap().last().is_some_and(|h| names.contains(pod_of(h))))
    })
    .await
    .unwrap();
    // What the new leader does first is reconcile every CloneSet: judge once it has, and is idle.
    let leader = holders.lock().unwrap().last().cloned().unwrap_or_default();
    let ip = now.iter().find(|p| p.name_any() == pod_of(&leader)).and_then(|p| p.status.as_ref()?.pod_ip.clone()).unwrap();
    let metrics = format!("{ip}:8080").parse().unwrap();
    wait_until(T, &format!("{what}: the new leader to reconcile both CloneSets and go idle"), || async {
        let (code, text) = testenv::http_get(metrics, "/metrics").await?;
        Ok(code == 200 && e2e::bench::reconciled_and_idle(&text, 2.0))
    })
    .await
    .unwrap();
    lease_watch.abort();
    pod_watch.abort();
    let holders = holders.lock().unwrap().clone();
    println!("{what}: the Lease named, in order: {holders:?}");
    for pair in holders.windows(2) {
        let (from, to) = (&pair[0], &pair[1]);
        assert!(
            from.is_empty() || to.is_empty(),
            "{what}: {to} took the Lease from {from} without its release (after it expired): {holders:?}"
        );
    }
    for h in holders.iter().filter(|h| !h.is_empty()) {
        let pod = pod_of(h);
        assert!(before.contains(pod) || names.contains(pod), "{what}: {h} is no manager pod of the release");
    }
    let d = disturbances.lock().unwrap();
    assert!(d.pods().is_some_and(|p| !p.is_empty()), "{what}: the pod watch never listed the CloneSet pods");
    assert!(d.seen.is_empty(), "{what} disturbed CloneSet pods: {:?}", d.seen);
}

/// The names of the controller revisions in the namespace.
async fn revisions(api: &Api<ControllerRevision>) -> BTreeSet<String> {
    api.list(&ListParams::default()).await.unwrap().items.iter().map(|r| r.name_any()).collect()
}

/// From the previous release, with two CloneSets mid-canary (one updating in place, one by
/// recreating): `helm upgrade` to this checkout with a values file replaces the manager pods,
/// hands the Lease over cleanly, and restarts, recreates or unreadies no CloneSet pod; the new
/// manager keeps every revision (no new hash for the same template) and finishes both canaries.
/// `helm rollback` to the previous release does the same the other way, and the previous manager
/// runs the next canary to its end.
#[tokio::test]
#[ignore = "needs a real node (root: kubelet, containerd, a bridge); make test runs it as root"]
async fn an_upgrade_from_the_previous_release_and_back_restarts_no_pod() {
    let real = e2e::real_node::real_cluster().await.real;
    let previous: PreviousRelease = previous_release().unwrap_or_else(|e| panic!("{e:#}"));
    let client = testenv::client().await.unwrap();
    install_api().await.unwrap();
    let id = unique();
    let (release, ns) = (format!("cso-up-{id}"), format!("e2e-upgrade-{id}"));
    let (old_tag, new_tag) = (format!("{}-{id}", previous.version), format!("e2e-{id}"));
    let old_digest = push_operator_image(&real, &previous.binary, &old_tag);
    let new_digest = push_operator_image(&real, &this_operator(), &new_tag);
    let work_dir = repo_root().join("target/e2e-upgrade").join(&id);
    std::fs::create_dir_all(&work_dir).unwrap();
    let old_values = values_file(&work_dir, &ns, &old_tag, &old_digest);
    let new_values = values_file(&work_dir, &ns, &new_tag, &new_digest);
    let had_policy = adopt_policy(&client, &release, "default").await;

    // The previous release as published: its chart from the registry (oci://), its image by digest.
    let published = e2e::helm_release::push_chart(&previous.chart, real.registry, &work_dir).unwrap();
    let wait = ["--wait", "--timeout", "3m"];
    let from_registry = ["--version", previous.version.as_str(), "--plain-http", "-f", old_values.as_str()];
    let (mut rel, _) = Release::install_chart(Path::new(&published), &release, "default", &[&from_registry[..], &wait[..]].concat()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let first = managers(&pods, &release).await;
    assert_eq!(first.len(), 2, "the previous release runs two manager pods");
    for p in &first {
        let status = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!(status.image_id, format!("docker.io/library/cloneset-operator@{old_digest}"), "the image pinned by digest");
    }
    wait_until(T, "a manager of the previous release to lead", || async {
        let holder = leases.get_opt(cloneset_operator::leader::LEASE_NAME).await?.and_then(|l| l.spec).and_then(|s| s.holder_identity);
        Ok(holder.is_some_and(|h| first.iter().any(|p| p.name_any() == pod_of(&h))))
    })
    .await
    .unwrap();

    // Two CloneSets, each mid-canary under the previous release: 2 of 5 pods updated.
    let work = TestNamespace::create("upgrade-work").await.unwrap();
    let clonesets: Api<CloneSet> = work.api();
    let work_pods: Api<Pod> = work.api();
    let history: Api<ControllerRevision> = work.api();
    let strategies = [("inplace", in_place(json!({"maxUnavailable": 1}))), ("recreate", json!({"updateStrategy": {"type": "ReCreate"}}))];
    for (name, spec) in &strategies {
        clonesets.create(&PostParams::default(), &manifest(name, 5, "nginx:1.27", spec.clone())).await.unwrap();
    }
    let partition = |name: &'static str, image: &'static str, partition: i32| {
        let (clonesets, work_pods) = (clonesets.clone(), work_pods.clone());
        async move {
            let mut spec = new_image(image);
            spec["updateStrategy"] = json!({"partition": partition});
            clonesets.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await.unwrap();
            watch_until(&clonesets, name, T, |c| {
                let s = st(c);
                let observed = s.observed_generation == c.metadata.generation.unwrap_or(0);
                observed
                    && s.replicas == 5
                    && s.updated_replicas == 5 - partition
                    && s.updated_ready_replicas == 5 - partition
                    && s.ready_replicas == 5
            })
            .await
            .unwrap_or_else(|e| panic!("{name} to {image} with partition {partition}: {e:#}"));
            // The step is over once the pods it replaced are gone too.
            wait_until(T, &format!("{name}'s replaced pods to go"), || async {
                Ok(work_pods.list(&ListParams::default().labels(&format!("app={name}"))).await?.items.len() == 5)
            })
            .await
            .unwrap();
        }
    };
    for (name, _) in &strategies {
        watch_until(&clonesets, name, T, |c| rolled_out(c, 5)).await.unwrap();
        partition(name, "nginx:1.28", 3).await;
    }
    let revisions_before = revisions(&history).await;
    let status_before: Vec<_> = {
        let mut v = Vec::new();
        for (name, _) in &strategies {
            let s = st(&clonesets.get(name).await.unwrap());
            v.push((s.current_revision, s.update_revision));
        }
        v
    };

    // `helm upgrade` to this checkout's chart and image, with the values file.
    let before: BTreeSet<String> = first.iter().map(|p| p.name_any()).collect();
    let watches = watch_handover(&leases, &work_pods).await;
    rel.upgrade(&chart_dir(), &[&["-f", new_values.as_str()], &wait[..]].concat()).await;
    check_handover("the upgrade", &pods, &release, &new_digest, &before, watches).await;

    // The new manager keeps the revisions and the status as they were, and finishes both canaries.
    for ((name, _), (current, update)) in strategies.iter().zip(&status_before) {
        let s = st(&clonesets.get(name).await.unwrap());
        assert_eq!((&s.current_revision, &s.update_revision), (current, update), "{name}'s revisions after the upgrade");
        partition(name, "nginx:1.28", 0).await;
    }
    assert_eq!(revisions(&history).await, revisions_before, "the new manager finds each template's revision as the previous one did");

    // `helm rollback` to the previous release: the same, the other way; its manager runs the
    // next canary to its end.
    let upgraded: BTreeSet<String> = managers(&pods, &release).await.iter().map(|p| p.name_any()).collect();
    let watches = watch_handover(&leases, &work_pods).await;
    rel.rollback(1, &wait).await;
    check_handover("the rollback", &pods, &release, &old_digest, &upgraded, watches).await;
    for (name, _) in &strategies {
        partition(name, "nginx:1.29", 3).await;
        partition(name, "nginx:1.29", 0).await;
    }

    rel.uninstall().await;
    drop(work);
    restore_test_api(&client, had_policy).await;
    let _ = std::fs::remove_dir_all(&work_dir);
}
