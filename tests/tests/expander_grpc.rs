//! The gRPC expander against real tonic servers on 127.0.0.1: the server's choice is used
//! (one RPC per round), a killed, slow or nonsensical server makes the next expander decide
//! that round and later rounds recover, TLS works with the right certificate and is refused
//! with a wrong one, and the example weighted server follows its (reloaded) weights file.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rayscale_core::expander::{
    Expander, ExpanderChain, GrpcExpanderSettings, settings::parse_chain,
};
use rayscale_core::scheduler::{Decision, SchedulingRequest, schedule_with};
use rayscale_core::testing::{demand, node_type};
use rayscale_gcs_client::expander::GrpcExpander;
use rayscale_tests::expander_server::{Mode, TestServer, Tls};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls")
}

/// Three identical 4-CPU types and 8 one-CPU tasks: every type is an option of 2 nodes, so
/// only the expander tells them apart (the fallback `least-nodes` ties, config order: a).
fn request() -> SchedulingRequest {
    SchedulingRequest {
        node_types: vec![
            node_type("a", &[("CPU", 4.0)], 0, None),
            node_type("b", &[("CPU", 4.0)], 0, None),
            node_type("c", &[("CPU", 4.0)], 0, None),
        ],
        resource_requests: vec![demand(&[("CPU", 1.0)], 8)],
        ..Default::default()
    }
}

fn chain_to(url: &str, insecure: bool, cert: Option<&str>, timeout_s: f64) -> ExpanderChain {
    let r = request();
    let g = GrpcExpanderSettings {
        url: url.into(),
        cert: cert.map(|c| fixtures().join(c).display().to_string()),
        insecure,
        timeout_s,
    };
    let grpc: Box<dyn Expander> =
        Box::new(GrpcExpander::new(&g, &r.node_types, &[("b".into(), 0.25)]).expect("client"));
    let s = rayscale_core::expander::ExpanderSettings {
        chain: parse_chain("grpc,least-nodes"),
        ..Default::default()
    };
    ExpanderChain::from_settings(&s, &r.node_types, Some(grpc)).expect("chain")
}

fn plaintext(addr: SocketAddr, timeout_s: f64) -> ExpanderChain {
    chain_to(&format!("http://{addr}"), true, None, timeout_s)
}

fn launched(d: &Decision) -> Vec<(String, u64)> {
    d.launch.clone()
}

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[test]
fn the_servers_choice_is_used_with_one_rpc_per_round() {
    let server = TestServer::start(local(), Mode::Pick("c".into()), None).expect("server");
    let mut chain = plaintext(server.addr, 5.0);
    let d = schedule_with(&request(), &mut chain);
    assert_eq!(launched(&d), vec![("c".to_string(), 2)]);
    assert_eq!(server.calls(), 1);
    assert_eq!(chain.rounds(), 1);
    assert_eq!(chain.fallbacks()[0], ("grpc".to_string(), 0));
    assert!(chain.take_warnings().is_empty());
    // The request carries every option, Ray's own ResourceRequest messages and the node map.
    let req = server.last_request().expect("request seen");
    let ids: Vec<&str> = req
        .options
        .iter()
        .map(|o| o.node_group_id.as_str())
        .collect();
    assert_eq!(ids, vec!["a", "b", "c"]);
    assert!(req.options.iter().all(|o| o.node_count == 2));
    let d0 = &req.options[0].demands;
    assert_eq!(d0.len(), 1);
    assert_eq!(d0[0].count, 8);
    let rr = d0[0].request.as_ref().expect("request");
    assert_eq!(rr.resources_bundle.get("CPU"), Some(&1.0));
    assert_eq!(req.node_map["a"].resources.get("CPU"), Some(&4.0));
    assert!(req.node_map["b"].has_price && req.node_map["b"].price == 0.25);
    assert!(!req.node_map["a"].has_price);
}

