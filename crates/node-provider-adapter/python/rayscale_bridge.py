# rayscale's bridge to Ray's v1 node providers. rayscale runs this file with
# `python -u -c`; it makes Ray's own provider class and answers calls on it. It never
# re-implements a provider: every call goes to Ray's code.
#
# Protocol (line-delimited JSON; see crates/node-provider-adapter/src/client.rs):
#   in:  {"provider_type": ..., "cluster_config": {...}}        (first line)
#   out: {"ready": true, "pid": N} | {"fatal": "one line"}
#   in:  {"id": N, "method": "...", "params": {...}}
#   out: {"id": N, "result": ...} | {"id": N, "error": {"type", "category", "message"}}
# Calls run on a thread pool and are answered in any order.
import json
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

# The protocol keeps the real stdin and stdout on private descriptors (not inherited):
# child processes (the node updater's ssh, which reads its stdin) get /dev/null, and
# everything printed (Ray's prints, the updater's command output) goes to stderr, which
# rayscale forwards to its logs.
_proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
_proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
_devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(_devnull, 0)
os.dup2(2, 1)
sys.stdin = open(os.devnull)
sys.stdout = sys.stderr
_write_lock = threading.Lock()


def _send(obj):
    line = json.dumps(obj, default=str)
    with _write_lock:
        _proto.write(line + "\n")
        _proto.flush()


def _one_line(text):
    text = str(text).strip()
    return text.splitlines()[0] if text else ""


def _error(exc):
    category = getattr(exc, "category", None)
    message = getattr(exc, "description", None) or str(exc) or type(exc).__name__
    cause = exc.__cause__ or getattr(exc, "src_exc_info", None)
    if cause is not None and not isinstance(cause, tuple):
        message = "%s (%s: %s)" % (message, type(cause).__name__, _one_line(cause))
    return {
        "type": type(exc).__name__,
        "category": str(category) if category is not None else None,
        "message": _one_line(message),
    }


_EMPTY_LISTS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
    "cluster_synced_files",
)


class Bridge:
    def __init__(self, provider_type, cluster_config):
        from ray.autoscaler._private.providers import _get_node_provider

        self.cluster_config = cluster_config
        provider_config = dict(cluster_config.get("provider") or {})
        provider_config.setdefault("type", provider_type)
        self.provider = _get_node_provider(
            provider_config, cluster_config.get("cluster_name", "default")
        )
        self._autoscaling_config = None
        self._config_lock = threading.Lock()

    def autoscaling_config(self):
        # Ray's v2 config object, for Ray's RayInstaller (made once; Ray fills defaults).
        with self._config_lock:
            if self._autoscaling_config is None:
                from ray.autoscaler._private.util import (
                    fillout_defaults,
                    merge_setup_commands,
                )
                from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig

                raw = {k: v for k, v in self.cluster_config.items() if k != "rayscale"}
                kind = (raw.get("provider") or {}).get("type")
                # Ray's config object fills in the provider's defaults and merges
                # `setup_commands` itself, except for an on-premise config that names
                # its node type (it takes that for one `ray up` already prepared): do
                # what `ray up` would have done. An external module has no defaults.
                if kind == "local":
                    raw = fillout_defaults(raw)
                    merge_setup_commands(raw)
                elif kind == "external":
                    for key in _EMPTY_LISTS:
                        raw.setdefault(key, [])
                    for key in ("file_mounts", "auth"):
                        raw.setdefault(key, {})
                self._autoscaling_config = AutoscalingConfig(raw)
            return self._autoscaling_config

    # -- the v1 interface --------------------------------------------------------------
    def non_terminated_nodes(self, tag_filters):
        return list(self.provider.non_terminated_nodes(tag_filters or {}))

    def describe(self, tag_filters):
        out = []
        for node_id in self.provider.non_terminated_nodes(tag_filters or {}):
            try:
                tags = self.provider.node_tags(node_id)
                running = bool(self.provider.is_running(node_id))
                ip = self.provider.internal_ip(node_id)
            except Exception as e:
                # Skipped only when it is gone since the list; any other failure fails
                # the whole answer (a node left out would look terminated).
                if node_id in self.provider.non_terminated_nodes({}):
                    raise
                logging.getLogger("rayscale.bridge").info(
                    "node %s gone while read: %s", node_id, _one_line(e)
                )
                continue
            out.append(
                {
                    "id": node_id,
                    "tags": dict(tags or {}),
                    "running": running,
                    "internal_ip": ip,
                }
            )
        return out

    def create_node_with_resources_and_labels(
        self, node_config, tags, count, resources, labels
    ):
        made = self.provider.create_node_with_resources_and_labels(
            node_config or {}, tags, int(count), resources or {}, labels or {}
        )
        if isinstance(made, dict):
            return list(made.keys())
        return None

    def terminate_nodes(self, node_ids):
        self.provider.terminate_nodes(list(node_ids))
        return None

    def node_tags(self, node_id):
        return dict(self.provider.node_tags(node_id) or {})

    def set_node_tags(self, node_id, tags):
        self.provider.set_node_tags(node_id, tags)
        return None

    def is_running(self, node_id):
        return bool(self.provider.is_running(node_id))

    def is_terminated(self, node_id):
        return bool(self.provider.is_terminated(node_id))

    def internal_ip(self, node_id):
        return self.provider.internal_ip(node_id)

    def external_ip(self, node_id):
        return self.provider.external_ip(node_id)

    def install_ray(self, node_id, node_type, head_ip):
        # Ray's own installer: its NodeUpdater runs the file mounts, initialization,
        # setup and start commands over SSH and sets the node's status tag.
        from ray.autoscaler.v2.instance_manager.ray_installer import RayInstaller
        from ray.core.generated.instance_manager_pb2 import Instance

        instance = Instance(cloud_instance_id=node_id, instance_type=node_type)
        RayInstaller(self.provider, self.autoscaling_config()).install_ray(
            instance, head_ip
        )
        return None

    def ping(self):
        return os.getpid()


