//! The GCS client against a real Ray 2.60 head (`RAYSCALE_PYTHON` must name a venv's
//! python with Ray installed; without it these tests panic, they never skip).
//!
//! Covered: GetClusterResourceState decodes and converts (our protos are wire-compatible
//! with a live GCS); KV put/get/keys/del; RequestClusterResourceConstraint shows up in the
//! state; ReportAutoscalingState comes back in GetClusterStatus; DrainNode and
//! ResizeRayletResourceInstances of unknown nodes; the instance table in the KV; a client
//! surviving a GCS restart; and a wrong address failing quickly on one line.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rayscale_core::driver::{KvTable, Lease, LeaseSettings, NAMESPACE};
use rayscale_core::instance::Instance;
use rayscale_core::model::instance::InstanceStatus;
use rayscale_core::model::resources::to_f64;
use rayscale_gcs_client::GcsError;
use rayscale_gcs_client::client::{ClientOptions, GcsClient, NODE_ID_LEN};
use rayscale_gcs_client::proto::ray::rpc::autoscaler as pb;
use rayscale_tests::ray_head::{RayHead, contains_token, free_ports, is_head_node};

fn quick() -> ClientOptions {
    ClientOptions {
        deadline: Duration::from_secs(2),
        backoff_base: Duration::from_millis(50),
        backoff_cap: Duration::from_millis(200),
        max_attempts: 3,
        seed: 7,
    }
}

fn bundle(pairs: &[(&str, f64)]) -> pb::ResourceRequest {
    pb::ResourceRequest {
        resources_bundle: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..Default::default()
    }
}

fn by_count(pairs: &[(&str, f64)], count: i64) -> pb::ResourceRequestByCount {
    pb::ResourceRequestByCount {
        request: Some(bundle(pairs)),
        count,
    }
}

fn assert_one_line(e: &GcsError) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "not one line: {text:?}");
    text
}