#[test]
fn a_killed_server_falls_back_and_the_next_rounds_recover() {
    let server = TestServer::start(local(), Mode::Pick("c".into()), None).expect("server");
    let addr = server.addr;
    let mut chain = plaintext(addr, 2.0);
    assert_eq!(
        launched(&schedule_with(&request(), &mut chain)),
        vec![("c".into(), 2)]
    );
    server.stop();
    let t = Instant::now();
    let d = schedule_with(&request(), &mut chain);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        launched(&d),
        vec![("a".into(), 2)],
        "least-nodes decides (tie: config order)"
    );
    assert_eq!(chain.fallbacks()[0].1, 1);
    let w = chain.take_warnings();
    assert!(
        w.len() == 1 && w[0].contains("expander grpc failed"),
        "{w:?}"
    );
    // Back on the same port: the next round uses it again.
    let server = TestServer::start(addr, Mode::Pick("b".into()), None).expect("restart");
    let mut ok = false;
    for _ in 0..20 {
        let d = schedule_with(&request(), &mut chain);
        if launched(&d) == vec![("b".to_string(), 2)] {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ok, "the restarted server was never used");
    assert!(server.calls() >= 1);
}

#[test]
fn a_slow_server_times_out_and_the_loop_does_not_stall() {
    let server = TestServer::start(
        local(),
        Mode::Slow(Duration::from_secs(3), "c".into()),
        None,
    )
    .expect("server");
    let mut chain = plaintext(server.addr, 0.3);
    let t = Instant::now();
    let d = schedule_with(&request(), &mut chain);
    let took = t.elapsed();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(launched(&d), vec![("a".into(), 2)]);
    let w = chain.take_warnings();
    assert!(w.len() == 1 && w[0].contains("grpc failed"), "{w:?}");
    server.set_mode(Mode::Pick("c".into()));
    let d = schedule_with(&request(), &mut chain);
    assert_eq!(launched(&d), vec![("c".into(), 2)]);
    assert_eq!(chain.fallbacks()[0].1, 1);
}

#[test]
fn nonsense_empty_and_error_answers_fall_through() {
    let server = TestServer::start(local(), Mode::Nonsense, None).expect("server");
    let mut chain = plaintext(server.addr, 5.0);
    for mode in [Mode::Nonsense, Mode::Empty, Mode::Error] {
        server.set_mode(mode.clone());
        let d = schedule_with(&request(), &mut chain);
        assert_eq!(launched(&d), vec![("a".into(), 2)], "{mode:?}");
        let w = chain.take_warnings();
        assert_eq!(w.len(), 1, "{mode:?}: {w:?}");
    }
    assert_eq!(chain.fallbacks()[0].1, 3);
    assert_eq!(server.calls(), 3);
    server.set_mode(Mode::Pick("b".into()));
    assert_eq!(
        launched(&schedule_with(&request(), &mut chain)),
        vec![("b".into(), 2)]
    );
}

fn tls_identity() -> Tls {
    rayscale_tests::install_crypto_provider();
    let cert = std::fs::read(fixtures().join("server.pem")).expect("server.pem");
    let key = std::fs::read(fixtures().join("server.key")).expect("server.key");
    Some((cert, key))
}

#[test]
fn tls_with_the_right_certificate_works() {
    let server =
        TestServer::start(local(), Mode::Pick("c".into()), tls_identity()).expect("server");
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{}", server.addr.port());
        let mut chain = chain_to(&url, false, Some("ca.pem"), 5.0);
        let d = schedule_with(&request(), &mut chain);
        assert_eq!(
            launched(&d),
            vec![("c".into(), 2)],
            "{host}: {:?}",
            chain.take_warnings()
        );
        assert_eq!(chain.fallbacks()[0].1, 0);
    }
}

#[test]
fn tls_with_a_wrong_certificate_is_refused() {
    let server =
        TestServer::start(local(), Mode::Pick("c".into()), tls_identity()).expect("server");
    let url = format!("https://127.0.0.1:{}", server.addr.port());
    let mut chain = chain_to(&url, false, Some("other-ca.pem"), 5.0);
    let d = schedule_with(&request(), &mut chain);
    assert_eq!(launched(&d), vec![("a".into(), 2)]);
    assert_eq!(chain.fallbacks()[0].1, 1);
    assert_eq!(server.calls(), 0, "no call may reach the server");
    // Plain text to a TLS server fails too (and falls back).
    let mut chain = plaintext(server.addr, 2.0);
    assert_eq!(
        launched(&schedule_with(&request(), &mut chain)),
        vec![("a".into(), 2)]
    );
    assert_eq!(server.calls(), 0);
}

