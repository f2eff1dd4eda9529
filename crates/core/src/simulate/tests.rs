//! The simulator on traces whose outcome can be worked out by hand.

use super::*;

fn config(text: &str) -> ClusterConfig {
    ClusterConfig::from_yaml_str(text, "t").expect("config")
}

fn trace(text: &str) -> Trace {
    let t: Trace = serde_yaml_ng::from_str(text).expect("trace");
    t.validate("trace").expect("valid");
    t
}

fn run(c: &ClusterConfig, t: &Trace) -> Run {
    let mut chain = ExpanderChain::from_settings(&c.expander, &c.node_types, None).expect("chain");
    let sim = Sim::new(c, &chain, t);
    sim.run(&mut chain).expect("run")
}

const ONE_TYPE: &str = r#"
cluster_name: sim
upscaling_speed: 100
idle_timeout_minutes: 1
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  w: {resources: {CPU: 2}, max_workers: 10, node_config: {}}
"#;

#[test]
fn one_type_with_a_fixed_boot_time_matches_the_hand_computation() {
    let c = config(ONE_TYPE);
    let t = trace(
        "step_s: 5\ncloud: {default: {boot_s: 60, price_per_hour: 2.0}}\n\
         workload: [{at_s: 0, count: 4, resources: {CPU: 1}, duration_s: 100}]\n",
    );
    let r = run(&c, &t);
    let s = &r.summary;
    // 4 one-CPU tasks need 2 two-CPU nodes, launched at once at t=0 and up at t=60: every
    // task waits exactly the boot time.
    assert_eq!(s.types["w"].launched, 2);
    assert_eq!(s.launch_requests, 1);
    assert_eq!(
        (s.wait_p50_s, s.wait_p90_s, s.wait_p99_s, s.wait_max_s),
        (60.0, 60.0, 60.0, 60.0)
    );
    assert_eq!((s.placed, s.unplaced), (4, 0));
    // 4 units pending for the 12 steps before t=60.
    assert_eq!(s.pending_area, 4.0 * 60.0);
    // The work ends at t=160; idle for the minute of idle_timeout, the nodes are drained
    // and terminated within a few iterations after t=220.
    let gone = r
        .series
        .iter()
        .find(|x| x.t_s > 60.0 && x.nodes["w"] == 0)
        .expect("scaled down")
        .t_s;
    assert!((220.0..=240.0).contains(&gone), "terminated at {gone}");
    assert_eq!(s.terminated, 2);
    // Billed from launch to termination, 2 per hour each.
    let hours = 2.0 * gone / 3600.0;
    assert!((s.types["w"].node_hours - hours).abs() < 1e-9, "{s:?}");
    assert!((s.cost - 2.0 * hours).abs() < 1e-9, "{s:?}");
    assert!((r.series.last().expect("series").cost - s.cost).abs() < 1e-9);
    // The run ends when the cluster is back to its minimum.
    assert_eq!(s.end_s, gone);
    // Two nodes while they lived, at every sample between launch and termination.
    assert!(
        r.series
            .iter()
            .filter(|x| x.t_s < gone)
            .all(|x| x.nodes["w"] == 2),
        "{:?}",
        r.series
    );
}

const TWO_TYPES: &str = r#"
cluster_name: sim
upscaling_speed: 100
idle_timeout_minutes: 1
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  a: {resources: {CPU: 4}, max_workers: 10, node_config: {}, priority: 10}
  b: {resources: {CPU: 4}, max_workers: 10, node_config: {}}
"#;

#[test]
fn a_type_out_of_capacity_is_set_aside_and_the_work_goes_to_another() {
    let c = config(TWO_TYPES);
    let t = trace(
        "cloud: {default: {boot_s: 30}, types: {a: {capacity_error_rate: 1.0}}}\n\
         workload: [{at_s: 0, count: 8, resources: {CPU: 4}, duration_s: 60}]\n",
    );
    let r = run(&c, &t);
    let s = &r.summary;
    assert!(s.types["a"].capacity_errors >= 1, "{s:?}");
    assert_eq!(s.types["a"].launched, 0, "{s:?}");
    assert_eq!(s.types["b"].launched, 8, "{s:?}");
    assert_eq!(s.unplaced, 0);
}

#[test]
fn instances_that_never_boot_leave_the_work_unplaced_and_are_counted() {
    let c = config(ONE_TYPE);
    let t = trace(
        "end_s: 600\ncloud: {default: {boot_s: 20, failure_rate: 1.0}}\n\
         workload: [{at_s: 0, count: 2, resources: {CPU: 2}, duration_s: 60}]\n",
    );
    let r = run(&c, &t);
    let s = &r.summary;
    assert_eq!(s.end_s, 600.0);
    assert_eq!((s.placed, s.unplaced), (0, 2));
    assert!(s.types["w"].boot_failures >= 2, "{s:?}");
    // Every launch failed, but those still booting at the end (at most one request).
    let w = &s.types["w"];
    assert!(w.launched - w.boot_failures <= 2, "{s:?}");
}