/// (a) The live state decodes with our protos and converts into core's model; (e) DrainNode
/// and ResizeRayletResourceInstances of a node the GCS does not know; ReportClusterConfig.
#[tokio::test]
async fn state_decodes_converts_and_unknown_nodes() {
    let head = RayHead::start();
    eprintln!(
        "ray start --head took {:?}, head node visible after {:?}",
        head.last_ray_start_duration(),
        head.last_start_duration()
    );
    let client = head.client(ClientOptions::default());

    // Right after start a head may report RUNNING for a moment (Ray's own start-up
    // work) before it settles IDLE: read until it is idle, for a bounded time.
    let mut raw = client.get_cluster_resource_state(0).await.expect("state");
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(30)
        && !raw
            .node_states
            .iter()
            .any(|n| is_head_node(n) && n.status == pb::NodeStatus::Idle as i32)
    {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        raw = client.get_cluster_resource_state(0).await.expect("state");
    }
    assert!(raw.cluster_resource_state_version > 0, "{raw:?}");
    assert!(raw.cluster_session_name.starts_with("session_"), "{raw:?}");
    let heads: Vec<_> = raw.node_states.iter().filter(|n| is_head_node(n)).collect();
    assert_eq!(heads.len(), 1, "{raw:?}");
    let h = heads[0];
    assert_eq!(h.node_id.len(), NODE_ID_LEN);
    // `--num-cpus=0`: no CPU; an idle head.
    assert!(!h.total_resources.contains_key("CPU"), "{h:?}");
    assert!(h.total_resources.contains_key("memory"), "{h:?}");
    assert_eq!(h.status, pb::NodeStatus::Idle as i32, "{h:?}");
    assert!(!h.node_ip_address.is_empty());

    let core = client
        .get_cluster_resource_state_core()
        .await
        .expect("core state");
    let core_head = core
        .node_states
        .iter()
        .find(|n| n.total_resources.get("node:__internal_head__").is_some())
        .expect("head in core state");
    assert_eq!(core_head.node_id, h.node_id);
    assert_eq!(
        core_head
            .total_resources
            .get("node:__internal_head__")
            .map(to_f64),
        Some(1.0)
    );

    // A node id the GCS never saw: Ray 2.60 accepts the drain (treats it as gone).
    let unknown = [0xAB_u8; NODE_ID_LEN];
    let reply = client
        .drain_node(
            &unknown,
            pb::DrainNodeReason::IdleTermination,
            "rayscale test",
            0,
        )
        .await
        .expect("drain of an unknown node");
    assert!(reply.is_accepted, "{reply:?}");
    assert!(reply.rejection_reason_message.is_empty(), "{reply:?}");

    // A negative deadline: Ray answers ABORTED "Invalid" with the reason in the details;
    // not retried.
    let e = client
        .drain_node(&unknown, pb::DrainNodeReason::Preemption, "x", -1)
        .await
        .expect_err("negative deadline");
    let text = assert_one_line(&e);
    match &e {
        GcsError::Rpc {
            method,
            code,
            message,
            retryable,
            attempts,
            ..
        } => {
            assert_eq!(*method, "DrainNode");
            assert_eq!(code, "Aborted");
            assert!(message.starts_with("Invalid: "), "{message}");
            assert!(message.contains("non-negative"), "{message}");
            assert!(!retryable);
            assert_eq!(*attempts, 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(text.contains(&head.addr()), "{text}");

    // Resizing an unknown raylet: ABORTED "NotFound", not retried.
    let e = client
        .resize_raylet_resource_instances(&unknown, BTreeMap::from([("CPU".to_string(), 1.0)]))
        .await
        .expect_err("resize of an unknown node");
    assert_one_line(&e);
    assert!(
        matches!(&e, GcsError::Rpc { code, message, retryable: false, attempts: 1, .. }
            if code == "Aborted" && message.starts_with("NotFound") && message.contains("not alive")),
        "{e}"
    );

    client
        .report_cluster_config(pb::ClusterConfig {
            min_resources: BTreeMap::from([("CPU".to_string(), 0)]),
            max_resources: BTreeMap::from([("CPU".to_string(), 8)]),
            node_group_configs: vec![pb::NodeGroupConfig {
                resources: BTreeMap::from([("CPU".to_string(), 2)]),
                min_count: 0,
                max_count: 4,
                name: "cpu2".into(),
            }],
        })
        .await
        .expect("ReportClusterConfig");

    // The head itself survived all of this.
    let again = client.get_cluster_resource_state(0).await.expect("state");
    assert!(again.node_states.iter().any(is_head_node));
    assert!(again.cluster_resource_state_version >= raw.cluster_resource_state_version);
}

/// (b) KV round trip in a namespace; (f) the instance table in the KV.
#[tokio::test]
async fn kv_round_trip_and_instance_store() {
    let head = RayHead::start();
    let client = head.client(ClientOptions::default());
    let ns = "rayscale_test";

    assert_eq!(client.kv_get(ns, b"a/1").await.expect("get missing"), None);
    assert!(client.kv_put(ns, b"a/1", b"one", false).await.expect("put"));
    assert!(client.kv_put(ns, b"a/2", b"two", true).await.expect("put"));
    assert!(
        client
            .kv_put(ns, b"b/1", b"\0\xffbin", true)
            .await
            .expect("put")
    );
    // Without overwrite an existing value stays; with it, it is replaced. Both say
    // "not added".
    assert!(!client.kv_put(ns, b"a/1", b"uno", false).await.expect("put"));
    assert_eq!(
        client.kv_get(ns, b"a/1").await.expect("get").as_deref(),
        Some(&b"one"[..])
    );
    assert!(!client.kv_put(ns, b"a/1", b"uno", true).await.expect("put"));
    assert_eq!(
        client.kv_get(ns, b"a/1").await.expect("get").as_deref(),
        Some(&b"uno"[..])
    );
    assert_eq!(
        client.kv_get(ns, b"b/1").await.expect("get").as_deref(),
        Some(&b"\0\xffbin"[..])
    );
    // Namespaces are separate.
    assert_eq!(client.kv_get("other", b"a/1").await.expect("get"), None);

    let mut keys = client.kv_keys(ns, b"a/").await.expect("keys");
    keys.sort();
    assert_eq!(keys, [b"a/1".to_vec(), b"a/2".to_vec()]);
    assert_eq!(client.kv_keys(ns, b"").await.expect("keys").len(), 3);

    assert_eq!(client.kv_del(ns, b"nope", false).await.expect("del"), 0);
    assert_eq!(client.kv_del(ns, b"a/", true).await.expect("del"), 2);
    assert_eq!(client.kv_get(ns, b"a/2").await.expect("get"), None);
    assert_eq!(client.kv_del(ns, b"b/1", false).await.expect("del"), 1);
    assert!(client.kv_keys(ns, b"").await.expect("keys").is_empty());

    // (f) The instance table, one key per record, and the lease, on a real GCS.
    let mut store = KvTable::new("live-test");
    let loaded = store.load(&client, 1).await.expect("load empty");
    assert!(!loaded.found && loaded.instances.is_empty());
    let mut a = Instance::new("im-1", "cpu2", InstanceStatus::Queued, 1_000, "queued");
    a.launch_request_id = "lr-1".into();
    let mut b = Instance::new("im-2", "gpu", InstanceStatus::Requested, 2_000, "requested");
    b.cloud_instance_id = Some("i-abc".into());
    b.last_error = Some("quota".into());
    let stats = store
        .save(&client, 3, &[a.clone(), b.clone()], 1)
        .await
        .expect("save");
    assert_eq!(stats.written, 2);
    let loaded = KvTable::new("live-test")
        .load(&client, 1)
        .await
        .expect("load");
    assert_eq!(
        (loaded.version, loaded.instances),
        (3, vec![a.clone(), b.clone()])
    );
    // Only what changed is written; a record gone is deleted.
    b.version += 1;
    let stats = store
        .save(&client, 4, std::slice::from_ref(&b), 1)
        .await
        .expect("save");
    assert_eq!((stats.written, stats.deleted), (1, 1));
    let loaded = KvTable::new("live-test")
        .load(&client, 1)
        .await
        .expect("load");
    assert_eq!((loaded.version, loaded.instances), (4, vec![b.clone()]));
    // A writer of a lower epoch writes into its own space, which the holder of a higher
    // epoch never reads: the table stands.
    KvTable::new("live-test")
        .save(&client, 5, &[a.clone()], 0)
        .await
        .expect("a stale save lands in its own space");
    let loaded = KvTable::new("live-test")
        .load(&client, 1)
        .await
        .expect("load");
    assert_eq!((loaded.version, loaded.instances), (4, vec![b.clone()]));
    // Another cluster's table is other keys.
    assert!(
        !KvTable::new("other")
            .load(&client, 1)
            .await
            .expect("load")
            .found
    );
    // Garbage in a record: that record is left out, named, and the rest loads.
    client
        .kv_put(
            NAMESPACE,
            b"records/live-test/00000000000000000001/im-9",
            b"\x00not json{",
            true,
        )
        .await
        .expect("put garbage");
    let loaded = KvTable::new("live-test")
        .load(&client, 1)
        .await
        .expect("load");
    assert_eq!(loaded.instances, vec![b.clone()]);
    assert_eq!(loaded.skipped.len(), 1);
    assert!(
        loaded.skipped[0].contains("__rayscale/records/live-test/00000000000000000001/im-9"),
        "{:?}",
        loaded.skipped
    );
    assert_eq!(store.delete(&client).await.expect("delete"), 1);
    assert!(
        !KvTable::new("live-test")
            .load(&client, 1)
            .await
            .expect("load")
            .found
    );
    // The lease: the GCS's put-if-absent lets exactly one of two processes take it.
    let mut one = Lease::new(NAMESPACE, "live-test", "one", LeaseSettings::default());
    let mut two = Lease::new(NAMESPACE, "live-test", "two", LeaseSettings::default());
    assert_eq!(one.tick(&client).await.expect("tick").epoch, Some(1));
    assert_eq!(two.tick(&client).await.expect("tick").epoch, None);
    one.release(&client).await.expect("release");
    assert_eq!(two.tick(&client).await.expect("tick").epoch, Some(2));
}

/// (c) A resource constraint shows in the state; (d) a reported autoscaling state comes
/// back in GetClusterStatus.
#[tokio::test]
async fn constraints_and_autoscaling_state() {
    let head = RayHead::start();
    let client = head.client(ClientOptions::default());

    let before = client.get_cluster_resource_state(0).await.expect("state");
    assert!(before.cluster_resource_constraints.is_empty(), "{before:?}");

    client
        .request_cluster_resource_constraint(pb::ClusterResourceConstraint {
            resource_requests: vec![by_count(&[("CPU", 1.0)], 3)],
        })
        .await
        .expect("constraint 1");
    let c2 = pb::ClusterResourceConstraint {
        resource_requests: vec![
            by_count(&[("CPU", 2.0)], 4),
            by_count(&[("CPU", 4.0), ("GPU", 1.0)], 1),
        ],
    };
    client
        .request_cluster_resource_constraint(c2.clone())
        .await
        .expect("constraint 2");
    let state = client.get_cluster_resource_state(0).await.expect("state");
    // The latest constraint replaces the earlier one.
    assert_eq!(state.cluster_resource_constraints.len(), 1, "{state:?}");
    let got = &state.cluster_resource_constraints[0];
    let shape = |r: &pb::ResourceRequestByCount| {
        let req = r.request.as_ref().expect("request");
        (req.resources_bundle.clone(), r.count)
    };
    let mut got_shapes: Vec<_> = got.resource_requests.iter().map(shape).collect();
    let mut want: Vec<_> = c2.resource_requests.iter().map(shape).collect();
    got_shapes.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(got_shapes, want);
    let core = client
        .get_cluster_resource_state_core()
        .await
        .expect("core state");
    assert_eq!(core.cluster_resource_constraints.len(), 1);
    let total: u64 = core.cluster_resource_constraints[0]
        .resource_requests
        .iter()
        .map(|r| r.count)
        .sum();
    assert_eq!(total, 5);

    // (d) Report an autoscaling state with a pending launch and an infeasible request.
    // Before any report the GCS has no autoscaling state at all.
    let status0 = client.get_cluster_status().await.expect("status");
    assert_eq!(status0.autoscaling_state, None);
    assert!(status0.cluster_resource_state.is_some());
    let reported = pb::AutoscalingState {
        last_seen_cluster_resource_state_version: state.cluster_resource_state_version,
        autoscaler_state_version: 1,
        pending_instance_requests: vec![pb::PendingInstanceRequest {
            instance_type_name: "m5.large".into(),
            ray_node_type_name: "cpu2".into(),
            count: 2,
            request_ts: 1_700_000_000,
        }],
        infeasible_resource_requests: vec![bundle(&[("TPU", 8.0)])],
        pending_instances: vec![pb::PendingInstance {
            instance_type_name: "m5.large".into(),
            ray_node_type_name: "cpu2".into(),
            instance_id: "im-1".into(),
            ip_address: "10.0.0.5".into(),
            details: "launching".into(),
        }],
        failed_instance_requests: vec![pb::FailedInstanceRequest {
            instance_type_name: "p3.2xlarge".into(),
            ray_node_type_name: "gpu".into(),
            count: 1,
            reason: "InsufficientInstanceCapacity".into(),
            start_ts: 1_700_000_000,
            failed_ts: 1_700_000_005,
        }],
        ..Default::default()
    };
    client
        .report_autoscaling_state(reported.clone())
        .await
        .expect("report");
    let status = client.get_cluster_status().await.expect("status");
    let back = status.autoscaling_state.expect("autoscaling_state");
    assert_eq!(back, reported);
    let crs = status
        .cluster_resource_state
        .expect("cluster_resource_state");
    assert!(crs.node_states.iter().any(is_head_node));
    assert_eq!(crs.cluster_resource_constraints.len(), 1);
    // Measured on Ray 2.60: the GCS does not echo the reported version back in
    // `last_seen_autoscaler_state_version` (0 in both RPCs), so an autoscaler cannot use
    // it to detect that its report was seen.
    assert_eq!(crs.last_seen_autoscaler_state_version, 0, "{crs:?}");
    let crs2 = client.get_cluster_resource_state(0).await.expect("state");
    assert_eq!(crs2.last_seen_autoscaler_state_version, 0, "{crs2:?}");

    // A report with an older autoscaler_state_version is ignored (no error either).
    let stale = pb::AutoscalingState {
        autoscaler_state_version: 0,
        pending_instance_requests: vec![],
        ..reported.clone()
    };
    client
        .report_autoscaling_state(stale)
        .await
        .expect("stale report");
    let status = client.get_cluster_status().await.expect("status");
    assert_eq!(status.autoscaling_state.as_ref(), Some(&reported));
    // A newer one replaces it.
    let newer = pb::AutoscalingState {
        autoscaler_state_version: 2,
        pending_instance_requests: vec![],
        infeasible_resource_requests: vec![],
        ..reported.clone()
    };
    client
        .report_autoscaling_state(newer.clone())
        .await
        .expect("newer report");
    let status = client.get_cluster_status().await.expect("status");
    assert_eq!(status.autoscaling_state, Some(newer));
}

/// (g) A client made before a GCS restart works after it without being recreated; while
/// the GCS is down a call fails retryably within bounded time.
#[tokio::test]
async fn client_survives_gcs_restart() {
    let mut head = RayHead::start();
    let client = head.client(quick());
    let before = client.get_cluster_resource_state(0).await.expect("state");
    assert!(
        client
            .kv_put("rayscale_test", b"k", b"v", true)
            .await
            .expect("put")
    );

    // A bystander that merely points at the GCS (like an autoscaler) is not the head's:
    // stopping the head must leave it alone.
    let mut bystander = std::process::Command::new(head.python())
        .args(["-c", "import time; time.sleep(60)", "--gcs", &head.addr()])
        .spawn()
        .expect("spawn a bystander");

    head.stop();
    assert!(head.pids().is_empty(), "left: {:?}", head.pids());
    assert!(
        matches!(bystander.try_wait(), Ok(None)),
        "stopping the head killed a bystander"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    let t = Instant::now();
    let e = client
        .get_cluster_resource_state(0)
        .await
        .expect_err("GCS down");
    let took = t.elapsed();
    eprintln!("call during the outage failed after {took:?}: {e}");
    assert_one_line(&e);
    match &e {
        GcsError::Rpc {
            method,
            addr,
            retryable,
            attempts,
            code,
            ..
        } => {
            assert_eq!(*method, "GetClusterResourceState");
            assert_eq!(addr, &head.addr());
            assert!(*retryable, "{e}");
            assert_eq!(*attempts, 3, "{e}");
            assert_eq!(code, "Unavailable", "{e}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // 3 attempts, sleeps below 50 ms + 100 ms: refused connections fail fast.
    assert!(took < Duration::from_secs(3), "{took:?}");

    head.start_again();
    eprintln!("restart took {:?}", head.last_start_duration());
    let after = client
        .get_cluster_resource_state(0)
        .await
        .expect("same client after restart");
    assert!(after.node_states.iter().any(is_head_node));
    // A new session, and the KV started empty: without external storage the GCS keeps
    // nothing across restarts (so the instance table lives exactly as long as the GCS).
    assert_ne!(after.cluster_session_name, before.cluster_session_name);
    assert_eq!(
        client.kv_get("rayscale_test", b"k").await.expect("get"),
        None
    );
    // Clones made before the restart work too.
    let clone = client.clone();
    clone.get_cluster_status().await.expect("status via clone");
}

/// (h) Nothing listening, or a malformed address: a one-line error, quickly.
#[tokio::test]
async fn wrong_address_fails_quickly_on_one_line() {
    // A port that was free a moment ago: nothing listens there.
    let port = free_ports(1)[0];
    let addr = format!("127.0.0.1:{port}");
    let client = GcsClient::new(&addr, ClientOptions::default()).expect("client");
    let t = Instant::now();
    let e = client
        .kv_get("ns", b"k")
        .await
        .expect_err("nothing listening");
    let took = t.elapsed();
    let text = assert_one_line(&e);
    eprintln!("nothing listening: {took:?}: {text}");
    assert!(
        text.contains("InternalKVGet") && text.contains(&addr),
        "{text}"
    );
    assert!(
        matches!(&e, GcsError::Rpc { code, retryable: true, attempts: 5, .. } if code == "Unavailable"),
        "{e:?}"
    );
    // Default options: 5 attempts, sleeps below 100 + 200 + 400 + 800 ms.
    assert!(took < Duration::from_secs(3), "{took:?}");

    for bad in ["127.0.0.1", "127.0.0.1:notaport", "https://127.0.0.1:6379"] {
        let e = GcsClient::new(bad, ClientOptions::default()).expect_err(bad);
        let text = assert_one_line(&e);
        assert!(
            matches!(e, GcsError::Connect { .. }) && text.contains(bad),
            "{text}"
        );
    }
}

/// A server that accepts connections but never answers: every attempt ends at the
/// deadline, the failure is a retryable `DeadlineExceeded`, and the whole call takes about
/// `max_attempts * deadline` plus the backoff sleeps.
#[tokio::test]
async fn silent_server_hits_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    // Accept and hold connections without ever speaking HTTP/2.
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        listener.set_nonblocking(true).expect("nonblocking");
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            match listener.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        held.len()
    });
    let options = ClientOptions {
        deadline: Duration::from_millis(300),
        backoff_base: Duration::from_millis(20),
        backoff_cap: Duration::from_millis(40),
        max_attempts: 2,
        seed: 1,
    };
    let client = GcsClient::new(&addr, options).expect("client");
    let t = Instant::now();
    let e = client
        .get_cluster_status()
        .await
        .expect_err("silent server");
    let took = t.elapsed();
    let text = assert_one_line(&e);
    eprintln!("silent server: {took:?}: {text}");
    assert!(
        matches!(&e, GcsError::Rpc { code, retryable: true, attempts: 2, .. }
            if code == "DeadlineExceeded"),
        "{e:?}"
    );
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(holder.join().expect("holder") >= 1);
}

/// `RayHead` finds its processes by temp dir and port with boundaries, so that stopping
/// one head never touches a head whose dir or port merely starts the same.
#[test]
fn process_matching_respects_boundaries() {
    assert!(contains_token("--temp-dir=/tmp/rs-1-1 --x", "/tmp/rs-1-1"));
    assert!(contains_token(
        "--log=/tmp/rs-1-1/session/logs",
        "/tmp/rs-1-1"
    ));
    assert!(contains_token("a /tmp/rs-1-1", "/tmp/rs-1-1"));
    assert!(!contains_token(
        "--temp-dir=/tmp/rs-1-10 --x",
        "/tmp/rs-1-1"
    ));
    assert!(contains_token("--gcs-address=192.0.2.2:6379 --a", ":6379"));
    assert!(!contains_token("--gcs-address=192.0.2.2:63790", ":6379"));
    assert!(contains_token(
        "--gcs-address=1.2.3.4:63790 x:6379",
        ":6379"
    ));
}
