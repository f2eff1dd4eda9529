//! Table tests of the built-in expanders and the chain, on hand-made options.

use super::settings::{PriorityRule, parse_chain};
use super::*;
use crate::testing::{node_type, res};

/// An option of `count` nodes of `t` holding `demands` demands, with `unused`/`total` CPU.
fn opt(t: &str, count: u64, demands: u64, unused_cpu: f64, total_cpu: f64) -> ExpansionOption {
    ExpansionOption {
        node_type: t.into(),
        node_count: count,
        demands: Vec::new(),
        demand_count: demands,
        total: res(&[("CPU", total_cpu)]),
        unused: res(&[("CPU", unused_cpu)]),
        price: None,
        priority: 0,
        ray_rank: 0,
    }
}

fn types(names: &[(&str, i64)]) -> Vec<NodeTypeConfig> {
    names
        .iter()
        .map(|(n, p)| {
            let mut t = node_type(n, &[("CPU", 4.0)], 0, None);
            t.priority = *p;
            t
        })
        .collect()
}

fn pick(e: &mut dyn Expander, options: &[ExpansionOption]) -> Vec<usize> {
    e.best_options(options).expect("built-ins do not fail")
}

#[test]
fn most_demands_keeps_ties() {
    let o = [
        opt("a", 1, 5, 0.0, 4.0),
        opt("b", 2, 9, 0.0, 8.0),
        opt("c", 3, 9, 0.0, 12.0),
    ];
    assert_eq!(pick(&mut MostDemands, &o), vec![1, 2]);
    assert_eq!(pick(&mut MostDemands, &o[..1]), vec![0]);
}

#[test]
fn least_waste_sums_unused_fractions_over_all_resources() {
    let mut gpu = opt("gpu", 1, 4, 0.0, 4.0);
    gpu.total = res(&[("CPU", 4.0), ("GPU", 1.0)]);
    gpu.unused = res(&[("CPU", 0.0), ("GPU", 1.0)]);
    let o = [
        opt("half", 1, 2, 2.0, 4.0),    // 0.5
        gpu,                            // 0 + 1 = 1.0
        opt("quarter", 1, 3, 1.0, 4.0), // 0.25
        opt("same", 2, 6, 2.0, 8.0),    // 0.25: tie
    ];
    assert_eq!(pick(&mut LeastWaste, &o), vec![2, 3]);
    assert!((builtin::waste(&o[1]) - 1.0).abs() < 1e-12);
}

#[test]
fn least_nodes_keeps_ties() {
    let o = [
        opt("a", 3, 9, 0.0, 12.0),
        opt("b", 1, 9, 3.0, 16.0),
        opt("c", 1, 2, 0.0, 2.0),
    ];
    assert_eq!(pick(&mut LeastNodes, &o), vec![1, 2]);
}

#[test]
fn price_prefers_cheapest_total_and_ignores_unpriced() {
    let mut a = opt("a", 4, 8, 0.0, 16.0);
    a.price = Some(4.0 * 0.5); // 2.0
    let mut b = opt("b", 1, 8, 0.0, 16.0);
    b.price = Some(1.5);
    let c = opt("c", 1, 8, 0.0, 16.0); // no price
    let mut d = opt("d", 3, 8, 0.0, 16.0);
    d.price = Some(1.5);
    assert_eq!(pick(&mut Price, &[a.clone(), b, c.clone(), d]), vec![1, 3]);
    // No price anywhere: no opinion.
    assert!(pick(&mut Price, &[c.clone(), c]).is_empty());
    assert_eq!(pick(&mut Price, &[a]), vec![0]);
}

#[test]
fn priority_uses_ray_field_or_regex_map() {
    let t = types(&[("cpu-small", 1), ("cpu-large", 5), ("spot-large", 5)]);
    let o = [
        opt("cpu-small", 1, 1, 0.0, 4.0),
        opt("cpu-large", 1, 1, 0.0, 4.0),
        opt("spot-large", 1, 1, 0.0, 4.0),
    ];
    let mut p = Priority::new(&[], &t).expect("valid");
    assert_eq!(pick(&mut p, &o), vec![1, 2]);
    let rules = vec![
        PriorityRule {
            priority: 10,
            patterns: vec![regex::Regex::new("^cpu-").expect("re")],
        },
        PriorityRule {
            priority: 50,
            patterns: vec![regex::Regex::new("small").expect("re")],
        },
    ];
    let mut p = Priority::new(&rules, &t).expect("valid");
    // cpu-small matches both rules and takes the higher one.
    assert_eq!(pick(&mut p, &o), vec![0]);
    // Without cpu-small, cpu-large (10) beats spot-large (no rule matches: no priority).
    assert_eq!(pick(&mut p, &o[1..]), vec![0]);
    // Only unmatched types: no opinion.
    assert!(pick(&mut p, &o[2..]).is_empty());
}

