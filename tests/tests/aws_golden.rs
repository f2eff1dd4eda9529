//! rayscale's RunInstances against Ray's own: Ray 2.60's AWS provider launches each worker
//! type of Ray's defaults.yaml and `tests/fixtures/aws/golden.yaml` on moto
//! (`scripts/ray_aws_capture.py`), and rayscale's request for the same type must match it,
//! the passed-through members as botocore's serializer writes them; and the passthrough
//! table is botocore's. The provider's own behaviour is in `aws.rs`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::{CloudInstanceProvider, LaunchRequest};
use rayscale_provider_aws::AwsProvider;
use rayscale_tests::fakes::aws::{MotoEc2, REGION};

/// A moto AMI (moto 5.2.5 ships it).
const AMI: &str = "ami-12c6146b";

/// A RunInstances request in boto3's parameter shape (the fields rayscale sets).
fn boto_shape(i: &aws_sdk_ec2::operation::run_instances::RunInstancesInput) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    let s = |v: Option<&str>| v.map(|x| Value::String(x.to_string()));
    put("ImageId", s(i.image_id.as_deref()));
    put(
        "InstanceType",
        i.instance_type.as_ref().map(|t| json!(t.as_str())),
    );
    put("KeyName", s(i.key_name.as_deref()));
    put("MinCount", i.min_count.map(|n| json!(n)));
    put("MaxCount", i.max_count.map(|n| json!(n)));
    put("SubnetId", s(i.subnet_id.as_deref()));
    put(
        "SecurityGroupIds",
        i.security_group_ids.as_ref().map(|g| json!(g)),
    );
    put("EbsOptimized", i.ebs_optimized.map(|b| json!(b)));
    put("UserData", s(i.user_data.as_deref()));
    put("ClientToken", s(i.client_token.as_deref()));
    put(
        "IamInstanceProfile",
        i.iam_instance_profile.as_ref().map(|p| {
            let mut o = Map::new();
            if let Some(a) = p.arn() {
                o.insert("Arn".into(), json!(a));
            }
            if let Some(n) = p.name() {
                o.insert("Name".into(), json!(n));
            }
            Value::Object(o)
        }),
    );
    put(
        "BlockDeviceMappings",
        i.block_device_mappings.as_ref().map(|b| {
            Value::Array(
                b.iter()
                    .map(|d| {
                        let mut o = Map::new();
                        if let Some(n) = d.device_name() {
                            o.insert("DeviceName".into(), json!(n));
                        }
                        if let Some(e) = d.ebs() {
                            let mut eo = Map::new();
                            if let Some(v) = e.volume_size() {
                                eo.insert("VolumeSize".into(), json!(v));
                            }
                            if let Some(v) = e.volume_type() {
                                eo.insert("VolumeType".into(), json!(v.as_str()));
                            }
                            if let Some(v) = e.delete_on_termination() {
                                eo.insert("DeleteOnTermination".into(), json!(v));
                            }
                            o.insert("Ebs".into(), Value::Object(eo));
                        }
                        Value::Object(o)
                    })
                    .collect(),
            )
        }),
    );
    put(
        "InstanceMarketOptions",
        i.instance_market_options.as_ref().map(|mo| {
            let mut o = Map::new();
            if let Some(t) = mo.market_type() {
                o.insert("MarketType".into(), json!(t.as_str()));
            }
            if let Some(so) = mo.spot_options() {
                let mut s = Map::new();
                if let Some(p) = so.max_price() {
                    s.insert("MaxPrice".into(), json!(p));
                }
                o.insert("SpotOptions".into(), Value::Object(s));
            }
            Value::Object(o)
        }),
    );
    put(
        "Placement",
        i.placement.as_ref().map(|p| {
            let mut o = Map::new();
            if let Some(z) = p.availability_zone() {
                o.insert("AvailabilityZone".into(), json!(z));
            }
            Value::Object(o)
        }),
    );
    put(
        "MetadataOptions",
        i.metadata_options.as_ref().map(|mo| {
            let mut o = Map::new();
            if let Some(t) = mo.http_tokens() {
                o.insert("HttpTokens".into(), json!(t.as_str()));
            }
            if let Some(h) = mo.http_put_response_hop_limit() {
                o.insert("HttpPutResponseHopLimit".into(), json!(h));
            }
            Value::Object(o)
        }),
    );
    put(
        "CapacityReservationSpecification",
        i.capacity_reservation_specification.as_ref().map(|c| {
            let mut o = Map::new();
            if let Some(p) = c.capacity_reservation_preference() {
                o.insert("CapacityReservationPreference".into(), json!(p.as_str()));
            }
            Value::Object(o)
        }),
    );
    put(
        "TagSpecifications",
        i.tag_specifications.as_ref().map(|specs| {
            Value::Array(
                specs
                    .iter()
                    .map(|s| {
                        json!({
                            "ResourceType": s.resource_type().map(|r| r.as_str()).unwrap_or(""),
                            "Tags": s.tags().iter().map(|t| json!({
                                "Key": t.key().unwrap_or(""),
                                "Value": t.value().unwrap_or(""),
                            })).collect::<Vec<_>>(),
                        })
                    })
                    .collect(),
            )
        }),
    );
    Value::Object(m)
}