METHODS = {
    "non_terminated_nodes",
    "describe",
    "create_node_with_resources_and_labels",
    "terminate_nodes",
    "node_tags",
    "set_node_tags",
    "is_running",
    "is_terminated",
    "internal_ip",
    "external_ip",
    "install_ray",
    "ping",
}


def _serve(bridge, request):
    rid = request.get("id")
    method = request.get("method")
    try:
        if method not in METHODS:
            raise NotImplementedError("unknown method %r" % (method,))
        result = getattr(bridge, method)(**(request.get("params") or {}))
        _send({"id": rid, "result": result})
    except BaseException as e:  # noqa: B036 - every failure is the caller's answer
        logging.getLogger("rayscale.bridge").info(
            "%s failed: %s: %s", method, type(e).__name__, _one_line(e)
        )
        _send({"id": rid, "error": _error(e)})


def main():
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:  # plain lines, no colours, for the logs
        from ray.autoscaler._private.cli_logger import cli_logger

        cli_logger.configure(log_style="record", color_mode="false")
    except Exception:  # noqa: BLE001 - cosmetic
        pass
    first = _proto_in.readline()
    try:
        init = json.loads(first)
        bridge = Bridge(init["provider_type"], init["cluster_config"])
    except BaseException as e:  # noqa: B036
        _send({"fatal": "%s: %s" % (type(e).__name__, _one_line(e))})
        return 1
    _send({"ready": True, "pid": os.getpid()})
    pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rayscale-bridge")
    # Installs (minutes each) have their own threads, as many as Ray's
    # max_concurrent_installs, so that they never hold up the other calls.
    installs = ThreadPoolExecutor(max_workers=50, thread_name_prefix="rayscale-install")
    for line in _proto_in:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            logging.getLogger("rayscale.bridge").warning("not a request: %.200s", line)
            continue
        (installs if request.get("method") == "install_ray" else pool).submit(
            _serve, bridge, request
        )
    # rayscale closed the pipe (it exited): leave at once; calls in flight die with us.
    return 0


if __name__ == "__main__":
    os._exit(main() or 0)