#[test]
fn placement_groups_wait_for_all_their_bundles() {
    let c = config(ONE_TYPE);
    let t = trace(
        "cloud: {default: {boot_s: 10}}\n\
         workload: [{at_s: 0, kind: placement_group, strategy: STRICT_SPREAD, \
         bundles: [{CPU: 1}, {CPU: 1}, {CPU: 1}], duration_s: 30}]\n",
    );
    let r = run(&c, &t);
    // STRICT_SPREAD: three distinct nodes, placed together once all three are up.
    assert_eq!(r.summary.types["w"].launched, 3, "{:?}", r.summary);
    assert_eq!(r.summary.placed, 1);
    assert_eq!(r.summary.wait_max_s, 10.0);
}

#[test]
fn bad_traces_are_named_by_path() {
    let bad = |text: &str| {
        let t: Trace = serde_yaml_ng::from_str(text).expect("parses");
        t.validate("t.yaml").expect_err("invalid").to_string()
    };
    assert_eq!(
        bad("workload: [{at_s: 0, resources: {CPU: -1}, duration_s: 5}]"),
        "t.yaml: workload[0].resources.CPU: expected a positive amount, got -1"
    );
    assert_eq!(
        bad(
            "cloud: {types: {g: {failure_rate: 2}}}\nworkload: [{at_s: 0, resources: {CPU: 1}, duration_s: 5}]"
        ),
        "t.yaml: cloud.types.g.failure_rate: expected a rate in [0, 1], got 2"
    );
    assert_eq!(
        bad("workload: [{at_s: 0, kind: placement_group, duration_s: 5}]"),
        "t.yaml: workload[0].bundles: a placement group needs bundles"
    );
    assert_eq!(
        bad("workload: []"),
        "t.yaml: workload: expected at least one arrival"
    );
}

/// A polyline: its panel, its series and its points mapped back to data values.
type Line = (String, String, Vec<(f64, f64)>);

/// The polylines of an SVG.
fn polylines(svg: &str) -> Vec<Line> {
    let panel = regex::Regex::new(
        r#"<g class="panel" data-panel="([^"]*)" data-x-max="([^"]*)" data-y-max="([^"]*)">"#,
    )
    .expect("regex");
    let line = regex::Regex::new(
        r#"<polyline data-panel="([^"]*)" data-series="([^"]*)"[^>]* points="([^"]*)"/>"#,
    )
    .expect("regex");
    let scales: BTreeMap<String, (f64, f64, usize)> = panel
        .captures_iter(svg)
        .enumerate()
        .map(|(i, c)| {
            (
                c[1].to_string(),
                (c[2].parse().expect("x"), c[3].parse().expect("y"), i),
            )
        })
        .collect();
    line.captures_iter(svg)
        .map(|c| {
            let (x_max, y_max, i) = scales[&c[1]];
            let y0 = plot_top(i);
            let pts = c[3]
                .split(' ')
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    let (x, y): (f64, f64) = (x.parse().expect("x"), y.parse().expect("y"));
                    let w = 960.0 - 70.0 - 220.0;
                    ((x - 70.0) / w * x_max, (y0 + 230.0 - y) / 230.0 * y_max)
                })
                .collect();
            (c[1].to_string(), c[2].to_string(), pts)
        })
        .collect()
}

fn plot_top(i: usize) -> f64 {
    36.0 + i as f64 * (230.0 + 36.0 + 34.0)
}

#[test]
fn the_svg_holds_each_series_and_its_values() {
    let c = config(ONE_TYPE);
    let t = trace(
        "cloud: {default: {boot_s: 60, price_per_hour: 2.0}}\n\
         workload: [{at_s: 0, count: 4, resources: {CPU: 1}, duration_s: 100}]\n",
    );
    let r = run(&c, &t);
    let svg = plot::svg(&[("one".to_string(), &r)]);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    let lines = polylines(&svg);
    let names: Vec<(&str, &str)> = lines
        .iter()
        .map(|(p, s, _)| (p.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("nodes by type", "w"),
            ("pending work (units)", "pending work"),
            ("cost (cumulative)", "cost")
        ]
    );
    // Every sample's value is on its line (the step lines add corner points).
    for (panel, _, pts) in &lines {
        for s in &r.series {
            let want = match panel.as_str() {
                "nodes by type" => s.nodes["w"] as f64,
                "pending work (units)" => s.pending as f64,
                _ => s.cost,
            };
            let found = pts
                .iter()
                .any(|(x, y)| (x - s.t_s).abs() < 0.5 && (y - want).abs() < 0.02 * want.max(1.0));
            assert!(found, "{panel}: no point for t={} value {want}", s.t_s);
        }
    }
    // Two runs: one line per run and series, labelled by run.
    let svg = plot::svg(&[("a".to_string(), &r), ("b".to_string(), &r)]);
    let names: Vec<String> = polylines(&svg).into_iter().map(|(_, s, _)| s).collect();
    assert_eq!(
        names,
        [
            "a: w",
            "b: w",
            "a: pending work",
            "b: pending work",
            "a: cost",
            "b: cost"
        ]
    );
}