#[test]
fn ray_expander_takes_the_best_ray_rank() {
    let mut o = [
        opt("a", 1, 1, 0.0, 4.0),
        opt("b", 1, 1, 0.0, 4.0),
        opt("c", 1, 1, 0.0, 4.0),
    ];
    o[0].ray_rank = 2;
    o[1].ray_rank = 0;
    o[2].ray_rank = 1;
    assert_eq!(pick(&mut RayExpander, &o), vec![1]);
    assert_eq!(
        pick(&mut RayExpander, &[o[0].clone(), o[2].clone()]),
        vec![1]
    );
}

#[test]
fn random_is_seeded_and_covers_every_option() {
    let o = [
        opt("a", 1, 1, 0.0, 4.0),
        opt("b", 1, 1, 0.0, 4.0),
        opt("c", 1, 1, 0.0, 4.0),
    ];
    let run = |seed| {
        let mut r = RandomExpander::new(seed);
        (0..300).map(|_| pick(&mut r, &o)[0]).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    let picks = run(7);
    for i in 0..3 {
        let n = picks.iter().filter(|&&p| p == i).count();
        assert!(
            (70..=130).contains(&n),
            "option {i} picked {n} times of 300"
        );
    }
}

#[test]
fn weighted_lands_within_two_points_over_10000_rounds() {
    let t = types(&[("a", 0), ("b", 0), ("c", 0), ("other-tier", 9)]);
    let weights = vec![("a".into(), 80.0), ("b".into(), 15.0), ("c".into(), 5.0)];
    let o = [
        opt("a", 1, 1, 0.0, 4.0),
        opt("b", 1, 1, 0.0, 4.0),
        opt("c", 1, 1, 0.0, 4.0),
    ];
    for seed in [0u64, 1, 2060] {
        let mut w = Weighted::new(&[], &weights, &t, seed).expect("valid");
        let mut counts = [0u32; 3];
        for _ in 0..10_000 {
            let p = pick(&mut w, &o);
            assert_eq!(p.len(), 1);
            counts[p[0]] += 1;
        }
        for (i, want) in [80.0, 15.0, 5.0].iter().enumerate() {
            let got = f64::from(counts[i]) / 100.0;
            assert!(
                (got - want).abs() <= 2.0,
                "seed {seed}: option {i} got {got}% want {want}%"
            );
        }
    }
    // The top priority tier wins even without a weight; unweighted tiers are left to the
    // next expander.
    let mut w = Weighted::new(&[], &weights, &t, 0).expect("valid");
    let mut with_top = o.to_vec();
    with_top.push(opt("other-tier", 1, 1, 0.0, 4.0));
    assert_eq!(pick(&mut w, &with_top), vec![3]);
}

/// A scripted expander for chain tests: answers from a queue, counts calls.
struct Scripted {
    answers: Vec<Result<Vec<usize>, CoreError>>,
    calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Expander for Scripted {
    fn name(&self) -> &str {
        "grpc"
    }
    fn best_options(&mut self, _: &[ExpansionOption]) -> Result<Vec<usize>, CoreError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.answers.is_empty() {
            return Ok(Vec::new());
        }
        self.answers.remove(0)
    }
}

#[test]
fn chain_narrows_and_falls_through_on_failure() {
    let t = types(&[("a", 0), ("b", 0), ("c", 0)]);
    let o = [
        opt("a", 3, 6, 0.0, 12.0),
        opt("b", 1, 6, 2.0, 8.0),
        opt("c", 1, 6, 0.0, 4.0),
    ];
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let scripted = Scripted {
        answers: vec![
            Ok(vec![0, 1]),                                       // narrows; least-nodes picks b
            Err(CoreError::invalid("grpc", "deadline exceeded")), // falls through
            Ok(vec![7]),                                          // nonsense index
            Ok(vec![]),                                           // empty
            Ok(vec![0]),                                          // recovered
        ],
        calls: calls.clone(),
    };
    let settings = ExpanderSettings {
        chain: parse_chain("grpc,least-nodes,least-waste"),
        ..Default::default()
    };
    let mut chain =
        ExpanderChain::from_settings(&settings, &t, Some(Box::new(scripted))).expect("chain");
    assert!(!chain.is_ray());
    assert_eq!(chain.choose(&o), 1);
    assert!(chain.take_warnings().is_empty());
    // Failures: least-nodes then least-waste decide (b and c need 1 node, c wastes nothing).
    // Each round is its own pass here (a failed expander sits out the rest of its pass).
    for round in 0..3 {
        chain.begin_pass();
        assert_eq!(chain.choose(&o), 2, "round {round}");
        let w = chain.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("expander grpc failed"), "{w:?}");
        assert!(w[0].contains("least-nodes decides this round"), "{w:?}");
    }
    chain.begin_pass();
    assert_eq!(chain.choose(&o), 0);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(chain.rounds(), 5);
    assert_eq!(chain.fallbacks()[0], ("grpc".to_string(), 3));
    // A single option needs no expander call.
    assert_eq!(chain.choose(&o[..1]), 0);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 5);
}

