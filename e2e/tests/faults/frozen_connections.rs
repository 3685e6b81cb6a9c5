//! A connection to the apiserver that goes silent (open, but nothing comes back, as behind a stuck
//! load balancer) is noticed and replaced within a minute: the operator acts on a change made
//! while every connection it had was frozen, with leader election off and on, and the process
//! neither exits nor loses its Lease.

use std::time::{Duration, Instant};

use cloneset_operator::api::CloneSet;
use e2e::freezing_proxy::FreezingProxy;
use e2e::testenv::{Operator, OperatorOptions, TestNamespace, cluster_state, install_api, is_leader, kubeconfig, wait_until, watch_until};
use e2e::workload::manifest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The bound this project promises: client-go notices a silent connection after about 45 s.
const NOTICED_WITHIN: Duration = Duration::from_secs(60);
/// How long a run waits anyway, so that a failing one still measures (kube's read timeout, 295 s,
/// is what answers without keep-alive pings).
const WAIT_AT_MOST: Duration = Duration::from_secs(330);

async fn scale_up_behind_a_freeze(prefix: &str, leader_election: bool) {
    install_api().await.unwrap();
    let ns = TestNamespace::create(prefix).await.unwrap();
    let state = cluster_state().await.unwrap();
    let proxy = FreezingProxy::start(([127, 0, 0, 1], state.apiserver_port).into()).await.unwrap();
    let proxied = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
    proxy.kubeconfig(&kubeconfig().await.unwrap(), &proxied).unwrap();
    let args = if leader_election {
        vec!["--enable-leader-election=true".to_string(), format!("--leader-election-namespace={}", ns.name)]
    } else {
        vec![]
    };
    let mut op = Operator::start_with(&ns.name, OperatorOptions { args, cluster: Some(proxied), ..Default::default() }).await.unwrap();

    let clonesets: Api<CloneSet> = ns.api();
    let pods: Api<Pod> = ns.api();
    clonesets.create(&PostParams::default(), &manifest("web", 1, "nginx:1.27", json!({}))).await.unwrap();
    watch_until(&clonesets, "web", Duration::from_secs(120), |cs| cs.status.as_ref().is_some_and(|s| s.replicas == 1))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));
    let leases: Api<Lease> = ns.api();
    let lease = |l: Lease| l.spec.map(|s| (s.holder_identity, s.lease_transitions));
    let lease_before = if leader_election {
        wait_until(Duration::from_secs(60), "the instance to lead", || async { Ok(is_leader(&op.metrics().await?) == Some(1.0)) })
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(30)));
        leases.get(cloneset_operator::leader::LEASE_NAME).await.ok().and_then(lease)
    } else {
        None
    };

    let accepted = proxy.accepted();
    proxy.freeze_open_connections();
    let frozen_at = Instant::now();
    wait_until(Duration::from_secs(10), "the operator's connections to be frozen", || async { Ok(proxy.frozen().await > 0) })
        .await
        .unwrap();
    // Another client, not behind the proxy, scales the CloneSet up.
    clonesets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.unwrap();
    let three = wait_until(WAIT_AT_MOST, "3 pods", || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await?;
        Ok(list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == 3)
    })
    .await;
    let took = frozen_at.elapsed();
    println!(
        "{prefix}: acted {took:.1?} after its connections froze (leader election {}; {} connections frozen, {} opened since)",
        if leader_election { "on" } else { "off" },
        proxy.frozen().await,
        proxy.accepted() - accepted,
    );
    three.unwrap_or_else(|e| panic!("{e:#}\n{}", op.log_tail(40)));
    assert!(op.exited().is_none(), "the operator exited:\n{}", op.log_tail(40));
    assert!(proxy.accepted() > accepted, "the operator opened new connections");
    assert!(took < NOTICED_WITHIN, "acted only {took:?} after the freeze:\n{}", op.log_tail(40));
    if leader_election {
        let lease_after = leases.get(cloneset_operator::leader::LEASE_NAME).await.ok().and_then(lease);
        assert_eq!(lease_after, lease_before, "the same holder, no transition: the Lease was renewed throughout");
        assert_eq!(is_leader(&op.metrics().await.unwrap()), Some(1.0));
    }
}

#[tokio::test]
async fn a_frozen_connection_is_replaced_and_the_operator_acts_within_a_minute() {
    scale_up_behind_a_freeze("frozen", false).await;
}

#[tokio::test]
async fn a_frozen_connection_costs_the_leader_neither_its_lease_nor_its_process() {
    scale_up_behind_a_freeze("frozen-le", true).await;
}