/// Drops what differs by design: the token (Ray sends none; botocore adds a random one),
/// and the launch config hash (Ray's is SHA-256 over node_config and auth, rayscale's
/// SHA-1 over node_config).
fn normalized(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("ClientToken");
    }
    for spec in v["TagSpecifications"].as_array_mut().into_iter().flatten() {
        for t in spec["Tags"].as_array_mut().into_iter().flatten() {
            if t["Key"] == "ray-launch-config" {
                t["Value"] = "<hash>".into();
            }
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_launches_match_rays_own_aws_provider() {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = dir.join("../scripts/ray_aws_capture.py");
    let wheel = std::process::Command::new(&python)
        .args([
            "-c",
            "import os, ray.autoscaler as a; print(os.path.join(os.path.dirname(a.__file__), 'aws', 'defaults.yaml'))",
        ])
        .output()
        .unwrap();
    let defaults = String::from_utf8_lossy(&wheel.stdout).trim().to_string();
    let moto = MotoEc2::start();
    let mut compared = 0;
    let mut passed_through = 0;
    for yaml in [
        std::path::PathBuf::from(defaults),
        dir.join("fixtures/aws/golden.yaml"),
    ] {
        moto.reset();
        let out = std::env::temp_dir().join(format!(
            "rayscale-capture-{}-{compared}.json",
            std::process::id()
        ));
        let status = std::process::Command::new(&python)
            .arg(&script)
            .args(["--endpoint", &moto.endpoint(), "--out"])
            .arg(&out)
            .arg("--config")
            .arg(&yaml)
            // Ray's bootstrap writes the key pair it makes under ~/.ssh: not the user's.
            .env("HOME", moto.home())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "Ray's capture failed on {}",
            yaml.display()
        );
        let cap: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let _ = std::fs::remove_file(&out);
        // The same YAML, with each worker type's node_config as Ray bootstrapped it (what
        // a rayscale user writes: rayscale does not bootstrap).
        let text = std::fs::read_to_string(&yaml).unwrap();
        let base = ClusterConfig::from_yaml_str(&text, "golden").unwrap();
        let mut raw = base.raw.clone();
        for (t, nc) in cap["bootstrapped"].as_object().unwrap() {
            raw["available_node_types"][t]["node_config"] = nc.clone();
        }
        let config = ClusterConfig::from_value(&raw, "golden").unwrap();
        let aws = rayscale_provider_aws::AwsConfig::from_cluster(&config).unwrap();
        for (t, theirs) in cap["calls"].as_object().unwrap() {
            let input = rayscale_provider_aws::mapping::run_instances_input(
                &aws,
                t,
                rayscale_core::provider::NodeKind::Worker,
                Some(&format!("capture-{t}")),
                2,
                false,
                // rayscale's first attempt: the first subnet, as Ray's.
                &rayscale_provider_aws::mapping::Placement {
                    subnet: aws.node_types[t].subnets().first().map(String::as_str),
                    zone: None,
                },
                None,
                "token",
            )
            .unwrap();
            // The typed members: as the SDK's input, the passed-through ones are absent.
            let mut theirs = theirs.clone();
            if let Some(o) = theirs.as_object_mut() {
                o.retain(|k, _| rayscale_provider_aws::passthrough::member(k).is_none());
                // A typed member's nested keys its struct lacks go through as pairs too.
                for (k, t) in rayscale_provider_aws::passthrough::TYPED_NESTED {
                    if let Some(v) = o.get_mut(*k) {
                        *v = rayscale_provider_aws::passthrough::split_typed(v, t).0;
                    }
                }
            }
            assert_eq!(
                normalized(boto_shape(&input)),
                normalized(theirs),
                "{}: type {t}",
                yaml.display()
            );
            // The passed-through members: the form pairs botocore's serializer writes.
            let passed: BTreeMap<String, String> =
                aws.node_types[t].passthrough.iter().cloned().collect();
            let serialized: BTreeMap<String, String> = cap["forms"][t]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| {
                    let head = k.split('.').next().unwrap_or_default();
                    rayscale_provider_aws::passthrough::MEMBERS
                        .iter()
                        .any(|m| m.query == head)
                        // Nested: Ray's pair at the place rayscale's is (a pair rayscale
                        // drops is caught by the count below).
                        || passed.contains_key(k.as_str())
                })
                .map(|(k, v)| {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), v)
                })
                .collect();
            assert_eq!(passed, serialized, "{}: type {t}", yaml.display());
            passed_through += passed.len();
            compared += 1;
        }
    }
    assert_eq!(compared, 3, "defaults.yaml's worker and golden.yaml's two");
    assert_eq!(
        passed_through, 10,
        "golden.yaml's cpu type passes nine pairs through (one nested in its Ebs), its spot type one (in SpotOptions)"
    );
    // Sent for real: the pairs are appended to the signed body, and moto (EC2's shape
    // of the answer) shows what they asked for.
    moto.reset();
    let text = std::fs::read_to_string(dir.join("fixtures/aws/golden.yaml")).unwrap();
    let mut raw = ClusterConfig::from_yaml_str(&text, "golden").unwrap().raw;
    raw["provider"]["region"] = serde_json::json!(REGION);
    raw["provider"]
        .as_object_mut()
        .unwrap()
        .remove("availability_zone");
    raw["available_node_types"]["cpu"]["node_config"]["ImageId"] = serde_json::json!(AMI);
    let config = ClusterConfig::from_value(&raw, "golden").unwrap();
    let p = AwsProvider::new(moto.client(), &config, None).unwrap();
    let made = p
        .launch(&LaunchRequest {
            request_id: "passthrough".into(),
            node_type: "cpu".into(),
            count: 1,
            launch_config_hash: String::new(),
            avoid_zones: Vec::new(),
            all_or_nothing: false,
        })
        .await
        .unwrap();
    let id = made.instances[0].cloud_instance_id.clone();
    let out = moto
        .client()
        .describe_instances()
        .instance_ids(&id)
        .send()
        .await
        .unwrap();
    let i = &out.reservations()[0].instances()[0];
    assert_eq!(
        i.monitoring().and_then(|m| m.state()).map(|s| s.as_str()),
        Some("enabled"),
        "{i:?}"
    );
}

/// The passthrough table (crates/provider-aws/src/passthrough/table.rs) is what
/// `scripts/gen_ec2_passthrough.py` makes of the pinned botocore's EC2 model: every
/// RunInstances member rayscale does not type, none of another operation.
#[test]
fn the_passthrough_table_is_botocores() {
    let (python, _) = rayscale_tests::ray_head::ray_from_env();
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(&python)
        .arg(dir.join("scripts/gen_ec2_passthrough.py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = String::from_utf8_lossy(&out.stdout);
    let have =
        std::fs::read_to_string(dir.join("crates/provider-aws/src/passthrough/table.rs")).unwrap();
    assert!(
        want == have,
        "the table differs from botocore's model: run scripts/gen_ec2_passthrough.py --write"
    );
}