/// A spot type (first) and an on-demand type: every spot node is preempted once.
const SPOT: &str = r#"
cluster_name: sim
upscaling_speed: 100
idle_timeout_minutes: 1
head_node_type: head
provider: {type: local_processes}
rayscale: {preemption: {enabled: true}}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  spot: {resources: {CPU: 2}, max_workers: 10, node_config: {}}
  od: {resources: {CPU: 2}, max_workers: 10, node_config: {}}
"#;

#[test]
fn preempted_spot_work_is_counted_lost_and_rayscale_replaces_before_the_node_goes() {
    let t = trace(
        "step_s: 5\nseed: 3\ncloud:\n  default: {boot_s: 20}\n  types:\n    \
         spot: {preemption_mean_s: 30, notice_s: 60}\n\
         workload: [{at_s: 0, count: 2, resources: {CPU: 2}, duration_s: 300}]\n",
    );
    let on = run(&config(SPOT), &t).summary;
    let off = run(
        &config(&SPOT.replace("rayscale: {preemption: {enabled: true}}\n", "")),
        &t,
    )
    .summary;
    for s in [&on, &off] {
        assert!(s.preemptions >= 1, "{s:?}");
        assert!(s.work_lost_unit_s > 0.0, "{s:?}");
        assert_eq!(s.unplaced, 0, "the work is done in the end: {s:?}");
    }
    // With the notice handled, the preempted (type, zone) is avoided: the replacements are
    // on-demand, launched during the notice window, so the work is lost once per node and
    // done sooner than when the replacement waits for the node to go.
    assert!(
        on.types.get("od").is_some_and(|x| x.launched >= 2),
        "{on:?}"
    );
    assert!(
        on.end_s < off.end_s,
        "on {} s, off {} s",
        on.end_s,
        off.end_s
    );
}

#[test]
fn a_notice_window_must_be_positive() {
    let t: Trace = serde_yaml_ng::from_str(
        "cloud: {types: {s: {preemption_mean_s: 0}}}\nworkload: [{at_s: 0, count: 1, resources: {CPU: 1}, duration_s: 1}]\n",
    )
    .expect("parses");
    let e = t.validate("t.yaml").expect_err("refused").to_string();
    assert!(e.contains("cloud.types.s.preemption_mean_s"), "{e}");
}

#[test]
fn the_operators_limits_apply_in_simulation() {
    // Eight two-CPU tasks; a cost cap of three workers runs them three at a time.
    let capped = format!(
        "{ONE_TYPE}rayscale: {{max_hourly_cost: 3, expander: {{prices: {{head: 0, w: 1}}}}}}\n"
    );
    let t = trace(
        "step_s: 5\ncloud: {default: {boot_s: 30, price_per_hour: 1.0}}\n\
         workload: [{at_s: 0, count: 8, resources: {CPU: 2}, duration_s: 60}]\n",
    );
    let r = run(&config(&capped), &t);
    let peak = r.series.iter().map(|x| x.nodes["w"]).max().unwrap_or(0);
    assert_eq!(peak, 3, "{:?}", r.summary);
    assert_eq!((r.summary.placed, r.summary.unplaced), (8, 0));
    let free = run(&config(ONE_TYPE), &t);
    assert_eq!(free.series.iter().map(|x| x.nodes["w"]).max(), Some(8));
    // A budget of one draining node stops the eight one by one, later than all at once.
    let budget = format!("{ONE_TYPE}rayscale: {{disruption_budget: {{max_draining: 1}}}}\n");
    let slow = run(&config(&budget), &t);
    assert_eq!(slow.summary.terminated, 8);
    assert!(
        slow.summary.end_s > free.summary.end_s,
        "{} <= {}",
        slow.summary.end_s,
        free.summary.end_s
    );
}

/// Four-CPU workers, consolidation opted in (or not) by `rayscale`.
fn four_cpu(rayscale: &str) -> ClusterConfig {
    config(&format!(
        "cluster_name: sim\nupscaling_speed: 100\nidle_timeout_minutes: 1\nhead_node_type: head\n\
         provider: {{type: local_processes}}\navailable_node_types:\n  \
         head: {{resources: {{CPU: 0}}, node_config: {{}}}}\n  \
         w: {{resources: {{CPU: 4}}, max_workers: 10, node_config: {{}}}}\nrayscale: {rayscale}\n"
    ))
}

