//! Sizes past gRPC's defaults, over real loopback gRPC (the GCS client against the fake
//! GCS server): the GCS state of a 30,000-node cluster (over tonic's default 4 MiB
//! message limit, as Ray's own GCS allows with its 500 MiB `max_grpc_message_size`), and
//! an instance table of 10,000 records saved and loaded back through the KV. The table is
//! over 4 MiB in all, so the one value it used to be could not pass; record by record,
//! no message comes near the limit.

use prost::Message;
use rayscale_core::driver::{Gcs, KvTable};
use rayscale_core::instance::{InMemoryStorage, InstanceManager, InstanceUpdateEvent};
use rayscale_core::model::InstanceStatus;
use rayscale_gcs_client::client::{ClientOptions, GcsClient};
use rayscale_tests::fake_gcs_server::{FakeGcsServer, demand, running_node};

const FOUR_MIB: usize = 4 * 1024 * 1024;

#[tokio::test]
async fn a_30000_node_state_crosses_the_wire() {
    let server = FakeGcsServer::start().expect("fake GCS");
    let total = [("CPU", 16.0), ("memory", 68_719_476_736.0), ("GPU", 1.0)];
    let free = [("CPU", 3.0), ("memory", 1_073_741_824.0), ("GPU", 1.0)];
    let size = server.with_cluster(|c| {
        for n in 0..30_000u32 {
            c.node_states.push(running_node(
                n + 1,
                &format!("i-{n:08x}"),
                "gpu16",
                &total,
                &free,
                0,
            ));
        }
        c.pending_resource_requests
            .push(demand(&[("CPU", 1.0)], 1_000_000));
        c.encoded_len()
    });
    assert!(
        size > FOUR_MIB,
        "the state must pass 4 MiB to test the limit: {size} bytes"
    );
    let gcs = GcsClient::new(&server.addr(), ClientOptions::default()).expect("client");
    let got = gcs
        .cluster_resource_state()
        .await
        .expect("state of 30,000 nodes");
    assert_eq!(got.state.node_states.len(), 30_000);
    assert!(got.skipped.is_empty(), "{:?}", got.skipped);
    assert_eq!(got.state.pending_resource_requests[0].count, 1_000_000);
}

#[tokio::test]
async fn a_table_of_10000_instances_is_saved_and_loaded_back() {
    let server = FakeGcsServer::start().expect("fake GCS");
    let gcs = GcsClient::new(&server.addr(), ClientOptions::default()).expect("client");
    let mut im = InstanceManager::new(InMemoryStorage::new());
    let events: Vec<InstanceUpdateEvent> = (0..10_000)
        .map(|n| {
            InstanceUpdateEvent::create(format!("im-{n:08}"), "cpu16", InstanceStatus::Allocated)
                .with_cloud_instance_id(format!("i-{n:08x}"))
                .with_details("adopted an unknown cloud instance")
        })
        .collect();
    im.update(&events, 1_800_000_000_000_000_000)
        .expect("create");
    // The life of a running worker: launched, allocated, Ray running on it.
    let (_, created) = im.get_instances().expect("load");
    let running: Vec<InstanceUpdateEvent> = created
        .iter()
        .map(|i| {
            InstanceUpdateEvent::transition(
                i.instance_id.clone(),
                i.version,
                InstanceStatus::RayRunning,
            )
            .with_node_id(format!("{:056x}", i.version as u128 + 7 * 10u128.pow(30)))
            .with_launch_config_hash("9c1185a5c5e9fc54612808977ee8f548b2258d31")
            .with_details("ray node seen running")
        })
        .collect();
    im.update(&running, 1_800_000_030_000_000_000).expect("run");
    let (version, instances) = im.get_instances().expect("load");
    let mut table = KvTable::new("big");
    let stats = table
        .save(&gcs, version, &instances, 1)
        .await
        .expect("save 10,000 records");
    assert_eq!(stats.written, 10_000);
    assert!(
        stats.bytes > FOUR_MIB,
        "the table as one value would pass the 4 MiB limit: {} bytes",
        stats.bytes
    );
    assert_eq!(server.kv_count("__rayscale", "records/big/"), 10_000);
    // Nothing changed: the next save writes nothing.
    let again = table
        .save(&gcs, version, &instances, 1)
        .await
        .expect("save again");
    assert_eq!((again.written, again.deleted, again.bytes), (0, 0, 0));
    // A restarted process loads all of it.
    let loaded = KvTable::new("big").load(&gcs, 2).await.expect("load");
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(loaded.version, version);
    assert_eq!(loaded.instances, instances);
}
