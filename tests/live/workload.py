"""Workloads for rayscale's live tests and demo, run against a live cluster.

usage: workload.py ADDRESS MODE [ARGS]
  tasks N CPUS SECONDS   N tasks of {CPU: CPUS} sleeping SECONDS; prints "done N" and the
                         number of distinct nodes they ran on
  spread N [RESOURCE]    a STRICT_SPREAD placement group of N {CPU: 1} bundles (with
                         {RESOURCE: 1} in each when given); prints the distinct node count
                         of its bundles
  infeasible             submits a {GPU: 8} task and leaves it pending for 60 s
  nested N M SECONDS     N parent tasks of {CPU: 1}, each blocked in ray.get on M child
                         tasks of {CPU: 1} sleeping SECONDS (Ray lends the parent's CPU to
                         another task meanwhile), then working SECONDS more once resumed;
                         prints "done N" and the distinct node count
  why N CPUS SECONDS     a {GPU: 8} task and N tasks of {CPU: CPUS} sleeping SECONDS, left
                         to run (or wait) until SECONDS have passed; prints "submitted"
  consolidate SECONDS    brings up two {CPU: 2} workers, then runs one retriable {CPU: 1}
                         task of SECONDS on each (soft node affinity: a retry may go
                         anywhere); prints "done 2 on K nodes" (K: where they finished)
  console N CPUS SECONDS WAIT
                         as `tasks`, with the autoscaler's events printed to this job's
                         console as Ray prints them ("(autoscaler +2s) ..."), then a
                         {CPU: 64} task left pending for WAIT s; prints "done N" at the end
"""
import sys
import time

import ray


def main() -> int:
    address, mode, *args = sys.argv[1:]
    # Only `console` wants the cluster's log lines (the autoscaler's events among them).
    ray.init(address=address, log_to_driver=mode == "console", logging_level="ERROR")
    if mode == "console":
        n, cpus, secs, wait = int(args[0]), float(args[1]), float(args[2]), float(args[3])

        @ray.remote(num_cpus=cpus)
        def step(i):
            time.sleep(secs)
            return i

        done = len(ray.get([step.remote(i) for i in range(n)]))

        @ray.remote(num_cpus=64)
        def too_big():
            return 1

        ray.wait([too_big.remote()], timeout=wait)
        print(f"done {done}", flush=True)
    elif mode == "tasks":
        n, cpus, secs = int(args[0]), float(args[1]), float(args[2])

        @ray.remote(num_cpus=cpus)
        def work(i):
            time.sleep(secs)
            return ray.get_runtime_context().get_node_id()

        t0 = time.time()
        nodes = ray.get([work.remote(i) for i in range(n)])
        print(f"done {len(nodes)} on {len(set(nodes))} nodes in {time.time() - t0:.1f}s", flush=True)
    elif mode == "spread":
        from ray.util.placement_group import placement_group, placement_group_table

        n = int(args[0])
        bundle = {"CPU": 1, **({args[1]: 1} if len(args) > 1 else {})}
        pg = placement_group([bundle] * n, strategy="STRICT_SPREAD")
        ray.get(pg.ready(), timeout=180)
        nodes = placement_group_table(pg)["bundles_to_node_id"]
        print(f"spread {len(set(nodes.values()))} distinct nodes for {n} bundles", flush=True)
    elif mode == "nested":
        n, m, secs = int(args[0]), int(args[1]), float(args[2])

        @ray.remote(num_cpus=1)
        def child(i):
            time.sleep(secs)
            return i

        @ray.remote(num_cpus=1)
        def parent(i):
            # Blocked here, the parent gives its CPU back; when the children are done it
            # resumes, and its node may run more tasks than it has CPUs for a while.
            got = ray.get([child.remote(j) for j in range(m)])
            time.sleep(secs)
            return (len(got), ray.get_runtime_context().get_node_id())

        t0 = time.time()
        out = ray.get([parent.remote(i) for i in range(n)])
        assert all(k == m for k, _ in out), out
        nodes = {node for _, node in out}
        print(f"done {len(out)} on {len(nodes)} nodes in {time.time() - t0:.1f}s", flush=True)
    elif mode == "why":
        n, cpus, secs = int(args[0]), float(args[1]), float(args[2])

        @ray.remote(num_gpus=8)
        def never():
            return 1

        @ray.remote(num_cpus=cpus)
        def hold(i):
            time.sleep(secs)
            return i

        refs = [never.remote()] + [hold.remote(i) for i in range(n)]
        print("submitted", flush=True)
        ray.wait(refs, num_returns=len(refs), timeout=secs)
    elif mode == "consolidate":
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        secs = float(args[0])

        @ray.remote(num_cpus=2)
        def warm(i):
            time.sleep(2)
            return i

        ray.get([warm.remote(i) for i in range(2)])
        deadline = time.time() + 120
        while True:
            workers = [
                n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0
            ]
            if len(workers) >= 2 or time.time() > deadline:
                break
            time.sleep(1)

        @ray.remote(num_cpus=1, max_retries=3)
        def long(i):
            time.sleep(secs)
            return ray.get_runtime_context().get_node_id()

        refs = [
            long.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(w["NodeID"], soft=True)
            ).remote(i)
            for i, w in enumerate(workers[:2])
        ]
        print(f"placed on {len(workers[:2])} nodes", flush=True)
        out = ray.get(refs)
        print(f"done {len(out)} on {len(set(out))} nodes", flush=True)
    elif mode == "infeasible":
        @ray.remote(num_gpus=8)
        def never():
            return 1

        ref = never.remote()
        print("submitted", flush=True)
        ready, _ = ray.wait([ref], timeout=60)
        print(f"ready {len(ready)}", flush=True)
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
