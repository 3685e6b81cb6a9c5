//! Chaos: the operator keeps a CloneSet's promises through faults. Each test injects one kind of
//! fault in the middle of a scale-up or a rollout and judges a watch of EVERY pod event, not just
//! the end state: never more live pods than `replicas + maxSurge`, never fewer Ready ones than
//! `replicas − maxUnavailable` once the set was Ready, one create per pod that was needed, and
//! convergence without outside help.
//!
//! Run with `--nocapture` to see the numbers (kills, pods watched, worst counts, wall time).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cloneset_operator::api::CloneSet;
use cloneset_operator::api::cloneset::condition;
use e2e::chaos::{DENIAL_MESSAGE, PodLedger, PodWatch, PodWriteDenial, PrivateCluster, kill_interval};
use e2e::testenv::{
    Operator, OperatorOptions, TestNamespace, install_api, install_api_on, is_leader, leader_and_standby, record, wait_until, watch_until,
};
use e2e::workload::{T, manifest, new_image, rolled_out, st};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Pod, ServiceAccount};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

/// How long a simulated container takes to start: long enough that a scale-up or rollout spans
/// several faults, short enough to keep the file within its time budget.
const STARTUP_DELAY: &str = "2s";
/// Slower still where the operator is killed every 2–4 s, so the work spans several kills.
const STARTUP_DELAY_UNDER_KILLS: &str = "6s";

/// `manifest` with pods that take [`STARTUP_DELAY`] to start.
fn slow(name: &str, replicas: i32, image: &str, extra_spec: Value) -> CloneSet {
    starting_in(STARTUP_DELAY, name, replicas, image, extra_spec)
}

/// `manifest` with pods that take `delay` to start.
fn starting_in(delay: &str, name: &str, replicas: i32, image: &str, extra_spec: Value) -> CloneSet {
    let mut spec = json!({"template": {"metadata": {"annotations": {(e2e::nodes::simulated::ANNOTATION_STARTUP_DELAY): delay}}}});
    json_patch::merge(&mut spec, &extra_spec);
    manifest(name, replicas, image, spec)
}

/// A recreate rollout bounded by `maxSurge` and `maxUnavailable`.
fn recreate(max_surge: i32, max_unavailable: i32) -> Value {
    json!({"updateStrategy": {"type": "ReCreate", "maxSurge": max_surge, "maxUnavailable": max_unavailable}})
}

fn observed(cs: &CloneSet) -> bool {
    cs.status.as_ref().is_some_and(|s| s.observed_generation == cs.metadata.generation.unwrap_or(0))
}

/// Converged: the current generation is observed and every replica is updated and Ready.
fn converged(cs: &CloneSet, replicas: i32) -> bool {
    observed(cs) && rolled_out(cs, replicas)
}