#[test]
fn a_failed_expander_sits_out_the_rest_of_its_pass() {
    let t = types(&[("a", 0), ("b", 0)]);
    let o = [opt("a", 2, 4, 1.0, 8.0), opt("b", 1, 4, 1.0, 4.0)];
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let scripted = Scripted {
        answers: (0..20)
            .map(|_| Err(CoreError::invalid("grpc", "deadline exceeded")))
            .collect(),
        calls: calls.clone(),
    };
    let settings = ExpanderSettings {
        chain: parse_chain("grpc,least-nodes"),
        ..Default::default()
    };
    let mut chain =
        ExpanderChain::from_settings(&settings, &t, Some(Box::new(scripted))).expect("chain");
    chain.begin_pass();
    for _ in 0..10 {
        assert_eq!(chain.choose(&o), 1, "least-nodes decides");
    }
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one failed call per pass"
    );
    assert_eq!(chain.fallbacks()[0], ("grpc".to_string(), 10));
    assert_eq!(chain.take_warnings().len(), 1);
    // The next pass asks it again.
    chain.begin_pass();
    chain.choose(&o);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn chain_settings_errors_name_the_problem() {
    let bad = ExpanderSettings {
        chain: vec!["cheapest".into()],
        ..Default::default()
    };
    let e = ExpanderChain::from_settings(&bad, &[], None).expect_err("unknown");
    assert!(
        e.to_string().contains("unknown expander \"cheapest\""),
        "{e}"
    );
    let grpc = ExpanderSettings {
        chain: vec!["grpc".into()],
        ..Default::default()
    };
    let e = ExpanderChain::from_settings(&grpc, &[], None).expect_err("no grpc");
    assert!(e.to_string().contains("grpc needs a server address"), "{e}");
    assert!(
        ExpanderChain::from_settings(&Default::default(), &[], None)
            .expect("default")
            .is_ray()
    );
}

#[test]
fn rayscale_block_is_parsed_and_errors_name_their_path() {
    let names = vec!["a".to_string(), "b".to_string()];
    let v: serde_json::Value = serde_json::json!({
        "expander": {
            "chain": "grpc, priority,least-waste",
            "seed": 7,
            "priorities": {"10": ["^a$"], "50": ["b"]},
            "weights": {"a": 80, "b": 20},
            "prices": {"a": 0.5},
            "grpc": {"url": "127.0.0.1:7000", "insecure": true, "timeout_s": 0.5}
        }
    });
    let s =
        ExpanderSettings::from_rayscale_block(Some(&v), "config.rayscale", &names).expect("valid");
    assert_eq!(s.chain, vec!["grpc", "priority", "least-waste"]);
    assert_eq!(s.seed, 7);
    assert_eq!(s.priorities.len(), 2);
    assert_eq!(s.weights, vec![("a".into(), 80.0), ("b".into(), 20.0)]);
    assert_eq!(s.prices, vec![("a".into(), 0.5)]);
    let g = s.grpc.expect("grpc");
    assert!(g.insecure);
    assert_eq!(g.timeout_s, 0.5);

    let cases = [
        (
            serde_json::json!({"expandr": {}}),
            "config.rayscale.expandr: unknown key",
        ),
        (
            serde_json::json!({"expander": {"chain": ["ray", 3]}}),
            "config.rayscale.expander.chain[1]: expected a string, got 3",
        ),
        (
            serde_json::json!({"expander": {"chain": "ray,fastest"}}),
            "config.rayscale.expander.chain: unknown expander \"fastest\"",
        ),
        (
            serde_json::json!({"expander": {"weights": {"zz": 1}}}),
            "config.rayscale.expander.weights.zz: not one of available_node_types",
        ),
        (
            serde_json::json!({"expander": {"prices": {"a": "cheap"}}}),
            "config.rayscale.expander.prices.a: expected a non-negative number, got \"cheap\"",
        ),
        (
            serde_json::json!({"expander": {"priorities": {"high": ["a"]}}}),
            "config.rayscale.expander.priorities.high: a priority key must be an integer",
        ),
        (
            serde_json::json!({"expander": {"priorities": {"1": ["a("]}}}),
            "config.rayscale.expander.priorities.1[0]: invalid regex \"a(\"",
        ),
        (
            serde_json::json!({"expander": {"grpc": {"insecure": true}}}),
            "config.rayscale.expander.grpc.url: required key is missing",
        ),
        (
            serde_json::json!({"expander": {"grpc": {"url": "x", "timeout_s": 0}}}),
            "config.rayscale.expander.grpc.timeout_s: expected a positive number of seconds, got 0",
        ),
    ];
    for (v, want) in cases {
        let e = ExpanderSettings::from_rayscale_block(Some(&v), "config.rayscale", &names)
            .expect_err(want);
        let msg = e.to_string();
        assert!(
            msg.starts_with(want),
            "{msg:?} does not start with {want:?}"
        );
        assert!(!msg.contains('\n'));
    }
}

#[test]
fn seeded_rng_is_uniform_enough() {
    let mut r = SeededRng::new(1);
    let mut buckets = [0u32; 10];
    for _ in 0..10_000 {
        buckets[r.below(10)] += 1;
        let f = r.next_f64();
        assert!((0.0..1.0).contains(&f));
    }
    assert!(
        buckets.iter().all(|&b| (850..1150).contains(&b)),
        "{buckets:?}"
    );
}