/// The example server binary (built by `scripts/test.sh` next to `rayscale`).
fn example_server(weights: &Path) -> (Child, SocketAddr) {
    let bin = rayscale_tests::workspace_bin("rayscale-expander-example");
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--seed", "3", "--weights"])
        .arg(weights)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("example server starts");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (child, addr)
}

#[test]
fn the_example_server_follows_and_reloads_its_weights_file() {
    let dir = std::env::temp_dir().join(format!("rayscale-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("weights.yaml");
    std::fs::write(&file, "a: 80\nb: 20\n").expect("write weights");
    let (mut child, addr) = example_server(&file);
    let mut chain = plaintext(addr, 5.0);
    let mut counts = [0u32; 3];
    let rounds = 1000;
    for _ in 0..rounds {
        let d = schedule_with(&request(), &mut chain);
        match d.launch.first().map(|(t, _)| t.as_str()) {
            Some("a") => counts[0] += 1,
            Some("b") => counts[1] += 1,
            _ => counts[2] += 1,
        }
    }
    let fallbacks = chain.fallbacks()[0].1;
    assert_eq!(fallbacks, 0, "{:?}", chain.take_warnings());
    assert_eq!(counts[2], 0, "c has no weight and is never chosen");
    let share_a = f64::from(counts[0]) / f64::from(rounds);
    assert!((share_a - 0.8).abs() < 0.04, "a got {share_a}");
    // An edit takes effect on the next round.
    std::fs::write(&file, "c: 1\n").expect("rewrite weights");
    for _ in 0..20 {
        let d = schedule_with(&request(), &mut chain);
        assert_eq!(launched(&d), vec![("c".into(), 2)]);
    }
    // A broken edit keeps the last good weights.
    std::fs::write(&file, "c: [not a number\n").expect("break weights");
    let d = schedule_with(&request(), &mut chain);
    assert_eq!(launched(&d), vec![("c".into(), 2)]);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_grpc_expander_works_inside_an_async_loop() {
    // The live loop runs the scheduler inside tokio (multi-thread runtime, block_in_place).
    let server = TestServer::start(local(), Mode::Pick("b".into()), None).expect("server");
    let addr = server.addr;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let d = rt.block_on(async move {
        let mut chain = plaintext(addr, 5.0);
        tokio::task::block_in_place(|| schedule_with(&request(), &mut chain))
    });
    assert_eq!(launched(&d), vec![("b".into(), 2)]);
    assert_eq!(server.calls(), 1);
}

#[test]
fn a_server_that_does_not_answer_costs_one_timeout_per_pass() {
    // Twenty placement groups: twenty placement rounds, each of which would ask the chain.
    let server = TestServer::start(
        local(),
        Mode::Slow(Duration::from_secs(3), "c".into()),
        None,
    )
    .expect("server");
    let mut chain = plaintext(server.addr, 0.2);
    let mut r = request();
    r.resource_requests.clear();
    r.gang_requests = (0..20)
        .map(|i| rayscale_core::model::GangRequest {
            requests: vec![rayscale_core::model::ResourceRequest {
                resources: rayscale_core::testing::res(&[("CPU", 4.0)]),
                ..Default::default()
            }],
            details: format!("pg-{i}"),
            first_bundle_selector: None,
        })
        .collect();
    let d = schedule_with(&r, &mut chain);
    assert_eq!(d.launch.iter().map(|(_, n)| n).sum::<u64>(), 20);
    assert!(chain.rounds() >= 20, "{} rounds", chain.rounds());
    assert_eq!(server.calls(), 1, "one call, then skipped for the pass");
    assert_eq!(chain.take_warnings().len(), 1);
    // The next pass (the next iteration) tries the server again.
    schedule_with(&r, &mut chain);
    assert_eq!(server.calls(), 2);
}