async fn active_pods(pods: &Api<Pod>, name: &str) -> Vec<Pod> {
    let list = pods.list(&ListParams::default().labels(&format!("app={name}"))).await.unwrap();
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// The operator's metrics that tell a stalled operator (a reconcile that never returns, keys
/// waiting, requests failing) from one with nothing to do, for a test's failure message.
async fn progress_metrics(op: &Operator) -> String {
    const SHOWN: [&str; 5] = [
        "controller_runtime_reconcile_total",
        "controller_runtime_active_workers",
        "workqueue_depth",
        "workqueue_longest_running_processor_seconds",
        "cloneset_scale_expectation_leakage",
    ];
    match op.metrics().await {
        Ok(text) => {
            let lines = text.lines().filter(|l| SHOWN.iter().any(|m| l.starts_with(m)));
            format!("--- operator metrics ---\n{}", lines.collect::<Vec<_>>().join("\n"))
        }
        Err(e) => format!("--- operator metrics: {e:#}"),
    }
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

fn image(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
}

/// SIGKILLs the operator every 2–4 s (at most `max_kills` times), starting a new one at once,
/// until `done` holds for the CloneSet; then lets the last one finish. Returns the kills done.
async fn kill_until(
    op: &mut Operator,
    ns: &str,
    opts: &OperatorOptions,
    clonesets: &Api<CloneSet>,
    name: &str,
    max_kills: u32,
    done: impl Fn(&CloneSet) -> bool,
) -> u32 {
    let mut kills = 0;
    while kills < max_kills {
        let interval = kill_interval(kills, Duration::from_secs(2), Duration::from_secs(4));
        match tokio::time::timeout(interval, watch_until(clonesets, name, T, |cs| done(cs))).await {
            Ok(res) => {
                res.unwrap_or_else(|e| panic!("{e:#}\n--- operator log ---\n{}", op.log_tail(40)));
                return kills;
            }
            Err(_) => {
                op.kill();
                kills += 1;
                *op = Operator::start_with(ns, opts.clone()).await.unwrap();
            }
        }
    }
    watch_until(clonesets, name, T, |cs| done(cs))
        .await
        .unwrap_or_else(|e| panic!("after {kills} kills: {e:#}\n--- operator log ---\n{}", op.log_tail(60)));
    kills
}

/// The invariants of a recreate rollout of `replicas` pods that started from a Ready set
/// `before` (UIDs): bounded live and Ready counts, every old pod replaced by exactly one create,
/// and no pod name created twice.
fn assert_rollout_invariants(
    what: &str,
    l: &PodLedger,
    before: &BTreeSet<String>,
    replicas: usize,
    max_surge: usize,
    max_unavailable: usize,
) {
    assert!(
        l.max_live <= replicas + max_surge,
        "{what}: {} live pods at once (replicas {replicas} + maxSurge {max_surge}): {}",
        l.max_live,
        l.summary()
    );
    let min_ready = l.min_ready.expect("a complete state was seen");
    assert!(
        min_ready >= replicas - max_unavailable,
        "{what}: only {min_ready} Ready pods at one moment (replicas {replicas} − maxUnavailable {max_unavailable}): {}",
        l.summary()
    );
    let created = l.created_since(before);
    assert_eq!(created.len(), replicas, "{what}: one create per replaced pod, got {}: {}", created.len(), l.summary());
    let twice: Vec<_> = l.creates_per_name().into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(twice.is_empty(), "{what}: pod names created more than once: {twice:?}");
    assert!(before.iter().all(|u| l.deleted.contains(u)), "{what}: every old pod is replaced");
}

fn report(test: &str, started: Instant, faults: &str, l: &PodLedger) {
    let per_name = l.creates_per_name();
    let creates: BTreeMap<usize, usize> = per_name.values().fold(BTreeMap::new(), |mut m, n| {
        *m.entry(*n).or_insert(0) += 1;
        m
    });
    println!("chaos {test}: {faults}; {}; pod names by creates {creates:?}; wall time {:?}", l.summary(), started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// 1. SIGKILL every few seconds

/// A scale-up from 0 to 12, paced by `scaleStrategy.maxUnavailable` (2 starting at a time) so it
/// spans several kills,
/// while the operator is SIGKILLed every 2–4 s: each new instance picks up where the last one
/// stopped, no pod is created twice, none is lost.
#[tokio::test]
async fn a_scale_up_survives_the_operator_being_sigkilled_every_few_seconds() {
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-kill-scale").await.unwrap();
    let opts = OperatorOptions::default();
    let mut op = Operator::start_with(&ns.name, opts.clone()).await.unwrap();
    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    clonesets
        .create(&PostParams::default(), &slow("web", 12, "nginx:1.27", json!({"scaleStrategy": {"maxUnavailable": 2}})))
        .await
        .unwrap();
    let kills = kill_until(&mut op, &ns.name, &opts, &clonesets, "web", 8, |cs| converged(cs, 12)).await;
    let l = watch.stop();
    report("scale-up 0→12", started, &format!("{kills} SIGKILLs"), &l);

    assert!(kills >= 2, "the scale-up ended before the second kill; the test proves nothing: {}", l.summary());
    assert!(l.max_live <= 12, "{} live pods at once for 12 replicas", l.max_live);
    assert!(l.max_unready <= 2, "scaleStrategy.maxUnavailable 2 caps the pods starting at once: {}", l.summary());
    assert!(l.lost_ready.is_empty(), "a scale-up must not take Ready pods away: {:?}", l.lost_ready);
    assert_eq!(l.pods.len(), 12, "exactly one create per replica across {kills} restarts: {}", l.summary());
    assert!(l.deleted.is_empty(), "a scale-up deletes nothing: {}", l.summary());
    assert_eq!(active_pods(&pods, "web").await.len(), 12, "no extra pods");
}

/// A recreate rollout (8 replicas, maxSurge 2, maxUnavailable 2) while the operator is SIGKILLed
/// every 2–4 s: the bounds hold across every restart and each old pod is replaced exactly once.
#[tokio::test]
async fn a_recreate_rollout_survives_the_operator_being_sigkilled_every_few_seconds() {
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-kill-roll").await.unwrap();
    let opts = OperatorOptions::default();
    let mut op = Operator::start_with(&ns.name, opts.clone()).await.unwrap();
    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    clonesets
        .create(&PostParams::default(), &starting_in(STARTUP_DELAY_UNDER_KILLS, "web", 8, "nginx:1.27", recreate(2, 2)))
        .await
        .unwrap();
    watch_until(&clonesets, "web", T, |cs| converged(cs, 8)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    let before = uids(&active_pods(&pods, "web").await);
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    let kills = kill_until(&mut op, &ns.name, &opts, &clonesets, "web", 8, |cs| converged(cs, 8)).await;
    let l = watch.stop();
    report("recreate rollout 8 (surge 2, unavailable 2)", started, &format!("{kills} SIGKILLs"), &l);

    assert!(kills >= 2, "the rollout ended before the second kill; the test proves nothing: {}", l.summary());
    assert_rollout_invariants("rollout under SIGKILLs", &l, &before, 8, 2, 2);
    let after = active_pods(&pods, "web").await;
    assert_eq!(after.len(), 8, "no extra pods");
    assert!(after.iter().all(|p| image(p) == "nginx:1.28"), "every pod runs the new image");
}

// ---------------------------------------------------------------------------------------------
// 2. The apiserver restarts mid-rollout

/// The kube-apiserver of a private control plane is stopped and started again in the middle of
/// a rollout: the same operator process reconnects, its watches resume, and the rollout finishes
/// within the same bounds. Then once more, with a change made while the operator relists.
#[tokio::test]
async fn a_rollout_finishes_after_the_apiserver_restarts_mid_way() {
    let started = Instant::now();
    // Its own control plane: restarting the shared one would break the tests running beside it.
    let cluster = PrivateCluster::up("chaos-apiserver-cluster").await.unwrap();
    let client = cluster.client().await.unwrap();
    install_api_on(&client).await.unwrap();
    let ns = "chaos-apiserver";
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    wait_until(Duration::from_secs(60), "the default ServiceAccount", || async { Ok(sas.get_opt("default").await?.is_some()) })
        .await
        .unwrap();

    let opts = OperatorOptions { cluster: Some(cluster.state.kubeconfig.clone()), ..Default::default() };
    let mut op = Operator::start_with(ns, opts).await.unwrap();
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    clonesets.create(&PostParams::default(), &slow("web", 8, "nginx:1.27", recreate(2, 2))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| converged(cs, 8)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    let before = uids(&active_pods(&pods, "web").await);
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    let mid = watch_until(&clonesets, "web", T, |cs| observed(cs) && st(cs).updated_replicas >= 2).await.unwrap();
    let updated_at_restart = st(&mid).updated_ready_replicas;
    let outage = cluster.restart_apiserver().await.unwrap();
    let restarted = Instant::now();

    let cs = match watch_until(&clonesets, "web", T, |cs| converged(cs, 8)).await {
        Ok(cs) => cs,
        Err(e) => panic!(
            "rollout after the apiserver restart: {e:#}\n{}\n{}\n--- operator log ---\n{}\n{}",
            progress_metrics(&op).await,
            cluster.state_in(&client, ns).await,
            op.log_tail(60),
            cluster.log_tails()
        ),
    };
    let finished_after = restarted.elapsed();
    let l = watch.stop();
    report(
        "apiserver restart mid-rollout",
        started,
        &format!(
            "1 apiserver restart ({outage:?} from stop to ready) with {updated_at_restart}/8 updated and Ready; finished {finished_after:?} after"
        ),
        &l,
    );

    assert!(updated_at_restart < 8, "the restart came after the rollout had finished");
    assert_eq!(op.exited(), None, "the operator rode out the outage without exiting:\n{}", op.log_tail(30));
    assert_rollout_invariants("rollout across an apiserver restart", &l, &before, 8, 2, 2);
    assert_eq!(st(&cs).update_revision, st(&cs).current_revision);
    let after = active_pods(&pods, "web").await;
    assert_eq!(after.len(), 8, "no extra pods");
    assert!(after.iter().all(|p| image(p) == "nginx:1.28"), "every pod runs the new image");

    // Changed while the operator relists: it reconnects with backoff after the apiserver is back,
    // so a change made at once arrives in its relist, not as a watch event. It must still be
    // acted on (it was not, before relisted objects were passed on only once stored).
    cluster.restart_apiserver().await.unwrap();
    let change = json!({"spec": {"replicas": 10, "template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}});
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(change)).await.unwrap();
    if let Err(e) = watch_until(&clonesets, "web", T, |cs| converged(cs, 10)).await {
        panic!(
            "a change made during the relist: {e:#}\n{}\n{}\n--- operator log ---\n{}\n{}",
            progress_metrics(&op).await,
            cluster.state_in(&client, ns).await,
            op.log_tail(60),
            cluster.log_tails()
        );
    }
    assert_eq!(op.exited(), None);
    let after = active_pods(&pods, "web").await;
    assert_eq!(after.len(), 10, "no extra pods");
    assert!(after.iter().all(|p| image(p) == "nginx:1.27"), "every pod runs the image set during the relist");
    drop(op);
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// 3. Writes are denied for a while

/// Pod updates are denied by an admission policy when a recreate rollout starts: no Ready pod is
/// taken away, the CloneSet's FailedUpdate condition and a Warning event say why, and once the
/// denial is lifted the rollout finishes with no edit to the CloneSet (the operator must retry
/// failed writes with backoff on its own).
#[tokio::test]
async fn a_rollout_waits_out_denied_pod_writes_and_finishes_on_its_own() {
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-deny").await.unwrap();
    let op = Operator::start(&ns.name, &[]).await.unwrap();
    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    clonesets.create(&PostParams::default(), &slow("web", 6, "nginx:1.27", recreate(0, 2))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| converged(cs, 6)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    let first = active_pods(&pods, "web").await;
    let before = uids(&first);
    let probe = first[0].name_any();
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    let kubeconfig = e2e::testenv::kubeconfig().await.unwrap();
    let denial = PodWriteDenial::install(&kubeconfig, &ns.name, &probe).await.unwrap();
    let denied_at = Instant::now();
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    let cs = watch_until(&clonesets, "web", T, |cs| {
        observed(cs)
            && st(cs)
                .conditions
                .iter()
                .any(|c| c.type_ == condition::FAILED_UPDATE && c.status == "True" && c.message.contains(DENIAL_MESSAGE))
    })
    .await
    .unwrap_or_else(|e| panic!("a FailedUpdate condition naming the denial: {e:#}\n{}", op.log_tail(40)));
    let failed_update = st(&cs).conditions.into_iter().find(|c| c.type_ == condition::FAILED_UPDATE).unwrap().message;
    let events: Api<CoreEvent> = ns.api();
    let warning = std::cell::RefCell::new(String::new());
    // Judged at the end, so that one run shows both this and whether the rollout converges.
    let warning_seen = wait_until(Duration::from_secs(15), "a Warning event naming the denial", || async {
        let list = events.list(&ListParams::default().fields("involvedObject.name=web,type=Warning")).await?;
        if let Some(e) = list.items.iter().find(|e| e.message.as_deref().unwrap_or_default().contains(DENIAL_MESSAGE)) {
            *warning.borrow_mut() = format!("{}: {}", e.reason.clone().unwrap_or_default(), e.message.clone().unwrap_or_default());
        }
        Ok(!warning.borrow().is_empty())
    })
    .await;
    let warning = warning.into_inner();
    let during = watch.snapshot();
    denial.lift(&ns.name, &probe).await.unwrap();
    let denied_for = denied_at.elapsed();
    let lifted = Instant::now();
    let generation = cs.metadata.generation;

    // No nudge: nothing touches the CloneSet from here on. A retry with backoff comes within
    // seconds of the lift (the denial lasted only a few), so 90 s is ample.
    let converged_alone = watch_until(&clonesets, "web", Duration::from_secs(90), |cs| converged(cs, 6)).await;
    let l = watch.stop();
    report(
        "pod writes denied mid-rollout",
        started,
        &format!(
            "denied for {denied_for:?} (Ready pods then: {}); converged after lifting: {}; FailedUpdate {failed_update:?}; warning {warning:?}",
            during.min_ready.unwrap_or(0),
            if converged_alone.is_ok() { format!("yes, {:?} after", lifted.elapsed()) } else { "no".into() },
        ),
        &l,
    );

    let mut failures = Vec::new();
    if let Err(e) = &warning_seen {
        failures.push(format!(
            "no Warning event says why: {e:#} (events the apiserver refused are in the operator log as `could not publish event`)"
        ));
    }
    if let Err(e) = &converged_alone {
        failures.push(format!(
            "the rollout did not finish on its own after the denial was lifted (failed writes must be retried with backoff): {e:#}"
        ));
    }
    assert!(failures.is_empty(), "{}\n--- operator log ---\n{}", failures.join("\n"), op.log_tail(30));
    let cs = converged_alone.unwrap();
    assert!(during.lost_ready.is_empty(), "Ready pods were taken away while writes were denied: {:?}", during.lost_ready);
    assert_eq!(during.min_ready, Some(6), "every pod stays Ready while writes are denied: {}", during.summary());
    assert!(
        during.created_since(&before).is_empty() && during.deleted.is_empty(),
        "no pod changes while writes are denied: {}",
        during.summary()
    );
    assert_eq!(cs.metadata.generation, generation, "nobody edited the CloneSet after the denial was lifted");
    assert_rollout_invariants("rollout after denied writes", &l, &before, 6, 0, 2);
}

// ---------------------------------------------------------------------------------------------
// 4. A standby takes over from a SIGKILLed leader

/// Two instances with leader election; the leader is SIGKILLed in the middle of a recreate
/// rollout. The standby takes the Lease once it expires (15 s without renewal, seen within a
/// retry period of 2–2.4 s) and finishes the rollout, within the bounds of (1).
#[tokio::test]
async fn a_standby_takes_over_a_rollout_from_a_sigkilled_leader_within_the_bounds() {
    use cloneset_operator::leader::LEASE_NAME;
    use k8s_openapi::api::coordination::v1::Lease;
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-leader").await.unwrap();
    let (mut a, b) = leader_and_standby(&ns.name).await.unwrap();
    wait_until(Duration::from_secs(60), "the standby to stand by", || async {
        Ok(std::fs::read_to_string(&b.log)?.contains("standing by"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", b.log_tail(20)));

    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    clonesets.create(&PostParams::default(), &slow("web", 8, "nginx:1.27", recreate(2, 2))).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| converged(cs, 8)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", a.log_tail(40)));
    let before = uids(&active_pods(&pods, "web").await);
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();
    let leases: Api<Lease> = ns.api();
    let holder = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    let first_holder = holder(&leases.get(LEASE_NAME).await.unwrap());
    // Each version of the Lease the test saw, with its renewTime (written by the leader's clock,
    // the same machine's): the old leader's last renewal is among them. The renewTime, not when
    // the test happened to see a version, since a loaded machine can deliver a watch event late.
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let (lease_log, lease_task) = record(&leases, LEASE_NAME, move |l: &Lease| (renewed(l), holder(l))).await.unwrap();

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    let mid = watch_until(&clonesets, "web", T, |cs| observed(cs) && st(cs).updated_replicas >= 2).await.unwrap();
    a.kill();
    let killed = Instant::now();
    let taken = watch_until(&leases, LEASE_NAME, Duration::from_secs(60), |l| !holder(l).is_empty() && holder(l) != first_holder)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", b.log_tail(20)));
    let took_over = Instant::now();
    let took_over_wall = k8s_openapi::jiff::Timestamp::now();
    lease_task.abort();
    let last_renewal = lease_log.lock().unwrap().iter().filter(|(_, h)| *h == first_holder).filter_map(|(t, _)| *t).max().unwrap();
    wait_until(Duration::from_secs(10), "the standby to report leading", || async { Ok(is_leader(&b.metrics().await?) == Some(1.0)) })
        .await
        .unwrap();

    watch_until(&clonesets, "web", T, |cs| converged(cs, 8))
        .await
        .unwrap_or_else(|e| panic!("rollout after take-over: {e:#}\n{}", b.log_tail(40)));
    let l = watch.stop();
    let since_renewal = Duration::try_from(took_over_wall.duration_since(last_renewal)).unwrap_or_default();
    let since_kill = took_over - killed;
    report(
        "leader SIGKILLed mid-rollout",
        started,
        &format!(
            "1 SIGKILL with {}/8 updated; Lease taken {since_kill:?} after the kill, {since_renewal:?} after the last renewal seen",
            st(&mid).updated_replicas
        ),
        &l,
    );

    assert_ne!(holder(&taken), first_holder);
    // The standby starts the 15 s expiry clock when it first sees the last renewal (it reads
    // every 2–2.4 s) and takes the Lease at its next read after expiry.
    let (lease, retry) = (Duration::from_secs(15), Duration::from_millis(2400));
    assert!(since_renewal >= lease - Duration::from_millis(500), "taken before the Lease expired: {since_renewal:?}");
    assert!(since_renewal <= lease + 2 * retry + Duration::from_secs(2), "take-over too slow: {since_renewal:?} after the last renewal");
    assert_rollout_invariants("rollout across a leader hand-over", &l, &before, 8, 2, 2);
    assert_eq!(active_pods(&pods, "web").await.len(), 8, "no extra pods");
}

// ---------------------------------------------------------------------------------------------
// 5. Another writer edits the same pods

/// While an in-place rollout runs, another client adds labels and annotations to the same pods
/// in a tight loop (read, modify, update with the read resourceVersion; conflicts retried): no
/// edit is lost on either side, and the rollout converges.
#[tokio::test]
async fn an_in_place_rollout_and_another_writer_lose_no_updates() {
    const MAX_WRITES: usize = 400;
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-writer").await.unwrap();
    let op = Operator::start(&ns.name, &[]).await.unwrap();
    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    let in_place = json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 2}});
    clonesets.create(&PostParams::default(), &slow("web", 6, "nginx:1.27", in_place)).await.unwrap();
    watch_until(&clonesets, "web", T, |cs| converged(cs, 6)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    let first = active_pods(&pods, "web").await;
    let before = uids(&first);
    let names: Vec<String> = first.iter().map(|p| p.name_any()).collect();
    let watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    // The other writer edits until the rollout has converged (or its budget is spent).
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (pods, stop) = (pods.clone(), stop.clone());
        tokio::spawn(async move {
            // (pod UID, key) of every edit that was accepted, and the conflicts retried.
            let mut written: Vec<(String, String)> = Vec::new();
            let mut conflicts = 0usize;
            for i in 0..MAX_WRITES {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let name = &names[i % names.len()];
                let key = format!("chaos.e2e/edit-{i}");
                loop {
                    let mut pod = pods.get(name).await.unwrap();
                    pod.labels_mut().insert(key.clone(), "kept".into());
                    pod.annotations_mut().insert(key.clone(), format!("edit {i}"));
                    match pods.replace(name, &PostParams::default(), &pod).await {
                        Ok(p) => {
                            written.push((p.uid().unwrap(), key));
                            break;
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => conflicts += 1,
                        Err(e) => panic!("writing {name}: {e}"),
                    }
                }
            }
            (written, conflicts)
        })
    };
    let cs = watch_until(&clonesets, "web", T, |cs| converged(cs, 6)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    stop.store(true, Ordering::Relaxed);
    let (written, conflicts) = writer.await.unwrap();
    let l = watch.stop();
    report(
        "another writer during an in-place rollout",
        started,
        &format!("{} edits by the other writer during the rollout ({conflicts} conflicts retried)", written.len()),
        &l,
    );

    assert!(written.len() >= 12, "the other writer barely overlapped the rollout: {} edits", written.len());
    assert!(l.max_live <= 6, "an in-place rollout adds no pods: {}", l.summary());
    assert!(l.min_ready.unwrap_or(0) >= 4, "at most maxUnavailable (2) pods not Ready at once: {}", l.summary());
    assert!(l.created_since(&before).is_empty(), "an in-place rollout recreates no pod: {}", l.summary());
    let now = active_pods(&pods, "web").await;
    assert_eq!(uids(&now), before, "the same pods, updated in place");
    let mut lost = Vec::new();
    for p in &now {
        let uid = p.uid().unwrap();
        for (_, key) in written.iter().filter(|(u, _)| *u == uid) {
            if p.labels().get(key).map(String::as_str) != Some("kept") || !p.annotations().contains_key(key) {
                lost.push(format!("{}:{key}", p.name_any()));
            }
        }
    }
    assert!(lost.is_empty(), "edits of the other writer lost: {lost:?}");
    assert!(now.iter().all(|p| image(p) == "nginx:1.28"), "every pod runs the new image");
    assert_eq!(st(&cs).update_revision, st(&cs).current_revision);
}

// ---------------------------------------------------------------------------------------------
// 6. The pod cache loses watch events

/// Whether `name` has exactly `replicas` live pods, all Ready and running `image` (read from the
/// apiserver, not from the operator's possibly stale status).
async fn ready_on(pods: &Api<Pod>, name: &str, replicas: usize, image_: &str) -> bool {
    let live = active_pods(pods, name).await;
    live.len() == replicas && live.iter().all(|p| image(p) == image_ && e2e::chaos::is_ready(p))
}

/// Restarts the operator without losing events (its caches list afresh) and waits for the
/// CloneSet's status to report `replicas` updated and Ready.
async fn relist(op: &mut Operator, ns: &str, clonesets: &Api<CloneSet>, replicas: i32) {
    op.stop();
    *op = Operator::start_with(ns, OperatorOptions::default()).await.unwrap();
    watch_until(clonesets, "web", T, |cs| converged(cs, replicas)).await.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
}

/// The operator's pod cache loses a fifth of the pod events it is sent (its ADDs, updates and
/// deletes) through a scale-up 0 → 12 and a recreate rollout (maxSurge 2, maxUnavailable 2).
/// Its cache and owner index are then stale: pods it created and has not seen, pods it deleted
/// and still holds, Ready pods it thinks are starting. Stale, it must wait rather than guess: no
/// pod is created twice, no bound is crossed. A restart (a fresh list) heals what no later event
/// did; then the rollout runs with events lost again, and another restart heals it.
#[tokio::test]
async fn lost_pod_events_never_make_the_operator_create_a_pod_twice() {
    let started = Instant::now();
    install_api().await.unwrap();
    let ns = TestNamespace::create("chaos-lost-events").await.unwrap();
    let lossy = OperatorOptions { args: vec!["--fault-drop-pod-events=0.2".into()], ..Default::default() };
    let mut op = Operator::start_with(&ns.name, lossy.clone()).await.unwrap();
    let (clonesets, pods): (Api<CloneSet>, Api<Pod>) = (ns.api(), ns.api());
    let scale_watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();
    let created = |w: &PodWatch| w.ledger.lock().unwrap_or_else(|e| e.into_inner()).pods.len();
    let drops = |op: &Operator| op.log_tail(100_000).matches("fault injection: dropped a watch event").count();
    clonesets.create(&PostParams::default(), &slow("web", 12, "nginx:1.27", recreate(2, 2))).await.unwrap();
    // Pods Ready as the apiserver has them; the operator's own status may lag what it lost.
    let _ = wait_until(Duration::from_secs(60), "12 Ready pods", || async { Ok(ready_on(&pods, "web", 12, "nginx:1.27").await) }).await;
    let mut dropped = drops(&op);
    let created_lossy = created(&scale_watch);
    relist(&mut op, &ns.name, &clonesets, 12).await;
    let scale_up = scale_watch.stop();
    let before = uids(&active_pods(&pods, "web").await);
    let roll_watch = PodWatch::start(pods.clone(), "app=web").await.unwrap();

    op.stop();
    op = Operator::start_with(&ns.name, lossy).await.unwrap();
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": new_image("nginx:1.28")}))).await.unwrap();
    let _ = wait_until(Duration::from_secs(60), "12 Ready pods on the new image", || async {
        Ok(ready_on(&pods, "web", 12, "nginx:1.28").await)
    })
    .await;
    dropped += drops(&op);
    let replaced_lossy = created(&roll_watch) - 12;
    relist(&mut op, &ns.name, &clonesets, 12).await;
    let l = roll_watch.stop();
    let faults = format!(
        "{dropped} events dropped; the lossy operator made {created_lossy} of 12 creates, then {replaced_lossy} of 12 replacements"
    );
    report("scale-up 0→12 and recreate rollout, a fifth of pod events lost", started, &faults, &l);

    assert!(dropped >= 10, "only {dropped} events dropped; the test proves nothing: {}", l.summary());
    assert_eq!(created_lossy, 12, "the scale-up's one pass creates every pod, whatever it loses after");
    assert!(replaced_lossy >= 2, "the lossy operator replaced only {replaced_lossy} pods; the test proves little");
    assert_eq!(scale_up.pods.len(), 12, "one create per replica: {}", scale_up.summary());
    assert!(scale_up.max_live <= 12 && scale_up.deleted.is_empty(), "{}", scale_up.summary());
    assert_eq!(before.len(), 12);
    assert_rollout_invariants("rollout with lost events", &l, &before, 12, 2, 2);
    assert!(ready_on(&pods, "web", 12, "nginx:1.28").await, "every pod runs the new image");
}