#[test]
fn consolidation_and_autostop_apply_in_simulation() {
    // Eight nodes' worth of one-CPU tasks; three in four end after five minutes, one in
    // four runs two hours: eight nodes a quarter used, for two hours.
    // (Interleaved, so that each node gets three short tasks and one long one.)
    let mut text =
        "step_s: 5\ncloud: {default: {boot_s: 30, price_per_hour: 1.0}}\nworkload:\n".to_string();
    for _ in 0..8 {
        text.push_str("  - {at_s: 0, count: 3, resources: {CPU: 1}, duration_s: 300}\n");
        text.push_str("  - {at_s: 0, count: 1, resources: {CPU: 1}, duration_s: 7200}\n");
    }
    let t = trace(&text);
    let plain = run(&four_cpu("{}"), &t);
    let packed = run(
        &four_cpu("{consolidation: {node_types: [w], after_s: 120, drain_deadline_s: 60}}"),
        &t,
    );
    for r in [&plain, &packed] {
        assert_eq!((r.summary.placed >= 32, r.summary.unplaced), (true, 0));
    }
    assert_eq!(plain.summary.consolidations, 0);
    assert!(packed.summary.consolidations >= 4, "{:?}", packed.summary);
    let (a, b) = (
        plain.summary.types["w"].node_hours,
        packed.summary.types["w"].node_hours,
    );
    assert!(b < 0.6 * a, "consolidated {b:.2} node-hours vs {a:.2}");
    // What it cost: the drained nodes' long tasks ran again from the start.
    assert!(packed.summary.consolidation_rerun_unit_s > 0.0);
    // Autostop: a min_workers node would stay for ever; with autostop it goes 2 minutes
    // after the work.
    let min1 = |rayscale: &str| {
        config(&format!(
            "{}rayscale: {rayscale}\n",
            ONE_TYPE.replace(
                "w: {resources: {CPU: 2}, max_workers: 10,",
                "w: {resources: {CPU: 2}, min_workers: 1, max_workers: 10,"
            )
        ))
    };
    let short = trace(
        "step_s: 5\nend_s: 1800\ncloud: {default: {boot_s: 30, price_per_hour: 1.0}}\n\
         workload: [{at_s: 0, count: 4, resources: {CPU: 2}, duration_s: 60}]\n",
    );
    let kept = run(&min1("{}"), &short);
    let stopped = run(&min1("{autostop_minutes: 2}"), &short);
    assert_eq!(kept.summary.autostopped_at_s, None);
    let at = stopped.summary.autostopped_at_s.expect("autostopped");
    assert!((200.0..300.0).contains(&at), "{at}");
    assert_eq!(stopped.series.last().map(|x| x.nodes["w"]), Some(0));
    assert_eq!(kept.series.last().map(|x| x.nodes["w"]), Some(1));
}

/// A type with a capacity: a group larger than it never holds nodes for nothing with
/// `rayscale.gangs: atomic` (all-or-nothing launches), where Ray's behaviour keeps what
/// came up; both place the smaller group that fits.
#[test]
fn a_capacity_cap_and_atomic_gangs_waste_no_node_hours_on_a_group_that_cannot_fit() {
    let t = trace(
        "end_s: 3600\ncloud: {default: {boot_s: 60}, types: {a: {capacity: 3}}}\n\
         workload:\n  \
         - {at_s: 0, kind: placement_group, strategy: STRICT_SPREAD, bundles: [{CPU: 4}, {CPU: 4}, {CPU: 4}, {CPU: 4}], duration_s: 600}\n  \
         - {at_s: 1200, kind: placement_group, strategy: STRICT_SPREAD, bundles: [{CPU: 4}, {CPU: 4}], duration_s: 600}\n",
    );
    let only_a = TWO_TYPES.replace(
        "  b: {resources: {CPU: 4}, max_workers: 10, node_config: {}}\n",
        "",
    );
    let ray = run(&config(&only_a), &t).summary;
    let atomic = run(
        &config(&format!("{only_a}rayscale: {{gangs: atomic}}\n")),
        &t,
    )
    .summary;
    // Ray: 3 of 4 come up and stay (the group of 2 then runs on them).
    assert!(ray.types["a"].capacity_errors >= 1, "{ray:?}");
    assert!(ray.types["a"].node_hours > 2.0, "{ray:?}");
    // Atomic: only the group of 2 ever holds nodes (about 2 x 11 min).
    assert!(atomic.types["a"].node_hours < 0.5, "{atomic:?}");
    assert_eq!(
        (ray.unplaced, atomic.unplaced),
        (1, 1),
        "{ray:?} {atomic:?}"
    );
}
