//! [`Ec2Pages`]: a canned EC2 that answers only DescribeInstances, for a cluster of any
//! size, page by page, without moto's per-instance Python cost: what rayscale's side of
//! listing a 10,000-instance cluster costs (the SDK's XML parsing, the mapping, the calls).
//!
//! It follows EC2's Query API reference for DescribeInstances (API version 2016-11-15):
//! form-encoded `Action=DescribeInstances` with `MaxResults` (5–1000) and `NextToken`; the
//! answer is `DescribeInstancesResponse` with `reservationSet/item/instancesSet/item`
//! (`instanceId`, `instanceState/{code,name}`, `privateIpAddress`, `instanceType`,
//! `tagSet/item/{key,value}`) and a `nextToken` while more pages remain. Filters are not
//! applied: every instance is a running worker of the cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A canned EC2 on a loopback port holding `n` running workers of `cluster`.
pub struct Ec2Pages {
    server: MockServer,
    calls: Arc<AtomicU64>,
}

struct Pages {
    n: u64,
    cluster: String,
    calls: Arc<AtomicU64>,
    /// The test that started it, for the contract record.
    test: String,
}

impl Pages {
    fn page(&self, start: u64, size: u64) -> String {
        let end = (start + size).min(self.n);
        let mut s = String::with_capacity(((end - start) * 900) as usize + 512);
        s.push_str(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse \
             xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\n<requestId>canned</requestId>\n\
             <reservationSet>\n",
        );
        for i in start..end {
            let tag = |k: &str, v: &str| format!("<item><key>{k}</key><value>{v}</value></item>");
            s.push_str(&format!(
                "<item><reservationId>r-{i:017x}</reservationId><ownerId>123456789012</ownerId>\
                 <instancesSet><item><instanceId>i-{i:017x}</instanceId>\
                 <imageId>ami-12c6146b</imageId>\
                 <instanceState><code>16</code><name>running</name></instanceState>\
                 <privateIpAddress>10.{}.{}.{}</privateIpAddress>\
                 <instanceType>m5.large</instanceType>\
                 <placement><availabilityZone>us-east-1a</availabilityZone></placement>\
                 <tagSet>{}{}{}{}{}{}</tagSet></item></instancesSet></item>\n",
                (i >> 16) & 255,
                (i >> 8) & 255,
                i & 255,
                tag("ray-cluster-name", &self.cluster),
                tag("ray-node-type", "worker"),
                tag("ray-user-node-type", "a"),
                tag("ray-launch-config", "h"),
                tag("ray-launch-request", &format!("r{}", i / 1000)),
                tag("Name", &format!("ray-{}-worker", self.cluster)),
            ));
        }
        s.push_str("</reservationSet>\n");
        if end < self.n {
            s.push_str(&format!("<nextToken>{end}</nextToken>\n"));
        }
        s.push_str("</DescribeInstancesResponse>\n");
        s
    }
}

impl Respond for Pages {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        // The values read here (action name, numbers) need no percent-decoding.
        let body = String::from_utf8_lossy(&request.body);
        let get = |k: &str| {
            body.split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v)
        };
        if get("Action") != Some("DescribeInstances") {
            super::record::record("aws", &self.test, request, 400, serde_json::Value::Null);
            return ResponseTemplate::new(400).set_body_string(
                "<Response><Errors><Error><Code>InvalidAction</Code><Message>canned EC2 \
                 answers DescribeInstances only</Message></Error></Errors></Response>",
            );
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        super::record::record("aws", &self.test, request, 200, serde_json::Value::Null);
        let start = get("NextToken").and_then(|t| t.parse().ok()).unwrap_or(0);
        let size = get("MaxResults")
            .and_then(|t| t.parse().ok())
            .unwrap_or(1000u64)
            .clamp(5, 1000);
        ResponseTemplate::new(200)
            .insert_header("Content-Type", "text/xml;charset=UTF-8")
            .set_body_string(self.page(start, size))
    }
}

impl Ec2Pages {
    /// Starts the server with `n` instances of `cluster`.
    pub async fn start(n: u64, cluster: &str) -> Ec2Pages {
        let server = MockServer::start().await;
        let calls = Arc::new(AtomicU64::new(0));
        Mock::given(method("POST"))
            .respond_with(Pages {
                n,
                cluster: cluster.to_string(),
                calls: calls.clone(),
                test: super::record::test_name(),
            })
            .mount(&server)
            .await;
        Ec2Pages { server, calls }
    }

    /// An EC2 client for it.
    pub fn client(&self) -> aws_sdk_ec2::Client {
        rayscale_provider_aws::client::for_endpoint(&self.server.uri(), super::aws::REGION)
            .expect("a loopback endpoint")
    }

    /// DescribeInstances calls answered.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}
